"""jsonrpcserver's synchronous dispatcher, loaded without the rest of its package.

``import jsonrpcserver`` runs the package's ``__init__``, which imports everything it offers: the
asyncio dispatcher (asyncio), a small HTTP server (http.server) and the JSON-schema request
validator (jsonschema, attrs, referencing), about 110 ms of a start-up budget of 300 ms. The
server needs none of them: it dispatches synchronously and checks requests itself
(:func:`bridge.protocol.request_problem`). So this module loads jsonrpcserver's ``dispatcher`` and
``response`` modules, which import none of them, from the package's directory without running
its ``__init__``; the same functions ``jsonrpcserver.dispatch_to_serializable`` calls. Their
``oslash.either`` is loaded the same way, without the other monads oslash's ``__init__`` imports.

An ``import jsonrpcserver`` later (a test, say) runs the real ``__init__``, which reuses the
modules loaded here: ``jsonrpcserver.Success`` is :data:`Success` (and ``oslash.Left`` is
``oslash.either.Left``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def _bare_packages(*packages: str) -> Iterator[None]:
    """Within the block, each of ``packages`` not imported yet is a bare, uninitialised package
    (it knows its ``__path__`` and ran nothing), so that importing one of its modules runs only
    that module; the bare packages are withdrawn again afterwards."""
    bare = [package for package in packages if package not in sys.modules]
    for package in bare:
        spec = importlib.util.find_spec(package)
        if spec is None:
            raise ModuleNotFoundError(f"No module named '{package}'", name=package)
        sys.modules[package] = importlib.util.module_from_spec(spec)
    try:
        yield
    finally:
        for package in bare:
            del sys.modules[package]


# oslash's __init__ imports all its monads (2% of a server start); jsonrpcserver uses only Either.
with _bare_packages("jsonrpcserver", "oslash"):
    _dispatcher, _response, _result, _sentinels = (
        importlib.import_module(f"jsonrpcserver.{name}") for name in ("dispatcher", "response", "result", "sentinels")
    )

Success = _result.Success
Error = _result.Error
NODATA = _sentinels.NODATA


class Method:
    """An entry of jsonrpcserver's method table: calls ``invoke(name, *args, **kwargs)`` with
    whatever params a request brings (the method surface checks them itself).

    jsonrpcserver binds every request's params to its method's signature before the call, and
    computes that signature each time: some 30 µs for a ``functools.partial``, most of a small
    call's time. A signature given as ``__signature__`` is taken as it is, so the binding costs
    next to nothing and accepts the same params as ``(*args, **kwargs)`` always did.
    """

    __slots__ = ("name", "invoke")
    __signature__ = inspect.Signature(
        [
            inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
        ]
    )

    def __init__(self, name: str, invoke: Callable[..., Any]) -> None:
        self.name = name
        self.invoke = invoke

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # any name may be a param, even "self"
        return self.invoke(self.name, *args, **kwargs)


def dispatch_to_serializable(request: Any, methods: dict, *, deserializer: Any, validator: Any) -> Any:
    """What :func:`jsonrpcserver.dispatch_to_serializable` returns, for the same arguments."""
    return _dispatcher.dispatch_to_response_pure(
        deserializer=deserializer,
        validator=validator,
        post_process=_response.to_serializable_one,
        context=_sentinels.NOCONTEXT,
        methods=methods,
        request=request,
    )
