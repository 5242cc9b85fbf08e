"""A server's start loads only what serving needs: no asyncio, no JSON-schema validator, no HTTP
server, and no search of the installed packages' metadata (pydantic's plugins)."""

from __future__ import annotations

import subprocess
import sys


def test_server_start_loads_no_asyncio_jsonschema_http_server_or_package_metadata():
    unwanted = ("asyncio", "jsonschema", "http.server", "importlib.metadata")
    code = (
        "import sys, crs_bridge.cli, crs_bridge.bridge.server, crs_bridge.bridge.protocol; "
        f"print(sorted(m for m in {unwanted!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
