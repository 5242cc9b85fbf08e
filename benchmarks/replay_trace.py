"""A server trace's requests replayed in-process: the server's own time per kind of message.

``crs-bridge serve --trace FILE`` (``perl_round.pl --server-trace FILE``) writes every message it
reads (``-->`` lines) and its answer (``<--`` lines). This script feeds the messages to
``Protocol.handle`` of a tree's ``bridge/`` (the tree through PYTHONPATH, one child process per
tree, the Python of this checkout's venv), over and over, each pass on a fresh server state, as
the server does (the garbage collector off while a message is handled, freed memory kept); it
checks every answer against the trace's and prints the median time per kind of message (a
request's method, or the methods of a batch), without the transport, the client or the scheduling
of a shared machine's other processes in it. Trees are run in turns (``--turns``), and each
figure is the lowest median of its turns.

Run: ``.venv/bin/python benchmarks/replay_trace.py TRACE [TREE ...]`` (default: this checkout);
``--profile METHOD`` prints instead a cProfile of the messages of that kind (in the first tree).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from trees import python_path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import cProfile, gc, json, pstats, statistics, sys, time
import orjson
from crs_bridge.bridge import memory
from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State

trace, passes, profile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pairs, request = [], None
with open(trace, encoding="utf-8") as lines:
    for line in lines:
        if " --> [" in line:
            request = line.split("] ", 1)[1].rstrip("\n").encode()
        elif " <-- " in line and request is not None:
            answer = line.split(" ms ", 1)[1].rstrip("\n")
            if answer.startswith("[") and answer[1:2].isalpha():  # the phases' times in brackets
                answer = answer.split("] ", 1)[1]
            pairs.append((request, None if answer == "(no response)" else answer.encode()))
            request = None


def kind(message):
    decoded = orjson.loads(message)
    if type(decoded) is list:
        return "batch: " + ", ".join(dict.fromkeys(r.get("method", "?") for r in decoded))
    return decoded.get("method", "?")


kinds = [kind(m) for m, _ in pairs]
memory.keep_freed_memory()
gc.freeze()
times = {k: [] for k in kinds}
profiler = cProfile.Profile() if profile else None
for p in range(passes):
    protocol = Protocol(State(limits=ServerLimits()))
    for (message, expected), k in zip(pairs, kinds):
        if k == "shutdown":
            continue
        gc.disable()
        started = time.perf_counter()
        if profiler is not None and k == profile:
            profiler.enable()
            answer = protocol.handle(message)
            profiler.disable()
        else:
            answer = protocol.handle(message)
        protocol.release()
        times[k].append(time.perf_counter() - started)
        gc.enable()
        if p == 0 and answer != expected:
            sys.exit(f"answer differs from the trace's for {message[:200]!r}:\n{answer[:400]!r}\n{expected[:400]!r}")
if profiler is not None:
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
else:
    print(json.dumps({k: statistics.median(v) for k, v in times.items() if v}))
"""


def run(tree: Path, trace: str, passes: int, profile: str) -> str:
    env = {**os.environ, "PYTHONPATH": python_path(tree)}
    command = [sys.executable, "-P", "-c", _CHILD, str(Path(trace).resolve()), str(passes), profile]
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{tree}: {done.stderr.strip()}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    parser.add_argument("--passes", type=int, default=20, help="replays of the whole trace per turn")
    parser.add_argument("--turns", type=int, default=3, help="turns of every tree")
    parser.add_argument("--profile", default="", metavar="METHOD", help="cProfile the messages of this kind")
    args = parser.parse_args()
    if args.profile:
        print(run(args.trees[0], args.trace, args.passes, args.profile))
        return
    best: list[dict[str, float]] = [{} for _ in args.trees]
    for _ in range(args.turns):
        for i, tree in enumerate(args.trees):
            for k, v in json.loads(run(tree, args.trace, args.passes, "")).items():
                best[i][k] = min(v, best[i].get(k, v))
    print(f"{'median ms per message':<60}" + "".join(f"{str(t)[-16:]:>18}" for t in args.trees))
    for k in best[0]:
        figures = "".join(f"{b.get(k, float('nan')) * 1000:18.3f}" for b in best)
        ratio = f"   x{best[-1][k] / best[0][k]:.2f}" if len(best) > 1 and k in best[-1] else ""
        print(f"{k[:60]:<60}{figures}{ratio}")


if __name__ == "__main__":
    main()
