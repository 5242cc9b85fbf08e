"""A Python client of crs-bridge: start a server, call its methods, drive scheduler objects.

Usage::

    from crs_bridge.client import BridgeClient, RpcError

    with BridgeClient() as bridge:                   # starts `crs-bridge serve`; stopped on exit
        s = bridge.static()                           # PVE::RS::ResourceScheduling::Static->new
        s.add_node("node1", 16, 64 << 30)
        s.add_node("node2", 16, 64 << 30)
        s.add_service("vm:100", {"stats": {"maxcpu": 4.0, "maxmem": 8 << 30},
                                 "running": True, "current-node": "node1"})
        s.calculate_node_imbalance()                  # 1.0 (raw: all load on one of two nodes)
        try:
            s.add_node("node1", 16, 64 << 30)
        except RpcError as err:                       # err.code -32000, err.message
            print(err.message)                        # node 'node1' already exists

* :class:`BridgeClient` owns one server process. :meth:`~BridgeClient.call` sends any method
  with its params (a list or a dict) and returns the result or raises :class:`RpcError`, which
  carries the JSON-RPC ``code``, ``message`` and ``data``. :meth:`~BridgeClient.static` and
  :meth:`~BridgeClient.dynamic` create scheduler objects (:class:`Static`, :class:`Dynamic`)
  whose methods are the binding's (libpve-rs-perl 0.13.0's ``PVE::RS::ResourceScheduling::*``),
  with the binding's arguments and result shapes (JSON values: dicts, lists, numbers).
* The server is ``crs-bridge serve``: the console script next to ``sys.executable``, else
  ``python -P -m crs_bridge serve``; ``$CRS_BRIDGE_COMMAND`` (shell-like words, as for the Perl
  client) or the ``command`` argument replace it; ``args`` are appended (``["--max-nodes", "10"]``).
* Reads time out after ``timeout`` seconds (:class:`TimeoutError`) instead of hanging.
* Requests are sent one at a time and each answer is awaited; for bulk traffic write from a
  thread while reading (:meth:`~BridgeClient.send` / :meth:`~BridgeClient.read`).
* The pytest plugin :mod:`crs_bridge.pytest_plugin` (installed with the package) gives a test a
  started client as the fixture ``crs_bridge``.
"""

from __future__ import annotations

import itertools
import os
import select
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson

__all__ = ["BridgeClient", "Dynamic", "RpcError", "Scheduler", "Static", "cli_command", "server_command"]

#: Framings of a message: one JSON message per line (the default), or LSP's Content-Length header.
NDJSON = "ndjson"
CONTENT_LENGTH = "content-length"

#: Environment variable naming the server's command line (shell-like words), as for the Perl client.
COMMAND_VARIABLE = "CRS_BRIDGE_COMMAND"


def cli_command() -> list[str]:
    """The ``crs-bridge`` command of this Python: the console script next to ``sys.executable``,
    else ``python -P -m crs_bridge`` (``-P``: the working directory cannot shadow the package)."""
    script = Path(sys.executable).with_name("crs-bridge")
    return [str(script)] if script.exists() else [sys.executable, "-P", "-m", "crs_bridge"]


def server_command() -> list[str]:
    """The command line that starts a server: ``$CRS_BRIDGE_COMMAND`` split into words (as the
    Perl client reads it), else ``crs-bridge serve`` (:func:`cli_command`)."""
    if os.environ.get(COMMAND_VARIABLE):
        return shlex.split(os.environ[COMMAND_VARIABLE])
    return [*cli_command(), "serve"]


class RpcError(Exception):
    """A JSON-RPC error response: ``code`` (int, e.g. -32602 invalid params, -32000 a scheduling
    error with upstream's text), ``message`` (str) and ``data`` (any JSON value; None if absent;
    for -32602 ``{"errors": [{"loc", "msg"}, ...]}``)."""

    def __init__(self, error: dict) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data")


