"""Benchmark of the scheduling engine against the slow reference (tests/reference.py).

Prints one table: bruteforce and TOPSIS migration scoring at several (nodes, candidates) sizes,
and start scoring at several node counts. Engine time is the median of several runs of the full
Dynamic-mode call (expansion of the compact candidates included), limit 10. Reference time is
measured in the same run; for the big sizes the reference runs on a sample of candidates (or of
start alternatives) and is extrapolated linearly, which the table marks with "~".
Where the reference ran in full, the engine's answer is also checked against it, to the bit.

Run: ``.venv/bin/python benchmarks/bench_core.py`` (``--help`` for options; ``make bench``).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crs_bridge.core import CompactCandidate, CompactColumns, DynamicScheduler, NodeStats, ResourceStats  # noqa: E402
from tests import reference as ref  # noqa: E402

GiB = 1 << 30
MIGRATION_SIZES = [(3, 100), (16, 1_000), (64, 10_000), (256, 100_000), (1024, 100_000)]
START_SIZES = [16, 256, 1024]
#: The engine's time budget (ms) at the sizes HA must handle in a round, on a 2-core machine.
TARGETS = {("bruteforce", 256, 100_000): 30.0, ("topsis", 256, 100_000): 60.0}
LIMIT = 10


class Cluster:
    """A Dynamic scheduler, its compact candidates, and the same cluster for the reference."""

    def __init__(self, nodes: int, candidates: int, seed: int) -> None:
        rng = random.Random(seed)
        self.scheduler = DynamicScheduler()
        self.usage = ref.RefUsage()
        self.names = [f"pve{i:04d}" for i in rng.sample(range(10 * nodes), nodes)]
        for name in self.names:
            self._add_node(rng, name)
        self.bundles = self._bundles(rng, candidates)

    def _add_node(self, rng: random.Random, name: str) -> None:
        maxcpu = rng.choice([8, 16, 32, 48, 64, 128])
        maxmem = rng.choice([32, 64, 128, 256, 512, 1024]) * GiB
        if rng.random() < 0.05:  # an idle node
            cpu, mem = 0.0, 0
        else:  # some overcommitted on cpu
            cpu, mem = maxcpu * rng.uniform(0.02, 1.2), int(maxmem * rng.uniform(0.05, 0.95))
        stats = NodeStats.checked(cpu, maxcpu, mem, maxmem)
        self.scheduler.add_node(name, stats)
        self.usage.add_node(name, stats)

    def _add_resource(self, rng: random.Random, sid: str, node: str) -> None:
        maxcpu = float(rng.choice([1, 2, 4, 8, 16]))
        maxmem = rng.choice([1, 2, 4, 8, 16, 32, 64]) * GiB
        stats = ResourceStats.checked(
            maxcpu * rng.uniform(0.05, 1.0), maxcpu, int(maxmem * rng.uniform(0.2, 1.0)), maxmem
        )
        self.scheduler.add_resource(sid, stats, True, node)
        self.usage.add_resource(sid, ref.RefResource(stats, True, node))

    def _bundles(self, rng: random.Random, candidates: int) -> list[CompactCandidate]:
        """Bundles of 1-3 resources on one node, each with up to 50 allowed targets."""
        per_bundle = min(len(self.names) - 1, 50)
        bundles, count, next_id = [], 0, 100
        while count < candidates:
            node = rng.choice(self.names)
            members = [f"vm:{next_id + k}" for k in range(rng.randint(1, 3))]
            next_id += len(members)
            for sid in members:
                self._add_resource(rng, sid, node)
            others = [name for name in self.names if name != node]
            targets = rng.sample(others, min(per_bundle, candidates - count))
            bundles.append(CompactCandidate(members[0], tuple(sorted(members)), tuple(targets)))
            count += len(targets)
        return bundles


def engine_ms(call: Callable[[], object], runs: int) -> tuple[float, float]:
    """(median, minimum) wall time in ms of ``runs`` calls after a warm-up call."""
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0, min(times) * 1000.0


def once_ms(call: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1000.0, result


def bits(pairs) -> list:
    return [(m, struct.pack("<d", v)) for m, v in pairs]


def bench_migrations(nodes: int, count: int, args) -> list[list[str]]:
    cluster = Cluster(nodes, count, args.seed)
    s, usage = cluster.scheduler, cluster.usage
    view = usage.view("identity")
    candidates = ref.expand(usage, cluster.bundles)
    full = count <= args.full_reference_up_to
    sample = candidates if full else random.Random(args.seed).sample(candidates, args.sample)
    columns = CompactColumns.of(cluster.bundles)
    rows = []
    for method, engine_call, ref_call in (
        ("bruteforce", s.score_best_balancing_migration_candidates, ref.bruteforce),
        ("topsis", s.score_best_balancing_migration_candidates_topsis, ref.topsis),
    ):
        engine = engine_ms(lambda call=engine_call: call(columns, LIMIT), args.runs)
        ref_ms, expected = once_ms(lambda call=ref_call: call(view, sample, LIMIT))
        if full:
            got = [(m.migration, m.imbalance) for m in engine_call(columns, LIMIT)]
            check = "same" if bits(got) == bits(expected) else "DIFFERENT"
            ref_text = f"{ref_ms:.1f}"
        else:
            ref_ms *= count / len(sample)
            check = "-"
            ref_text = f"~{ref_ms:.0f}"
        rows.append(row(method, nodes, count, engine, ref_ms, ref_text, check, TARGETS.get((method, nodes, count))))
    return rows


def bench_start(nodes: int, args) -> list[str]:
    cluster = Cluster(nodes, 0, args.seed)
    s, view = cluster.scheduler, cluster.usage.view("starting")
    stats = ResourceStats.checked(2.0, 4.0, 8 * GiB, 16 * GiB)
    engine = engine_ms(lambda: s.score_nodes_to_start_resource(stats), args.runs)
    if nodes <= args.full_start_up_to:
        ref_ms, expected = once_ms(lambda: ref.start_scores(view, stats))
        got = s.score_nodes_to_start_resource(stats)
        check = "same" if bits(got) == bits(expected) else "DIFFERENT"
        ref_text = f"{ref_ms:.1f}"
    else:
        # One alternative per node, each O(nodes): time a sample of alternatives, scale up.
        picked = random.Random(args.seed).sample(range(nodes), args.start_sample)
        start = time.perf_counter()
        for x in picked:
            ref.alternative_parts([(n, ref.add_started(st, stats) if i == x else st) for i, (n, st) in enumerate(view)])
        ref_ms = (time.perf_counter() - start) * 1000.0 * nodes / len(picked)
        check, ref_text = "-", f"~{ref_ms:.0f}"
    return row("start", nodes, nodes, engine, ref_ms, ref_text, check, None)


def row(method, nodes, count, engine, ref_ms, ref_text, check, target) -> list[str]:
    median, fastest = engine
    verdict = "" if target is None else f"<= {target:.0f} ms: {'met' if median <= target else 'MISSED'}"
    cells = [f"{median:.2f}", f"{fastest:.2f}", ref_text, f"{ref_ms / median:.0f}x", check, verdict]
    return [method, str(nodes), str(count), *cells]


def print_table(rows: list[list[str]]) -> None:
    header = ["method", "nodes", "candidates", "engine ms", "min ms", "reference ms", "speed-up", "answer", "target"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print(
            "  ".join(
                cell.rjust(w) if i in (1, 2, 3, 4, 5, 6) else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(r, widths))
            ).rstrip()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="engine runs per size (median taken)")
    parser.add_argument("--sample", type=int, default=300, help="candidates the reference scores at big sizes")
    parser.add_argument(
        "--full-reference-up-to", type=int, default=10_000, help="run the reference in full up to this many candidates"
    )
    parser.add_argument("--start-sample", type=int, default=32, help="alternatives the reference scores at 1024 nodes")
    parser.add_argument(
        "--full-start-up-to", type=int, default=256, help="run the start reference in full up to this many nodes"
    )
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    print(
        f"crs-bridge core benchmark: Python {platform.python_version()}, NumPy {np.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (other work on the machine slows"
        f" every figure); engine = median of {args.runs} runs of the full Dynamic call, limit {LIMIT}"
    )
    rows = []
    for nodes, count in MIGRATION_SIZES:
        rows.extend(bench_migrations(nodes, count, args))
    for nodes in START_SIZES:
        rows.append(bench_start(nodes, args))
    print_table(rows)
    print(
        f"~ = reference timed on {args.sample} sampled candidates ({args.start_sample} sampled start alternatives)"
        " and extrapolated linearly to the full count.\n"
        "answer = engine result equal to the reference's to the bit (values and order), where the reference ran\n"
        "in full."
    )


if __name__ == "__main__":
    main()
