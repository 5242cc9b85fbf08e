"""A server's start loads what serving needs: jsonrpcserver through its package (its public API,
which brings its asyncio, JSON-schema and HTTP parts along), and no search of the installed
packages' metadata (pydantic's plugins)."""

from __future__ import annotations

import subprocess
import sys


def test_server_start_loads_jsonrpcserver_whole_and_no_package_metadata():
    code = (
        "import sys, crs_bridge.cli, crs_bridge.bridge.server, crs_bridge.bridge.protocol; "
        "print('jsonrpcserver' in sys.modules, 'importlib.metadata' in sys.modules)"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == ["True", "False"]