class BridgeClient:
    """One server process and a connection to it; a context manager that stops the server.

    ``args``: extra words after the server command (``serve``'s flags). ``command``: the whole
    server command instead of :func:`server_command`'s. ``framing``: :data:`NDJSON` or
    :data:`CONTENT_LENGTH` for every message sent. ``timeout``: seconds to wait for an answer
    (None: no limit). ``cwd``, ``env``: of the server process (default: this process's).
    ``capture_stderr``: keep the server's stderr for :meth:`stderr`; False lets it write to this
    process's stderr.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        framing: str = NDJSON,
        timeout: float | None = 30.0,
        command: Sequence[str] | None = None,
        cwd: str | os.PathLike | None = None,
        env: dict[str, str] | None = None,
        capture_stderr: bool = True,
    ) -> None:
        self.framing = framing
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._buf = b""
        self._stderr = tempfile.TemporaryFile() if capture_stderr else None  # noqa: SIM115 (closed in __exit__)
        self.process = subprocess.Popen(
            [*(command or server_command()), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=cwd,
            env=env,
        )

    # -- scheduler objects ----------------------------------------------------------------

    def static(self, imbalance: str | None = None) -> Static:
        """A new :class:`Static` scheduler (``imbalance``: "raw" or "normalized"; None: the server's default)."""
        return Static(self, imbalance)

    def dynamic(self, imbalance: str | None = None) -> Dynamic:
        """A new :class:`Dynamic` scheduler (``imbalance`` as for :meth:`static`)."""
        return Dynamic(self, imbalance)

    # -- JSON-RPC -------------------------------------------------------------------------

    def call(self, method: str, params: Any = None) -> Any:
        """Send a request and return its result; raise :class:`RpcError` for an error response.
        ``params``: a list (positional) or a dict (named); None sends none."""
        response = self.request(method, params)
        if "error" in response:
            raise RpcError(response["error"])
        return response["result"]

    def request(self, method: str, params: Any = None) -> dict:
        """Send a request and return the whole response object. The late answers of earlier
        requests (given up after a :class:`TimeoutError`) are skipped, never returned for this one."""
        ident = next(self._ids)
        self.send(self.message(method, params, ident))
        while True:
            response = self.read()
            late = isinstance(response, dict) and type(response.get("id")) is int and response["id"] < ident
            if not late:
                return response

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
        """Read one answer: ``(framing, body bytes)``. Raises :class:`TimeoutError` after
        ``timeout`` seconds without data, :class:`EOFError` when the server closed its output."""
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
        """Close the server's stdin (end of input: it answers what it read and exits) and
        return its exit status."""
        if not self.process.stdin.closed:
            self.process.stdin.close()
        return self.process.wait(timeout or self.timeout)

    def stderr(self) -> str:
        """Everything the server wrote to stderr so far (its logs; "" when not captured)."""
        if self._stderr is None:
            return ""
        # pread, not seek and read: the server writes through the same open file, whose offset a
        # seek would move back, so that its next line overwrote the start of the log.
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    def __enter__(self) -> BridgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()


class Scheduler:
    """A scheduler object on the server (``scheduler.new``), with the methods both binding
    packages have. Each method sends ``scheduler.<name>`` with the handle and the binding's
    arguments in the binding's order, and returns the result in the binding's shape; a failed
    call raises :class:`RpcError` and changes nothing. ``with`` frees the object on the server
    at the end of the block (:meth:`free`).

    Units: cpu in cores, memory in bytes (int), loads and imbalances are fractions.
    """

    #: "static" or "dynamic": the server's mode of the object.
    mode: ClassVar[str]

    def __init__(self, client: BridgeClient, imbalance: str | None = None) -> None:
        params = {"mode": self.mode} | ({"imbalance": imbalance} if imbalance else {})
        self.client = client
        #: The server's name of this object (``s1``, ``s2``, ...; never reused).
        self.handle: str = client.call("scheduler.new", params)["scheduler"]

    def call(self, method: str, *args: Any) -> Any:
        """``scheduler.<method>`` on this object with positional ``args`` (after the handle)."""
        return self.client.call(f"scheduler.{method}", [self.handle, *args])

    def free(self) -> None:
        """Release the object on the server (``scheduler.free``); later calls raise -32001."""
        self.client.call("scheduler.free", {"scheduler": self.handle})

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def remove_node(self, name: str) -> None:
        """Remove a node and the resources only it holds (an unknown name is no error)."""
        self.call("remove_node", name)

    def list_nodes(self) -> list[str]:
        """The node names, in insertion order."""
        return self.call("list_nodes")

    def contains_node(self, name: str) -> bool:
        """Whether a node of that name exists."""
        return bool(self.call("contains_node", name))

    def calculate_node_imbalance(self) -> float:
        """The cluster's imbalance (coefficient of variation of the node loads; the object's formula)."""
        return self.call("calculate_node_imbalance")

    def score_best_balancing_migration_candidates(self, candidates: list[dict], limit: int) -> list[dict]:
        """At most ``limit`` migrations ``{migration: {sid, source-node, target-node}, imbalance}``,
        lowest imbalance first. ``candidates``: compact ``{leader, resources, nodes}`` (as HA
        builds them) or expanded ``{sid, source-node, target-node, stats}``."""
        return self.call("score_best_balancing_migration_candidates", candidates, limit)

    def score_best_balancing_migration_candidates_topsis(self, candidates: list[dict], limit: int) -> list[dict]:
        """As :meth:`score_best_balancing_migration_candidates`, ranked by TOPSIS (best first)."""
        return self.call("score_best_balancing_migration_candidates_topsis", candidates, limit)

    def select_best_balancing_migration(self, candidates: list[dict], threshold: float | None = None) -> dict | None:
        """Extra: the first candidate (input order) at or under ``threshold``, else the best; None
        without candidates."""
        return self.call("select_best_balancing_migration", candidates, threshold)

    def select_best_balancing_migration_topsis(self, candidates: list[dict]) -> dict | None:
        """Extra: TOPSIS's best candidate; None without candidates."""
        return self.call("select_best_balancing_migration_topsis", candidates)

    def plan_rebalance(self, candidates: list[dict], **options: Any) -> dict:
        """Extra: the HA manager's rebalancing as a dry run on this object's state (unchanged).
        ``options``: ``method``, ``threshold``, ``margin`` (fractions), ``max_steps``, ``allow_repeat``."""
        params = {"scheduler": self.handle, "candidates": candidates, **options}
        return self.client.call("scheduler.plan_rebalance", params)

    def apply(self, mutations: list[list]) -> None:
        """Extra: many mutations in one request, in order, all or nothing; each entry is
        ``[method, args...]`` with a mutator of this mode and its arguments."""
        self.call("apply", mutations)


class Static(Scheduler):
    """``PVE::RS::ResourceScheduling::Static``: nodes by capacity, services by their configured maxima."""

    mode = "static"

    def add_node(self, name: str, maxcpu: int, maxmem: int) -> None:
        """Add a node of ``maxcpu`` cores and ``maxmem`` bytes."""
        self.call("add_node", name, maxcpu, maxmem)

    def add_service(self, sid: str, service: dict) -> None:
        """Add a service ``{stats: {maxcpu, maxmem}, running, current-node, target-node?}``."""
        self.call("add_service", sid, service)

    def add_service_usage_to_node(self, name: str, sid: str, stats: dict) -> None:
        """Legacy: count service ``sid`` (``{maxcpu, maxmem}``) on node ``name`` as well."""
        self.call("add_service_usage_to_node", name, sid, stats)

    def remove_service_usage(self, sid: str) -> None:
        """Remove a service (an unknown sid is no error)."""
        self.call("remove_service_usage", sid)

    def score_nodes_to_start_service(self, stats: dict) -> list[list]:
        """``[[node, score], ...]`` in node order for starting a service of ``{maxcpu, maxmem}``;
        score in [0, 1], higher is better."""
        return self.call("score_nodes_to_start_service", stats)


class Dynamic(Scheduler):
    """``PVE::RS::ResourceScheduling::Dynamic``: nodes and resources by measured usage."""

    mode = "dynamic"

    def add_node(self, name: str, stats: dict) -> None:
        """Add a node with measured ``{cpu, maxcpu, mem, maxmem}``."""
        self.call("add_node", name, stats)

    def add_resource(self, sid: str, resource: dict) -> None:
        """Add a resource ``{stats: {cpu, maxcpu, mem, maxmem}, running, current-node, target-node?}``."""
        self.call("add_resource", sid, resource)

    def remove_resource(self, sid: str) -> None:
        """Remove a resource (an unknown sid is no error)."""
        self.call("remove_resource", sid)

    def score_nodes_to_start_resource(self, stats: dict) -> list[list]:
        """``[[node, score], ...]`` in node order for starting a resource of
        ``{cpu, maxcpu, mem, maxmem}``; score in [0, 1], higher is better."""
        return self.call("score_nodes_to_start_resource", stats)
