"""Soak: a million mixed calls against ONE server, pipelined; memory must stay flat and every
scheduler handle must be freed at the end.

The traffic is sessions as the HA manager's would be, interleaved with stateless calls:
``scheduler.new``, nodes and resources added, imbalance, bruteforce and TOPSIS scoring, start
scoring, removals, ``scheduler.free``; snapshot calls (``score_best_balancing_migrations``,
``calculate_node_imbalance``, ``score_nodes_to_start_resource``); and some bad calls (their
errors are expected). Requests are written by one thread and answers read by another, with at
most ``--window`` requests in flight. Handles are predicted (the server numbers them s1, s2, ...
in order) and every answer is checked: a result where one is expected, the expected error code
otherwise.

Prints progress (calls, rate, server RSS, live handles) and, at the end, RSS after warm-up and at
the end, and the live handle count from ``bridge.info`` (must be 0). Exit status 1 on any
unexpected answer, a handle left live, or a server exit status other than 0.

Run: ``.venv/bin/python benchmarks/soak.py`` (``--calls 1000000 --max-seconds 1200``).
"""

from __future__ import annotations

import argparse
import itertools
import random
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
OK = "ok"


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (bytes)."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


class Traffic:
    """Generates (method, params, expected) triples: ``expected`` is "ok" or an error code."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.handles = itertools.count(1)  # the server's own numbering of scheduler.new

    def calls(self):
        while True:
            kind = self.rng.random()
            if kind < 0.75:
                yield from self.session()
            elif kind < 0.95:
                yield from self.snapshot_calls()
            else:
                yield from self.bad_calls()

    def session(self):
        rng = self.rng
        mode = rng.choice(["static", "dynamic"])
        handle = f"s{next(self.handles)}"
        yield "scheduler.new", {"mode": mode, "imbalance": rng.choice(["normalized", "raw"])}, OK
        nodes = [f"node{i}" for i in range(rng.randint(2, 8))]
        for name in nodes:
            if mode == "static":
                yield "scheduler.add_node", [handle, name, rng.choice([8, 16, 32]), rng.choice([64, 128]) * GiB], OK
            else:
                stats = {"cpu": rng.uniform(0, 8), "maxcpu": 16, "mem": rng.randint(1, 32) * GiB, "maxmem": 64 * GiB}
                yield "scheduler.add_node", [handle, name, stats], OK
        sids = [f"vm:{100 + i}" for i in range(rng.randint(1, 12))]
        add = "scheduler.add_service" if mode == "static" else "scheduler.add_resource"
        for sid in sids:
            yield add, [handle, sid, self.record(mode, rng.choice(nodes))], OK
        candidates = [{"leader": sid, "resources": [sid], "nodes": nodes} for sid in sids[:3]]
        yield "scheduler.calculate_node_imbalance", [handle], OK
        yield "scheduler.list_nodes", [handle], OK
        yield "scheduler.contains_node", [handle, rng.choice(nodes)], OK
        # A leader's own node is among the targets: a -32602 the engine must refuse cleanly.
        yield "scheduler.score_best_balancing_migration_candidates", [handle, candidates, 5], -32602
        valid = self.valid_candidates(handle, mode, nodes, sids)
        yield from valid
        if mode == "static":
            yield "scheduler.score_nodes_to_start_service", [handle, {"maxcpu": 2.0, "maxmem": 4 * GiB}], OK
            yield "scheduler.remove_service_usage", [handle, sids[0]], OK
        else:
            stats = {"cpu": 1.0, "maxcpu": 2.0, "mem": GiB, "maxmem": 4 * GiB}
            yield "scheduler.score_nodes_to_start_resource", [handle, stats], OK
            yield "scheduler.remove_resource", [handle, sids[0]], OK
        if mode == "static":
            yield "scheduler.add_node", [handle, nodes[0], 8, GiB], -32000  # a duplicate: upstream's error
        else:
            yield "scheduler.add_node", [handle, nodes[0]], -32602  # stats missing
        yield "scheduler.remove_node", [handle, nodes[-1]], OK
        yield "scheduler.free", [handle], OK
        yield "scheduler.list_nodes", [handle], -32001

    def valid_candidates(self, handle: str, mode: str, nodes: list[str], sids: list[str]):
        """Scoring calls whose candidates are valid: targets are the nodes other than the leader's.
        The leader's node is not known here (placement is random), so the candidates are
        expanded ones with explicit source and target."""
        rng = self.rng
        expanded = []
        for sid in sids[:4]:
            source, target = rng.sample(nodes, 2)
            stats = {"cpu": rng.uniform(0, 2), "maxcpu": 2.0, "mem": rng.randint(0, 4) * GiB, "maxmem": 4 * GiB}
            expanded.append({"sid": sid, "source-node": source, "target-node": target, "stats": stats})
        yield "scheduler.score_best_balancing_migration_candidates", [handle, expanded, 3], OK
        yield "scheduler.score_best_balancing_migration_candidates_topsis", [handle, expanded, 3], OK
        yield "scheduler.select_best_balancing_migration", [handle, expanded, 0.1], OK

    def record(self, mode: str, node: str) -> dict:
        rng = self.rng
        if mode == "static":
            stats = {"maxcpu": rng.choice([0.0, 1.0, 2.0, 4.0]), "maxmem": rng.randint(1, 8) * GiB}
        else:
            stats = {"cpu": rng.uniform(0, 2), "maxcpu": 2.0, "mem": rng.randint(0, 4) * GiB, "maxmem": 4 * GiB}
        return {"stats": stats, "running": rng.random() < 0.8, "current-node": node}

    def snapshot_calls(self):
        rng = self.rng
        nodes = [
            {"name": f"pve{i}", "cpu": rng.uniform(0, 16), "maxcpu": 16, "mem": rng.randint(1, 60) * GiB,
             "maxmem": 64 * GiB}
            for i in range(rng.randint(2, 16))
        ]  # fmt: skip
        names = [n["name"] for n in nodes]
        resources = []
        for i in range(rng.randint(1, 20)):
            stats = {"cpu": rng.uniform(0, 2), "maxcpu": 2.0, "mem": rng.randint(0, 4) * GiB, "maxmem": 4 * GiB}
            resources.append({"sid": f"vm:{i}", "stats": stats, "running": True, "current-node": rng.choice(names)})
        usage = {"mode": "dynamic", "nodes": nodes, "resources": resources}
        candidates = [
            {"leader": r["sid"], "resources": [r["sid"]], "nodes": [n for n in names if n != r["current-node"]]}
            for r in resources
        ]
        method = rng.choice(["bruteforce", "topsis"])
        yield "score_best_balancing_migrations", {"usage": usage, "candidates": candidates, "limit": 5,
                                                  "method": method}, OK  # fmt: skip
        yield "calculate_node_imbalance", {"usage": usage}, OK
        stats = {"cpu": 1.0, "maxcpu": 2.0, "mem": GiB, "maxmem": 2 * GiB}
        yield "score_nodes_to_start_resource", {"usage": usage, "stats": stats}, OK

    def bad_calls(self):
        yield "bridge.info", None, OK
        yield "no.such.method", None, -32601
        yield "scheduler.list_nodes", ["s0"], -32001
        yield "calculate_node_imbalance", {"usage": {"mode": "static", "nodes": [{"name": "a", "maxcpu": 0,
                                                                                   "maxmem": 1}]}}, -32602  # fmt: skip


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crs_bridge", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
        )
        self.expected: deque[tuple[int, str, object]] = deque()
        self.slots = threading.Semaphore(args.window)
        self.lock = threading.Lock()
        self.sent = self.answered = 0
        self.failures: list[str] = []
        self.stop_sending = False
        self.last_info: dict = {}
        self.start_rss = 0
        self.counts: Counter[str] = Counter()  # calls by method, and "errors expected"

    def run(self) -> int:
        reader = threading.Thread(target=self.read, daemon=True)
        reader.start()
        started = time.perf_counter()
        warm_rss = None
        # The warm-up figure is taken at the first progress line: one comes by the last call.
        progress = min(self.args.progress, self.args.calls)
        traffic = Traffic(self.args.seed).calls()
        batch: list[bytes] = []
        for ident in range(1, self.args.calls + 1):
            method, params, expected = next(traffic)
            self.counts[method] += 1
            self.counts["errors expected"] += expected != OK
            self.slots.acquire()
            with self.lock:
                self.expected.append((ident, method, expected))
            batch.append(orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or []}))
            if len(batch) >= 64:
                self.send(batch)
            if ident % progress == 0:
                self.send(batch)
                elapsed = time.perf_counter() - started
                rss = rss_bytes(self.process.pid)
                warm_rss = warm_rss or rss
                print(
                    f"{ident:>9} calls  {elapsed:7.1f} s  {ident / elapsed:7.0f} calls/s  "
                    f"server RSS {rss / 2**20:6.1f} MiB  failures {len(self.failures)}",
                    flush=True,
                )
                if elapsed > self.args.max_seconds:
                    print(f"stopping: --max-seconds {self.args.max_seconds} reached", flush=True)
                    break
        self.send(batch)
        total = ident
        # Finish the session in progress (free its handle) before the final check.
        for method, params, expected in self.rest_of_session(traffic):
            total += 1
            self.counts[method] += 1
            self.counts["errors expected"] += expected != OK
            self.slots.acquire()
            with self.lock:
                self.expected.append((total, method, expected))
            self.send([orjson.dumps({"jsonrpc": "2.0", "id": total, "method": method, "params": params or []})])
        total += 1
        with self.lock:
            self.expected.append((total, "bridge.info", OK))
        self.send([orjson.dumps({"jsonrpc": "2.0", "id": total, "method": "bridge.info"})])
        while self.answered < total and reader.is_alive():
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        end_rss = rss_bytes(self.process.pid)
        self.process.stdin.close()
        status = self.process.wait(60)
        live = self.last_info.get("schedulers")
        print(f"calls: {total} in {elapsed:.1f} s ({total / elapsed:.0f} calls/s), answers {self.answered}")
        counts = self.counts
        print(f"of which scheduler.new {counts['scheduler.new']}, scheduler.free {counts['scheduler.free']}, "
              f"snapshot scoring {counts['score_best_balancing_migrations']}, errors expected "
              f"{counts['errors expected']}")  # fmt: skip
        print(f"server RSS after the first call {self.start_rss / 2**20:.1f} MiB; "
              f"after the first {progress} calls {warm_rss / 2**20:.1f} MiB; "
              f"at the end {end_rss / 2**20:.1f} MiB "
              f"({(end_rss - warm_rss) / 2**20:+.1f} MiB since warm-up)")  # fmt: skip
        print(f"live scheduler handles at the end (bridge.info): {live}; server exit status {status}")
        for failure in self.failures[:10]:
            print("FAILURE:", failure)
        ok = not self.failures and live == 0 and status == 0 and self.answered == total
        print("result:", "ok" if ok else "FAILED")
        return 0 if ok else 1

    @staticmethod
    def rest_of_session(traffic):
        """Calls up to and including the next scheduler.free's check (closes an open session)."""
        for method, params, expected in traffic:
            yield method, params, expected
            if method == "scheduler.list_nodes" and expected == -32001 and params != ["s0"]:
                return

    def send(self, batch: list[bytes]) -> None:
        if batch:
            self.process.stdin.write(b"\n".join(batch) + b"\n")
            self.process.stdin.flush()
            self.sent += len(batch)
            batch.clear()

    def read(self) -> None:
        for line in self.process.stdout:
            answer = orjson.loads(line)
            with self.lock:
                ident, method, expected = self.expected.popleft()
            self.slots.release()
            self.answered += 1
            if self.answered == 1:  # the server is up and has served: its start-up RSS
                self.start_rss = rss_bytes(self.process.pid)
            self.check(answer, ident, method, expected)

    def check(self, answer: dict, ident: int, method: str, expected: object) -> None:
        if answer.get("id") != ident:
            self.failures.append(f"answer out of order: expected id {ident}, got {answer.get('id')}")
        elif expected == OK and "error" in answer:
            self.failures.append(f"{method} (id {ident}): {answer['error']}")
        elif expected != OK and answer.get("error", {}).get("code") != expected:
            self.failures.append(f"{method} (id {ident}): expected error {expected}, got {answer}")
        elif method == "bridge.info" and "result" in answer:
            self.last_info = answer["result"]


def positive(text: str) -> int:
    """An argument that must be an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=positive, default=1_000_000, help="calls to make (default 1000000)")
    parser.add_argument("--max-seconds", type=float, default=1200.0, help="stop sending after this (default 1200)")
    parser.add_argument("--window", type=int, default=2000, help="most requests in flight (default 2000)")
    parser.add_argument("--progress", type=positive, default=50_000, help="print progress every N calls")
    parser.add_argument("--seed", type=int, default=1)
    return Soak(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
