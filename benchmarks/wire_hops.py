"""How many wire-side files one request passes through, and how often control hops between them.

One ``score_best_balancing_migrations`` request (a small dynamic snapshot, expanded candidates)
is served in-process by ``serve()`` of a tree's ``bridge/`` after a warm-up request, under
``sys.setprofile``. From the bytes read to the answer written, every Python frame that runs is
noted in call order; a frame's file is wire-side when it is under ``bridge/``. Frames of other
files (jsonrpcserver, the engine, the standard library, NumPy, pydantic's Python parts) are
passed over. A hop is a change between two consecutive wire-side
files of that sequence: ``protocol.py -> registry.py -> protocol.py`` is two hops.

Run: ``.venv/bin/python benchmarks/wire_hops.py [TREE ...]`` (default: this checkout); prints,
per tree, the files entered, the hops, and the path from file to file. The answer written is
compared across trees (the same bytes, or DIFFERENT).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIRE_PARTS = ("/bridge/",)

_CHILD = r"""
import os, sys, threading
sys.path.insert(0, sys.argv[1])
from bench_e2e import Cluster, score_request
from crs_bridge.bridge import server
from crs_bridge.bridge.transport import FrameWriter

WIRE = tuple(sys.argv[2].split(","))
request = score_request(Cluster(8, 40, 1), "expanded", "bruteforce")
files, answers, state = [], [], {"on": False}
original_write = FrameWriter.write


def write(self, framing, answer):
    original_write(self, framing, answer)
    answers.append(answer)
    state["on"] = len(answers) == 1  # from the first answer written to the second
    if len(answers) == 2:
        sys.setprofile(None)


FrameWriter.write = write


def profile(frame, event, arg):
    if state["on"] and event in ("call", "return"):
        # After a return, control is back in the caller's frame.
        where = frame.f_code.co_filename if event == "call" else (frame.f_back and frame.f_back.f_code.co_filename)
        if where and any(part in where for part in WIRE):
            if not files or files[-1] != where:
                files.append(where)


report = open(sys.argv[3], "w")
read, feed = os.pipe()
os.write(feed, request + b"\n" + request + b"\n")
os.close(feed)
sys.setprofile(profile)
server.serve(in_fd=read)
sys.setprofile(None)
names = ["bridge/" + f.rsplit("/bridge/", 1)[-1] for f in files]
print(len(set(names)), len(names) - 1, answers[-1].decode()[:200], file=report)
print(" -> ".join(names), file=report)
report.close()
"""


def measure(tree: Path) -> tuple[int, int, str, str]:
    """(wire-side files entered, hops, answer, path) for ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    with tempfile.NamedTemporaryFile("r") as report:
        command = [sys.executable, "-c", _CHILD, str(HERE), ",".join(WIRE_PARTS), report.name]
        subprocess.run(command, env=env, cwd=tree, stdout=subprocess.DEVNULL, check=True)
        head, path = report.read().splitlines()
    files, hops, answer = head.split(" ", 2)
    return int(files), int(hops), answer, path


def main() -> None:
    trees = [Path(arg).resolve() for arg in sys.argv[1:]] or [HERE.parent]
    answers = set()
    for tree in trees:
        files, hops, answer, path = measure(tree)
        answers.add(answer)
        print(f"{tree}: {files} wire-side files, {hops} hops\n  {path}")
        if '"result"' not in answer:
            print(f"  the answer is no result: {answer}")
    if len(trees) > 1:
        print("answers:", "same" if len(answers) == 1 else "DIFFERENT")


if __name__ == "__main__":
    main()
