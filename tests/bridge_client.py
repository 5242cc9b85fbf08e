"""A small client that starts the real crs-bridge server process and talks JSON-RPC to it.

Usage::

    from tests.bridge_client import BridgeClient, RpcError

    with BridgeClient() as bridge:                    # starts `python -m crs_bridge serve`
        handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
        bridge.call("scheduler.add_node", [handle, "node1", 8, 2**34])
        try:
            bridge.call("scheduler.add_node", [handle, "node1", 8, 2**34])
        except RpcError as err:
            assert err.code == -32000

* :meth:`BridgeClient.call` returns the result or raises :class:`RpcError` (code, message, data);
  :meth:`BridgeClient.request` returns the whole response object; :meth:`BridgeClient.notify`
  sends a notification. :meth:`BridgeClient.send_raw` / :meth:`BridgeClient.read` work with raw
  bytes and parsed responses, for framing and batch tests.
* ``framing="content-length"`` frames every message LSP-style instead of one per line.
* Reads time out (``timeout`` seconds, default 30) instead of hanging a test.
* :meth:`BridgeClient.close` closes the server's stdin and returns its exit status;
  :meth:`BridgeClient.stderr` returns what the server logged.

Requests are sent one at a time and each answer is awaited, so there is no pipelining deadlock
to worry about; for bulk traffic write from a thread while reading.
"""

from __future__ import annotations

import itertools
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
NDJSON = "ndjson"
CONTENT_LENGTH = "content-length"


def crs_bridge() -> list[str]:
    """The installed console script, or ``python -m crs_bridge`` when it is not on this venv."""
    script = Path(sys.executable).with_name("crs-bridge")
    if script.exists():
        return [str(script)]
    found = shutil.which("crs-bridge")
    return [found] if found else [sys.executable, "-m", "crs_bridge"]


class RpcError(Exception):
    """A JSON-RPC error response: ``code``, ``message`` and ``data`` (None if absent)."""

    def __init__(self, error: dict) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data")


class BridgeClient:
    """One server process (``python -m crs_bridge serve`` plus ``args``) and a connection to it."""

    def __init__(self, args: Sequence[str] = (), framing: str = NDJSON, timeout: float = 30.0) -> None:
        self.framing = framing
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._buf = b""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crs_bridge", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=ROOT,
        )

    # -- JSON-RPC -------------------------------------------------------------------------

    def call(self, method: str, params: Any = None) -> Any:
        """Send a request and return its result; raise RpcError for an error response."""
        response = self.request(method, params)
        if "error" in response:
            raise RpcError(response["error"])
        return response["result"]

    def request(self, method: str, params: Any = None) -> dict:
        """Send a request and return the whole response object."""
        ident = next(self._ids)
        self.send(self.message(method, params, ident))
        return self.read()

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer is expected)."""
        self.send(self.message(method, params))

    @staticmethod
    def message(method: str, params: Any = None, ident: Any = None) -> dict:
        """A request object (a notification when ``ident`` is None)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if ident is not None:
            message["id"] = ident
        return message

    def send(self, message: Any) -> None:
        """Send any JSON value (a request, a batch, ...) in this client's framing."""
        self.send_raw(orjson.dumps(message))

    # -- bytes ----------------------------------------------------------------------------

    def send_raw(self, body: bytes, framing: str | None = None) -> None:
        """Send ``body`` framed (``framing`` defaults to the client's)."""
        if (framing or self.framing) == CONTENT_LENGTH:
            data = b"Content-Length: %d\r\n\r\n" % len(body) + body
        else:
            data = body + b"\n"
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def read(self) -> Any:
        """Read one answer (either framing) and return it parsed."""
        return orjson.loads(self.read_raw()[1])

    def read_raw(self) -> tuple[str, bytes]:
        """Read one answer: ``(framing, body bytes)``."""
        line = self._line()
        if not line.lower().startswith(b"content-length:"):
            return NDJSON, line
        length = int(line.split(b":", 1)[1])
        while self._line().strip():
            pass
        return CONTENT_LENGTH, self._exactly(length)

    def _line(self) -> bytes:
        while b"\n" not in self._buf:
            self._more()
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _exactly(self, count: int) -> bytes:
        while len(self._buf) < count:
            self._more()
        body, self._buf = self._buf[:count], self._buf[count:]
        return body

    def _more(self) -> None:
        fd = self.process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.timeout)
        if not ready:
            raise TimeoutError(f"no answer from the server within {self.timeout} s")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise EOFError("the server closed its output")
        self._buf += chunk

    def pending_output(self, wait: float = 0.2) -> bytes:
        """Whatever the server writes within ``wait`` seconds (b"" if nothing): for asserting
        that a notification got no answer."""
        fd = self.process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            self._buf += os.read(fd, 1 << 16)
        data, self._buf = self._buf, b""
        return data

    # -- process --------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> int:
        """Close the server's stdin (end of input) and return its exit status."""
        if not self.process.stdin.closed:
            self.process.stdin.close()
        return self.process.wait(timeout or self.timeout)

    def stderr(self) -> str:
        """Everything the server wrote to stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def __enter__(self) -> BridgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self._stderr.close()
