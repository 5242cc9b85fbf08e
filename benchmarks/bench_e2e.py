"""End-to-end benchmark of the real server (``.venv/bin/crs-bridge serve``): request bytes in,
response bytes out.

Prints, per (nodes, candidates) size, method and candidate form (``expanded`` = a list of
Candidate, ``compact`` = a list of CompactCandidate bundles), for ``score_best_balancing_migrations``
with limit 10 on a whole Dynamic snapshot. The cluster: N nodes of random capacity and usage;
bundles of 1-3 resources on one node with up to 50 allowed targets each (C/50 bundles, some
C/25 resources, all of them in ``usage``); an expanded candidate is some 160 bytes of JSON (full
precision cpu floats, byte counts as integers), a compact request a tenth of the expanded one.


* ``e2e ms``: median over ``--runs`` of writing the request's bytes to the server's stdin until
  its answer's last byte is read (the request is encoded before the clock starts; each is sent
  after ``--gap`` seconds of quiet, as HA rounds come every 10 s);
* ``cpu ms``: the server's CPU time per request (user + system, averaged over the runs, freeing
  the request's memory after the answer included): less sensitive than ``e2e ms`` to other load
  on the machine, but counted in 10 ms ticks;
* ``engine ms``: the same scoring in-process on core objects (median; ``Scheduler``
  ``score_best_balancing_migration_candidates[_topsis]``, batch building included);
* the server-side breakdown (decode, validate, snapshot, candidates, score, encode) from a
  separate server run with ``--trace`` (phases appear in the trace when the server records them;
  "-" otherwise);
* upstream's Rust figures for this machine (library call, no JSON) for comparison;
* the request size and the server's peak RSS (VmHWM of a fresh server that served that size and
  form only).

Then: start-up (process start until the first answer: ``bridge.info``, and a small
``score_best_balancing_migrations``; and the CPU time of a server that starts, answers that and
exits), pipelined small calls per second (a thread writes
``--calls`` ``scheduler.contains_node`` requests while the main thread reads the answers) and
idle RSS. Compact and expanded answers are compared (they describe the same migrations).

Run: ``.venv/bin/python benchmarks/bench_e2e.py`` (``--help`` for options). ``--tree DIR`` runs
the server and the engine from another copy of ``bridge/`` and ``core/`` (e.g. a copy taken before
a change), to compare both under the same machine load.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
from trees import python_path

ROOT = Path(__file__).resolve().parent.parent
#: Environment of the server processes (``--tree`` sets PYTHONPATH, which wins over the editable install).
SERVER_ENV = dict(os.environ)
SERVER = [str(ROOT / ".venv" / "bin" / "crs-bridge"), "serve"]
GiB = 1 << 30
LIMIT = 10
SIZES = [(64, 10_000), (256, 100_000), (1024, 100_000)]
METHODS = ("bruteforce", "topsis")
FORMS = ("expanded", "compact")
#: Upstream's Rust library, measured on this machine (ms; library call, no JSON), limit 10.
RUST_MS = {
    ("bruteforce", 64, 10_000): 15.0,
    ("bruteforce", 256, 100_000): 305.0,
    ("bruteforce", 1024, 100_000): 1020.0,
    ("topsis", 64, 10_000): 9.0,
    ("topsis", 256, 100_000): 197.0,
    ("topsis", 1024, 100_000): 818.0,
}
PHASES = ("decode", "validate", "snapshot", "candidates", "score", "encode")
_PHASES_IN_TRACE = re.compile(r"<-- [\d.]+ ms \[([^\]]*)\]")


# -- the cluster ------------------------------------------------------------------------------


class Cluster:
    """A Dynamic cluster as wire JSON values (``usage``, both candidate forms) and as core objects."""

    def __init__(self, nodes: int, candidates: int, seed: int) -> None:
        rng = random.Random(seed)
        self.names = [f"pve{i:05d}" for i in rng.sample(range(10 * nodes), nodes)]
        self.nodes = [self._node(rng, name) for name in self.names]
        self.resources: list[dict] = []
        self.bundles: list[dict] = []
        self.expanded: list[dict] = []
        self._build_candidates(rng, candidates)

    @property
    def usage(self) -> dict:
        return {"mode": "dynamic", "nodes": self.nodes, "resources": self.resources}

    @staticmethod
    def _node(rng: random.Random, name: str) -> dict:
        maxcpu = rng.choice([8, 16, 32, 48, 64, 128])
        maxmem = rng.choice([32, 64, 128, 256, 512, 1024]) * GiB
        if rng.random() < 0.05:  # an idle node
            return {"name": name, "maxcpu": maxcpu, "maxmem": maxmem, "cpu": 0.0, "mem": 0}
        cpu, mem = maxcpu * rng.uniform(0.02, 1.2), int(maxmem * rng.uniform(0.05, 0.95))
        return {"name": name, "maxcpu": maxcpu, "maxmem": maxmem, "cpu": cpu, "mem": mem}

    def _resource(self, rng: random.Random, sid: str, node: str) -> dict:
        maxcpu = float(rng.choice([1, 2, 4, 8, 16]))
        maxmem = rng.choice([1, 2, 4, 8, 16, 32, 64]) * GiB
        stats = {
            "cpu": maxcpu * rng.uniform(0.05, 1.0),
            "maxcpu": maxcpu,
            "mem": int(maxmem * rng.uniform(0.2, 1.0)),
            "maxmem": maxmem,
        }
        resource = {"sid": sid, "stats": stats, "running": True, "current-node": node}
        self.resources.append(resource)
        return stats

    def _build_candidates(self, rng: random.Random, candidates: int) -> None:
        """Bundles of 1-3 resources on one node with up to 50 allowed targets each, and the same
        candidates expanded (leader's sid, the bundle's summed stats) in expansion order."""
        per_bundle = min(len(self.names) - 1, 50)
        next_id = 100
        while len(self.expanded) < candidates:
            node = rng.choice(self.names)
            members = [f"vm:{next_id + k}" for k in range(rng.randint(1, 3))]
            next_id += len(members)
            total = {"cpu": 0.0, "maxcpu": 0.0, "mem": 0, "maxmem": 0}
            for sid in members:
                for key, value in self._resource(rng, sid, node).items():
                    total[key] += value
            others = [name for name in self.names if name != node]
            targets = rng.sample(others, min(per_bundle, candidates - len(self.expanded)))
            self.bundles.append({"leader": members[0], "nodes": targets, "resources": members})
            for target in targets:
                self.expanded.append({"sid": members[0], "source-node": node, "target-node": target, "stats": total})

    def candidates(self, form: str) -> list[dict]:
        return self.expanded if form == "expanded" else self.bundles

    # -- the same as core objects, for engine-only timing --

    def scheduler(self):
        from crs_bridge.core import DynamicScheduler, NodeStats, ResourceStats

        s = DynamicScheduler()
        for n in self.nodes:
            s.add_node(n["name"], NodeStats.checked(n["cpu"], n["maxcpu"], n["mem"], n["maxmem"]))
        for r in self.resources:
            st = r["stats"]
            stats = ResourceStats.checked(st["cpu"], st["maxcpu"], st["mem"], st["maxmem"])
            s.add_resource(r["sid"], stats, r["running"], r["current-node"])
        return s

    def core_candidates(self, form: str):
        """The candidates of ``form`` as the engine takes them (columns)."""
        from crs_bridge.core import (
            CandidateColumns,
            CompactCandidate,
            CompactColumns,
            Migration,
            MigrationCandidate,
            ResourceStats,
        )

        if form == "compact":
            bundles = [CompactCandidate(b["leader"], tuple(b["resources"]), tuple(b["nodes"])) for b in self.bundles]
            return CompactColumns.of(bundles)
        return CandidateColumns.of(
            [
                MigrationCandidate(
                    Migration(c["sid"], c["source-node"], c["target-node"]),
                    ResourceStats(c["stats"]["cpu"], c["stats"]["maxcpu"], c["stats"]["mem"], c["stats"]["maxmem"]),
                )
                for c in self.expanded
            ]
        )


def score_request(cluster: Cluster, form: str, method: str, ident: int = 1) -> bytes:
    params = {"usage": cluster.usage, "candidates": cluster.candidates(form), "limit": LIMIT, "method": method}
    return orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": "score_best_balancing_migrations", "params": params})


# -- the server -------------------------------------------------------------------------------


class Server:
    """A ``crs-bridge serve`` process; requests are whole lines of bytes."""

    def __init__(self, args: Sequence[str] = ()) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [*SERVER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=SERVER_ENV,
        )

    def roundtrip(self, request: bytes) -> tuple[float, bytes]:
        """Send one request line; return (seconds until the whole answer line was read, answer)."""
        start = time.perf_counter()
        self.process.stdin.write(request + b"\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        return time.perf_counter() - start, answer

    def call(self, method: str, params: object = None, ident: int = 1) -> object:
        message = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        answer = orjson.loads(self.roundtrip(orjson.dumps(message))[1])
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def status_kib(self, key: str) -> int:
        """A value (KiB) from /proc/<pid>/status: VmRSS now, VmHWM the peak."""
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise KeyError(key)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server has used so far, from /proc/<pid>/stat (10 ms ticks)."""
        with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> float:
        """Close stdin, wait for the exit; return the process's CPU seconds (user + system)."""
        self.process.stdin.close()
        _, status, usage = os.wait4(self.process.pid, 0)  # Popen.wait does not give the CPU time
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.process.stdout.close()
        return usage.ru_utime + usage.ru_stime

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def median_ms(times: Sequence[float]) -> float:
    return statistics.median(times) * 1000.0


