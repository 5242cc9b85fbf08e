"""How many files one score request passes through, and how often control hops between them.

One ``score_best_balancing_migrations`` request (8 dynamic nodes, 40 expanded candidates, limit 3)
is served in-process by ``serve()`` of a tree, after a warm-up request, under ``sys.setprofile``.
From the bytes read to the answer written, every Python function call is looked at: a call is a
hop when caller and callee are in different counted files. Counted files are the project's own
(``bridge/``, ``core/``) and jsonrpcserver's (on the request path of older trees); the standard library,
NumPy, msgspec and pydantic are passed over (their calls back into a counted file still count,
as from the last counted file that ran). Wire-side files are those not under ``core/``.

Run: ``.venv/bin/python benchmarks/request_hops.py [TREE ...]`` (default: this checkout); prints,
per tree, the count as issue #27 takes it (jsonrpcserver and ``core/`` each one file, as its trace
of the request counted them: calls within either are not hops), then the wire-side files, the hops
(also with the engine's files counted as one), and each hop with how often it happened. The answers
are compared across trees.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from trees import python_path

HERE = Path(__file__).resolve().parent
COUNTED = ("/bridge/", "/core/", "/jsonrpcserver/")

_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from bench_e2e import Cluster, score_request
from crs_bridge.bridge import server
from crs_bridge.bridge.transport import FrameWriter

COUNTED = tuple(sys.argv[2].split(","))
request = score_request(Cluster(8, 40, 1), "expanded", "bruteforce")
hops, files, answers, state = [], set(), [], {"on": False, "last": None}
original_write = FrameWriter.write


def write(self, framing, answer):
    original_write(self, framing, answer)
    answers.append(answer)
    state["on"] = len(answers) == 1  # from the first answer written to the second
    if len(answers) == 2:
        sys.setprofile(None)


FrameWriter.write = write


def counted(path):
    for part in COUNTED:
        if part in path:
            return part.strip("/") + "/" + path.rsplit(part, 1)[-1]
    return None


def profile(frame, event, arg):
    if not state["on"] or event != "call":
        return
    callee = counted(frame.f_code.co_filename)
    if callee is None:
        return
    files.add(callee)
    caller, back = None, frame.f_back
    while back is not None and caller is None:
        caller = counted(back.f_code.co_filename)
        back = back.f_back
    if caller is not None and caller != callee:
        hops.append((caller, callee))


read, feed = os.pipe()
os.write(feed, request + b"\n" + request + b"\n")
os.close(feed)
sys.setprofile(profile)
server.serve(in_fd=read)
sys.setprofile(None)
with open(sys.argv[3], "w") as report:
    json.dump({"files": sorted(files), "hops": hops, "answer": answers[-1].decode()}, report)
"""


def measure(tree: Path) -> dict:
    """The files entered, the hops ``[caller, callee]`` in order, and the answer, for ``tree``."""
    env = dict(os.environ, PYTHONPATH=python_path(tree))
    with tempfile.NamedTemporaryFile("r", suffix=".json") as report:
        command = [sys.executable, "-P", "-c", _CHILD, str(HERE), ",".join(COUNTED), report.name]
        subprocess.run(command, env=env, cwd=tree, stdout=subprocess.DEVNULL, check=True)
        return json.load(report)


def as_one(name: str) -> str:
    """A counted file's name, ``core/`` and jsonrpcserver each taken as one file."""
    return name.split("/", 1)[0] if name.startswith(("core/", "jsonrpcserver/")) else name


def main() -> None:
    trees = [Path(arg).resolve() for arg in sys.argv[1:]] or [HERE.parent]
    answers = set()
    for tree in trees:
        found = measure(tree)
        answers.add(found["answer"])
        wire_as_one = {as_one(name) for name in found["files"] if not name.startswith("core/")}
        hops_as_one = [hop for hop in found["hops"] if as_one(hop[0]) != as_one(hop[1])]
        print(
            f"{tree}: {len(wire_as_one)} wire-side files (jsonrpcserver as one), "
            f"{len(hops_as_one)} hops (core/ and jsonrpcserver each as one file)"
        )
        wire = [name for name in found["files"] if not name.startswith("core/")]
        project = [name for name in found["files"] if name.startswith(("bridge/", "core/"))]
        engine_as_one = [hop for hop in found["hops"] if not all(name.startswith("core/") for name in hop)]
        print(f"  {len(wire)} wire-side files ({', '.join(wire)}), {len(project)} project files,")
        print(
            f"  {len(found['hops'])} hops (calls from one counted file into another); "
            f"{len(engine_as_one)} with core/ counted as one file, the engine:"
        )
        for (caller, callee), count in collections.Counter(map(tuple, found["hops"])).most_common():
            print(f"    {count:4} {caller} -> {callee}")
        if '"result"' not in found["answer"]:
            print(f"  the answer is no result: {found['answer']}")
    if len(trees) > 1:
        print("answers:", "same" if len(answers) == 1 else "DIFFERENT")


if __name__ == "__main__":
    main()
