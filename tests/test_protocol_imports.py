"""jsonrpcserver loaded without its package's ``__init__`` (bridge.protocol): the server's start
stays free of the modules that avoids, and jsonrpcserver stays importable as a whole afterwards,
sharing the classes the protocol answers with."""

from __future__ import annotations

import subprocess
import sys

from crs_bridge.bridge import protocol


def test_jsonrpcserver_stays_importable_with_the_same_classes():
    import jsonrpcserver
    from jsonrpcserver.sentinels import NODATA

    assert jsonrpcserver.Success is protocol.Success
    assert jsonrpcserver.Error is protocol.Error
    assert NODATA is protocol.NODATA


def test_oslash_stays_importable_with_the_same_either():
    import oslash
    from oslash.either import Left

    assert oslash.Left is Left
    assert oslash.List is not None  # the package's __init__ ran in full


def test_server_start_loads_no_asyncio_jsonschema_http_server_or_unused_monads():
    unwanted = ("asyncio", "jsonschema", "http.server", "importlib.metadata", "oslash", "oslash.list")
    code = (
        "import sys, crs_bridge.cli, crs_bridge.bridge.server, crs_bridge.bridge.protocol; "
        f"print(sorted(m for m in {unwanted!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
