"""What handing candidates to the engine costs, per tree, in-process: from the decoded params to
the engine's batch (``wire.candidate_columns`` then ``Scheduler.candidate_batch``, the request's
"candidates" phase), expanded candidates and bundles; and for expanded ones the three name
columns built as plain lists alone (``list(map(attrgetter(field), records))`` per column). And the
bundles of an HA round (``--ha-sizes``, nodes x guests: every guest alone, to every other node, a
third of the guests on the first node), as the server decodes them (target lists numbered).

A tree that hands the names over as plain lists pays for the lists and then reads them; one that
hands over views of the records (``wire.FieldView``, before) pays for neither list but has the engine
call back into the wire for every row it reads. Each tree runs in a process of its own (its
``core/`` and ``bridge/`` through PYTHONPATH), the trees alternated round by round so that both see
the same load; per tree and size, the median over rounds of each round's best of ``--repeat``, in
CPU time of the process (other processes' load moves it less than the wall clock).

Run: ``.venv/bin/python benchmarks/candidate_step.py OLD_TREE NEW_TREE [--sizes 64x10000,256x100000]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from trees import python_path

HERE = Path(__file__).resolve().parent

_CHILD = r"""
import sys, time
from operator import attrgetter
import orjson
sys.path.insert(0, sys.argv[1])
from bench_e2e import Cluster, score_request
from crs_bridge.bridge import models, wire
from crs_bridge.bridge.wire import ParamsDecoder

nodes, count, repeat = map(int, sys.argv[2:5])


def best_ms(work):
    times = []
    for _ in range(repeat):
        began = time.process_time()
        work()
        times.append(time.process_time() - began)
    return min(times) * 1e3


decoder = ParamsDecoder(models.ScoreMigrationsParams)
if sys.argv[5] == "ha":
    names = [f"node{i}" for i in range(nodes)]
    stats = {"cpu": 1.0, "maxcpu": 64, "mem": 1 << 30, "maxmem": 1 << 40}
    guest = {"cpu": 0.5, "maxcpu": 2.0, "mem": 1 << 28, "maxmem": 1 << 30}
    places = [names[0] if i % 3 == 0 else names[i % nodes] for i in range(count)]
    resources = [
        {"sid": f"vm:{i}", "stats": guest, "running": True, "current-node": node} for i, node in enumerate(places)
    ]
    bundles = [
        {"leader": f"vm:{i}", "resources": [f"vm:{i}"], "nodes": [n for n in names if n != node]}
        for i, node in enumerate(places)
    ]
    usage = {"mode": "dynamic", "nodes": [{"name": n, **stats} for n in names], "resources": resources}
    params = decoder.decode(orjson.dumps({"usage": usage, "candidates": bundles, "limit": 1}))
    scheduler = wire.snapshot_scheduler(params.usage, "normalized")
    scheduler.view()
    print(best_ms(lambda: scheduler.candidate_batch(wire.candidate_columns(params.candidates))))
    sys.exit()
cluster = Cluster(nodes, count, 1)


def params_of(form):
    return decoder.decode(orjson.dumps(orjson.loads(score_request(cluster, form, "bruteforce"))["params"]))


given = {form: params_of(form).candidates for form in ("expanded", "compact")}
params = params_of("compact")
scheduler = wire.snapshot_scheduler(params.usage, "normalized")
scheduler.view()
getters = [attrgetter(field) for field in ("sid", "source_node", "target_node")]

expanded = best_ms(lambda: scheduler.candidate_batch(wire.candidate_columns(given["expanded"])))
compact = best_ms(lambda: scheduler.candidate_batch(wire.candidate_columns(given["compact"])))
names = best_ms(lambda: [list(map(get, given["expanded"])) for get in getters])
print(expanded, compact, names)
"""


def measure(path: str, kind: str, nodes: int, count: int, repeat: int) -> tuple[float, ...]:
    env = dict(os.environ, PYTHONPATH=path)
    args = [sys.executable, "-P", "-c", _CHILD, str(HERE), str(nodes), str(count), str(repeat), kind]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return tuple(map(float, out.split()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", type=Path, nargs="+", help="source trees (the first is A)")
    parser.add_argument("--sizes", default="64x10000,256x100000", help="nodes x expanded candidates")
    parser.add_argument("--ha-sizes", default="3x30,4x300,16x2000,48x10000", help="nodes x guests")
    parser.add_argument("--rounds", type=int, default=5, help="processes per tree and size")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per process (the best is kept)")
    args = parser.parse_args()
    paths = [python_path(tree) for tree in args.trees]
    print(f"load {os.getloadavg()[0]:.2f}; ms, median over {args.rounds} rounds of the best of {args.repeat}")
    print(f"{'size':>12} {'tree':40} {'expanded':>9} {'compact':>9} {'lists':>9}  (ms)")
    for size, tree, (expanded, compact, names) in medians(args, paths, "e2e", args.sizes):
        print(f"{size:>12} {str(tree):40} {expanded:9.2f} {compact:9.2f} {names:9.2f}")
    print(f"{'HA round':>12} {'tree':40} {'bundles':>9}  (ms)")
    for size, tree, (bundles,) in medians(args, paths, "ha", args.ha_sizes):
        print(f"{size:>12} {str(tree):40} {bundles:9.3f}")


def medians(args: argparse.Namespace, paths: list[str], kind: str, sizes: str):
    """Yield (size, tree, the medians of its figures) per size and tree, the trees alternated."""
    for size in sizes.split(","):
        nodes, count = map(int, size.split("x"))
        figures: list[list[tuple[float, ...]]] = [[] for _ in paths]
        for _ in range(args.rounds):
            for i, path in enumerate(paths):
                figures[i].append(measure(path, kind, nodes, count, args.repeat))
        for tree, runs in zip(args.trees, figures):
            yield size, tree, tuple(statistics.median(column) for column in zip(*runs))


if __name__ == "__main__":
    main()