def timed_median(call: Callable[[], object], runs: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return median_ms(times)


# -- migration scoring --------------------------------------------------------------------------


def bench_size(nodes: int, count: int, args: argparse.Namespace) -> list[list[str]]:
    cluster = Cluster(nodes, count, args.seed)
    scheduler = cluster.scheduler()
    rows, answers = [], {}
    for form in FORMS:
        requests = {method: score_request(cluster, form, method) for method in METHODS}
        core_candidates = cluster.core_candidates(form)
        with Server() as server:
            e2e, cpu = {}, {}
            for method, request in requests.items():
                _, answers[form, method] = server.roundtrip(request)  # warm-up, and the answer to compare
                used = server.cpu_seconds()
                e2e[method] = median_ms([idle_roundtrip(server, request, args.gap) for _ in range(args.runs)])
                cpu[method] = (server.cpu_seconds() - used) * 1000.0 / args.runs
            peak_mib = server.status_kib("VmHWM") / 1024.0
        phases = traced_phases(requests) if args.breakdown else {}
        for method in METHODS:
            scorer = (
                scheduler.score_best_balancing_migration_candidates
                if method == "bruteforce"
                else scheduler.score_best_balancing_migration_candidates_topsis
            )
            engine = timed_median(lambda scorer=scorer, given=core_candidates: scorer(given, LIMIT), args.runs)
            rust = RUST_MS.get((method, nodes, count))
            rows.append(
                [
                    method,
                    form,
                    str(nodes),
                    str(count),
                    f"{len(requests[method]) / 1e6:.1f}",
                    f"{e2e[method]:.1f}",
                    f"{cpu[method]:.0f}",
                    f"{engine:.1f}",
                    *(phases.get(method, {}).get(p, "-") for p in PHASES),
                    "-" if rust is None else f"{rust:.0f}",
                    "-" if rust is None else ("yes" if e2e[method] < rust else "NO"),
                    f"{peak_mib:.0f}",
                ]
            )
    for method in METHODS:
        same = _results(answers["compact", method]) == _results(answers["expanded", method])
        if not same:
            print(f"!! {nodes}x{count} {method}: compact and expanded answers DIFFER", file=sys.stderr)
    return rows


def idle_roundtrip(server: Server, request: bytes, gap: float) -> float:
    """Seconds of one roundtrip sent after ``gap`` seconds of quiet: as between two HA rounds,
    the server has finished with the previous request (freed its memory) when the next comes."""
    time.sleep(gap)
    return server.roundtrip(request)[0]


def _results(answer: bytes) -> object:
    decoded = orjson.loads(answer)
    return decoded.get("result", decoded.get("error"))


def traced_phases(requests: dict[str, bytes]) -> dict[str, dict[str, str]]:
    """Server-side phase durations (ms, as text) per method, from a server run with --trace.

    The first request of each method warms up; the phases of the second are reported.
    """
    with tempfile.NamedTemporaryFile(mode="r", suffix=".trace") as trace:
        with Server(["--trace", trace.name]) as server:
            for request in requests.values():
                server.roundtrip(request)
                idle_roundtrip(server, request, 0.3)
        lines = [line for line in trace.read().splitlines() if "<--" in line]
    found = {}
    for method, line in zip(requests, lines[1::2]):  # the second (warm) request of each method
        match = _PHASES_IN_TRACE.search(line)
        if match:
            pairs = (item.split() for item in match.group(1).split(","))
            found[method] = {name: f"{float(ms):.1f}" for name, ms in pairs}
    return found


# -- start-up, small calls, idle memory ------------------------------------------------------------


def compile_sources(tree: Path) -> None:
    """Compile a source tree's ``core``, ``bridge`` and ``crs_bridge`` (the command that starts the
    server) to bytecode: with PYTHONDONTWRITEBYTECODE set (as on some machines), sources changed
    since their bytecode, or a fresh ``git worktree``, would be compiled again at every start of
    the server and inflate its start-up time."""
    sources = [str(tree / "core"), str(tree / "bridge"), str(tree / "crs_bridge")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *sources], check=True, stdout=subprocess.DEVNULL)


