"""bridge.dispatch: jsonrpcserver's dispatcher without the rest of its package.

It must answer as ``jsonrpcserver.dispatch_to_serializable`` does, keep jsonrpcserver importable
as a whole afterwards, and keep the server's start free of the modules it exists to avoid.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from crs_bridge.bridge import dispatch


def _methods():
    def add(a, b):
        return dispatch.Success(a + b)

    def refuse():
        return dispatch.Error(-32000, "no", {"why": "because"})

    def crash():
        raise RuntimeError("boom")

    return {"add": add, "refuse": refuse, "crash": crash}


def _identity(request):
    return request


@pytest.mark.parametrize(
    "request_",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "add", "params": [2, 3]},
        {"jsonrpc": "2.0", "id": "x", "method": "add", "params": {"a": 1, "b": 2}},
        {"jsonrpc": "2.0", "id": 2, "method": "add", "params": [1]},
        {"jsonrpc": "2.0", "id": 3, "method": "refuse"},
        {"jsonrpc": "2.0", "id": 4, "method": "crash"},
        {"jsonrpc": "2.0", "id": 5, "method": "missing"},
        {"jsonrpc": "2.0", "method": "add", "params": [1, 2]},
    ],
)
def test_answers_as_jsonrpcserver_does(request_):
    import jsonrpcserver

    ours = dispatch.dispatch_to_serializable(request_, _methods(), deserializer=_identity, validator=_identity)
    theirs = jsonrpcserver.dispatch_to_serializable(request_, _methods(), deserializer=_identity, validator=_identity)
    assert ours == theirs


def test_jsonrpcserver_stays_importable_with_the_same_classes():
    import jsonrpcserver
    from jsonrpcserver.sentinels import NODATA

    assert jsonrpcserver.Success is dispatch.Success
    assert jsonrpcserver.Error is dispatch.Error
    assert NODATA is dispatch.NODATA


def test_oslash_stays_importable_with_the_same_either():
    import oslash
    from oslash.either import Left

    assert oslash.Left is Left
    assert oslash.List is not None  # the package's __init__ ran in full


def test_server_start_loads_no_asyncio_jsonschema_http_server_or_unused_monads():
    unwanted = ("asyncio", "jsonschema", "http.server", "importlib.metadata", "oslash", "oslash.list")
    code = (
        "import sys, crs_bridge.bridge.cli, crs_bridge.bridge.server, crs_bridge.bridge.protocol; "
        f"print(sorted(m for m in {unwanted!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([1, "a", None], ((1, "a", None), {})),
        ({"x": 1, "y": [2]}, ((), {"x": 1, "y": [2]})),
        ({"self": 1, "args": 2}, ((), {"self": 1, "args": 2})),  # was -32603 (found in review)
        (None, ((), {})),
    ],
)
def test_a_method_takes_any_params_and_passes_them_on_with_its_name(params, expected):
    calls = []

    def invoke(name, /, *args, **kwargs):
        calls.append((name, args, kwargs))
        return dispatch.Success("done")

    request = {"jsonrpc": "2.0", "id": 7, "method": "m"}
    if params is not None:
        request["params"] = params
    answer = dispatch.dispatch_to_serializable(
        request, {"m": dispatch.Method("m", invoke)}, deserializer=_identity, validator=_identity
    )
    assert answer == {"jsonrpc": "2.0", "result": "done", "id": 7}
    assert calls == [("m", *expected)]


def test_a_methods_signature_is_given_not_computed():
    import inspect

    method = dispatch.Method("m", lambda name: None)
    assert inspect.signature(method) is dispatch.Method.__signature__
