"""Two source trees side by side, end to end: which one answers faster, on the same machine at
the same moments.

One ``crs-bridge serve`` per tree (the tree's ``bridge/`` and ``core/`` through PYTHONPATH, the
venv of this checkout), the same requests sent to each in turn, medians and the ratio B/A; the
answers must be the same bytes. Start-up to the first answer is alternated the same way. On a
shared, noisy machine this is the figure to trust: both sides see the same noise.

Run: ``.venv/bin/python benchmarks/compare_e2e.py OLD_TREE NEW_TREE`` (e.g. a ``git worktree``
of the previous release as OLD_TREE and ``.`` as NEW_TREE); ``--help`` for options.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_e2e import FORMS, METHODS, SERVER, Cluster, compile_sources, score_request  # noqa: E402
from trees import python_path  # noqa: E402


def start(tree: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=python_path(tree))
    return subprocess.Popen(
        [*SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tree
    )


def roundtrip(server: subprocess.Popen, request: bytes) -> tuple[float, bytes]:
    """(ms until the whole answer line was read, the answer)."""
    began = time.perf_counter()
    server.stdin.write(request + b"\n")
    server.stdin.flush()
    answer = server.stdout.readline()
    return (time.perf_counter() - began) * 1e3, answer


def compare_requests(trees: list[Path], sizes: list[tuple[int, int]], runs: int, gap: float) -> None:
    servers = [start(tree) for tree in trees]
    print(f"{'size':>12} {'form':8} {'method':10} {'A ms':>8} {'B ms':>8} {'B/A':>5}  answers")
    for nodes, count in sizes:
        cluster = Cluster(nodes, count, 1)
        for form in FORMS:
            for method in METHODS:
                request = score_request(cluster, form, method)
                times: list[list[float]] = [[] for _ in servers]
                answers: list[bytes] = [b"" for _ in servers]
                for run in range(runs + 1):  # the first run of each warms up
                    for i, server in enumerate(servers):
                        time.sleep(gap)
                        ms, answers[i] = roundtrip(server, request)
                        if run:
                            times[i].append(ms)
                a, b = (statistics.median(t) for t in times)
                same = "same" if answers[0] == answers[1] and b'"result"' in answers[0] else "DIFFERENT"
                print(f"{nodes:>5}x{count:<6} {form:8} {method:10} {a:8.1f} {b:8.1f} {b / a:5.2f}  {same}", flush=True)
    for server in servers:
        server.stdin.close()
        server.wait()


def compare_startup(trees: list[Path], runs: int) -> None:
    request = b'{"jsonrpc":"2.0","id":1,"method":"bridge.info"}'
    times: list[list[float]] = [[] for _ in trees]
    for _ in range(runs):
        for i, tree in enumerate(trees):
            began = time.perf_counter()
            server = start(tree)
            roundtrip(server, request)
            times[i].append((time.perf_counter() - began) * 1e3)
            server.stdin.close()
            server.wait()
    a, b = (statistics.median(t) for t in times)
    print(f"start-up to the first answer (bridge.info): A {a:.0f} ms, B {b:.0f} ms, B/A {b / a:.2f} (median of {runs})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="tree A (the baseline)")
    parser.add_argument("new", type=Path, help="tree B")
    parser.add_argument("--sizes", default="64x10000,256x100000,1024x100000", help="e.g. 64x10000,256x100000")
    parser.add_argument("--runs", type=int, default=9, help="timed requests per tree and measurement")
    parser.add_argument("--startups", type=int, default=15, help="server starts per tree")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds of quiet before each request")
    args = parser.parse_args()
    trees = [args.old.resolve(), args.new.resolve()]
    for tree in trees:
        compile_sources(tree)
    sizes = [tuple(map(int, size.split("x"))) for size in args.sizes.split(",")]
    print(f"A = {trees[0]}\nB = {trees[1]}\nload {os.getloadavg()[0]:.2f}, median of {args.runs} alternated runs")
    compare_startup(trees, args.startups)
    compare_requests(trees, sizes, args.runs, args.gap)


if __name__ == "__main__":
    main()