def startup_ms(runs: int) -> tuple[float, float, float, int]:
    """Medians: ms from process start to the answer of ``bridge.info``, and of a first small
    ``score_best_balancing_migrations``; the CPU ms of a server that starts, answers that one
    small score and exits (less sensitive to other load on the machine than the wall time);
    idle VmRSS (KiB) after the first answer."""
    info = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "bridge.info"})
    small = score_request(Cluster(3, 6, 1), "compact", "bruteforce")
    to_info, to_score, cpu, idle = [], [], [], []
    for _ in range(runs):
        for request, times in ((info, to_info), (small, to_score)):
            server = Server()
            server.process.stdin.write(request + b"\n")
            server.process.stdin.flush()
            server.process.stdout.readline()
            times.append(time.perf_counter() - server.started)
            if request is info:
                idle.append(server.status_kib("VmRSS"))
            cpu_seconds = server.close()
            if request is small:
                cpu.append(cpu_seconds)
    return median_ms(to_info), median_ms(to_score), median_ms(cpu), int(statistics.median(idle))


def pipelined_calls_per_second(calls: int) -> float:
    """``calls`` ``scheduler.contains_node`` requests written by a thread while this one reads."""
    with Server() as server:
        handle = server.call("scheduler.new", {"mode": "static"})["scheduler"]
        server.call("scheduler.add_node", [handle, "node1", 8, 64 * GiB])
        lines = [
            orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "scheduler.contains_node", "params": [handle, "node1"]})
            for i in range(calls)
        ]
        chunks = [b"\n".join(lines[i : i + 1000]) + b"\n" for i in range(0, calls, 1000)]

        def write() -> None:
            for chunk in chunks:
                server.process.stdin.write(chunk)
            server.process.stdin.flush()

        start = time.perf_counter()
        writer = threading.Thread(target=write)
        writer.start()
        for _ in range(calls):
            if b'"result":true' not in server.process.stdout.readline():
                raise RuntimeError("contains_node did not answer true")
        elapsed = time.perf_counter() - start
        writer.join()
    return calls / elapsed


