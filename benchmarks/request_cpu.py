"""One score request's CPU time in the server's code, per tree, in-process: the request bytes
handed to ``Protocol.handle`` (decode, checks, snapshot, candidates, scoring, answer) as the
server does, without the pipe and framing. CPU time of the process, so that other processes'
load moves it less than the wall clock that ``compare_e2e.py`` measures.

Each tree runs in processes of its own (its ``core/`` and ``bridge/`` through PYTHONPATH), the
trees alternated round by round; per tree, size, form and method the median over rounds of each
round's best of ``--repeat``; answers compared.

Run: ``.venv/bin/python benchmarks/request_cpu.py OLD_TREE NEW_TREE [--sizes 256x100000,1024x100000]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench_e2e import FORMS, METHODS
from trees import python_path

HERE = Path(__file__).resolve().parent

_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from bench_e2e import Cluster, score_request
from crs_bridge.bridge import memory
from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State

nodes, count, form, method, repeat = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
request = score_request(Cluster(nodes, count, 1), form, method)
memory.keep_freed_memory()  # as the server does
protocol = Protocol(State(limits=ServerLimits()))
best = float("inf")
for _ in range(repeat):
    began = time.process_time()
    answer = protocol.handle(request)
    best = min(best, time.process_time() - began)
sys.stdout.buffer.write(b"%f\n" % (best * 1e3) + answer)
"""


def measure(path: str, nodes: int, count: int, form: str, method: str, repeat: int) -> tuple[float, bytes]:
    """(best CPU ms, the answer) of one process running ``path``'s tree."""
    args = [sys.executable, "-P", "-c", _CHILD, str(HERE), str(nodes), str(count), form, method, str(repeat)]
    out = subprocess.run(args, env=dict(os.environ, PYTHONPATH=path), check=True, capture_output=True).stdout
    ms, answer = out.split(b"\n", 1)
    return float(ms), answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="tree A (the baseline)")
    parser.add_argument("new", type=Path, help="tree B")
    parser.add_argument("--sizes", default="64x10000,256x100000,1024x100000", help="nodes x expanded candidates")
    parser.add_argument("--rounds", type=int, default=5, help="processes per tree and measurement")
    parser.add_argument("--repeat", type=int, default=7, help="requests per process (the best is kept)")
    args = parser.parse_args()
    paths = [python_path(args.old), python_path(args.new)]
    print(f"load {os.getloadavg()[0]:.2f}; CPU ms, median over {args.rounds} rounds of the best of {args.repeat}")
    print(f"{'size':>12} {'form':8} {'method':10} {'A ms':>8} {'B ms':>8} {'B/A':>5}  answers")
    for size in args.sizes.split(","):
        nodes, count = map(int, size.split("x"))
        for form in FORMS:
            for method in METHODS:
                times: list[list[float]] = [[], []]
                answers: set[bytes] = set()
                for _ in range(args.rounds):
                    for i, path in enumerate(paths):
                        ms, answer = measure(path, nodes, count, form, method, args.repeat)
                        times[i].append(ms)
                        answers.add(answer)
                a, b = (statistics.median(t) for t in times)
                same = "same" if len(answers) == 1 else "DIFFERENT"
                print(f"{size:>12} {form:8} {method:10} {a:8.2f} {b:8.2f} {b / a:5.2f}  {same}", flush=True)


if __name__ == "__main__":
    main()