# -- output ------------------------------------------------------------------------------------


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.rjust(w) if i >= 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per measurement (median taken)")
    parser.add_argument("--sizes", default=",".join(f"{n}x{c}" for n, c in SIZES), help="e.g. 64x10000,256x100000")
    parser.add_argument("--calls", type=int, default=50_000, help="pipelined small calls")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds of quiet before each timed request")
    parser.add_argument("--no-breakdown", dest="breakdown", action="store_false", help="skip the --trace runs")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--tree", type=Path, default=ROOT, help="take bridge/ and core/ from this directory")
    args = parser.parse_args()
    tree = python_path(args.tree)
    sys.path.insert(0, tree)
    if args.tree.resolve() != ROOT:
        SERVER_ENV["PYTHONPATH"] = tree
    compile_sources(args.tree.resolve())
    print(
        f"crs-bridge end-to-end benchmark: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; {' '.join(SERVER)} (code from {tree}); "
        f"median of {args.runs} runs, limit {LIMIT}"
    )
    rows = []
    for size in args.sizes.split(","):
        nodes, count = (int(x) for x in size.split("x"))
        rows.extend(bench_size(nodes, count, args))
    header = ["method", "form", "nodes", "cands", "req MB", "e2e ms", "cpu ms", "engine ms", *PHASES]
    print_table([*header, "rust ms", "< rust", "peak MiB"], rows)
    print("phases: server-side ms from a --trace run (decode = JSON parse, validate = params check,")
    print("snapshot = scheduler from usage, candidates = candidate batch, score = scoring, encode = answer)")
    info_ms, score_ms, cpu_ms, idle_kib = startup_ms(max(args.runs, 7))
    print(
        f"start-up to first answer: bridge.info {info_ms:.0f} ms, "
        f"small score_best_balancing_migrations {score_ms:.0f} ms "
        f"(CPU time of start, that answer and exit: {cpu_ms:.0f} ms)"
    )
    print(f"idle RSS after start-up: {idle_kib / 1024:.0f} MiB")
    print(
        f"pipelined scheduler.contains_node: {pipelined_calls_per_second(args.calls):,.0f} calls/s ({args.calls} calls)"
    )


if __name__ == "__main__":
    main()
