"""How long ``crs-bridge review`` takes over 200 recorded rounds of 16 nodes x 2000 guests (dynamic).

Writes 200 flight recorder files as the Perl drop-in writes them for HA rounds (the nodes and
guests added, the imbalance query with the answer a server gave; guests' loads drifting from
round to round, a migration running in every tenth round), then times the real command, end to
end, on them: with HA's defaults (hold 3: scoring in a third of the rounds above the threshold),
with every round scored (``--threshold 0 --hold 1``), and that with a TOPSIS what-if beside it.
Figures are wall-clock and CPU seconds, best of ``--repeat`` runs, printed; the target is under
10 s wall-clock.

    .venv/bin/python benchmarks/bench_review.py [--rounds 200] [--nodes 16] [--guests 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State
from crs_bridge.client import cli_command

GIB = 2**30


def write_rounds(directory: Path, rounds: int, nodes: int, guests: int) -> None:
    """``rounds`` recordings of a dynamic cluster whose guests' cpu drifts, in ``directory``."""
    rng = random.Random(28)
    names = [f"node{i:02d}" for i in range(nodes)]
    place = [names[min(nodes - 1, int(rng.random() ** 2 * nodes))] for _ in range(guests)]  # skewed
    cpu = [rng.uniform(0.05, 1.5) for _ in range(guests)]
    mem = [rng.randint(1, 16) * GIB for _ in range(guests)]
    protocol = Protocol(State())
    for number in range(1, rounds + 1):
        cpu = [max(0.01, c * rng.uniform(0.9, 1.1)) for c in cpu]
        moving = rng.randrange(guests) if number % 10 == 0 else None
        journal = _journal(names, place, cpu, mem, moving)
        record = {
            "format": 1,
            "mode": "dynamic",
            "imbalance": "raw",
            "pid": 4242,
            "time": f"20260601T{number // 3600:02d}{number // 60 % 60:02d}{number % 60:02d}.000000Z",
            "decision": None,
            "journal": journal,
            "calls": [
                {
                    "at": len(journal),
                    "method": "scheduler.calculate_node_imbalance",
                    "params": {},
                    "answer": _imbalance(protocol, journal),
                }
            ],
        }
        cluster = {"candidates": [], "method": "bruteforce", "imbalance": "raw", "record": record}
        (directory / f"crs-20260601T000000.000000Z-4242-{number}.json").write_text(json.dumps(cluster))


def _journal(names: list[str], place: list[str], cpu: list[float], mem: list[int], moving: int | None) -> list:
    used = {name: [0.0, 0] for name in names}
    for node, c, m in zip(place, cpu, mem):
        used[node][0] += c
        used[node][1] += m
    journal = [
        ["add_node", name, {"cpu": used[name][0], "maxcpu": 128, "mem": used[name][1], "maxmem": 2048 * GIB}]
        for name in names
    ]
    for index, (node, c, m) in enumerate(zip(place, cpu, mem)):
        resource = {
            "stats": {"cpu": c, "maxcpu": 4.0, "mem": m, "maxmem": 16 * GIB},
            "running": True,
            "current-node": node,
        }
        if index == moving:
            resource["target-node"] = names[(names.index(node) + 1) % len(names)]
        journal.append(["add_resource", f"vm:{100 + index}", resource])
    return journal


def _imbalance(protocol: Protocol, journal: list) -> dict:
    def ask(method: str, params: dict) -> dict:
        request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return json.loads(protocol.handle(json.dumps(request).encode()))

    handle = ask("scheduler.new", {"mode": "dynamic", "imbalance": "raw"})["result"]["scheduler"]
    ask("scheduler.apply", {"scheduler": handle, "mutations": journal})
    answer = ask("scheduler.calculate_node_imbalance", {"scheduler": handle})
    ask("scheduler.free", {"scheduler": handle})
    return answer


def timed(directory: Path, options: list[str], repeat: int) -> tuple[float, float, dict]:
    """The best wall-clock and CPU seconds (user + system: on a busy machine the wall clock also
    counts the other processes' turns) of ``crs-bridge review DIR --json OPTIONS``, and its summary."""
    best, best_cpu, summary = float("inf"), float("inf"), {}
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [*cli_command(), "review", str(directory), "--json", *options], capture_output=True, check=False
        )
        best = min(best, time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best_cpu = min(best_cpu, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode != 0:
            sys.exit(f"review failed: {done.stderr.decode()}")
        summary = json.loads(done.stdout)["summary"]
    return best, best_cpu, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--guests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-review-") as temp:
        directory = Path(temp)
        write_rounds(directory, args.rounds, args.nodes, args.guests)
        size = sum(path.stat().st_size for path in directory.iterdir()) / 2**20
        print(f"{args.rounds} rounds of {args.nodes} nodes x {args.guests} guests ({size:.0f} MiB of recordings)")
        cases = [
            ("HA's defaults", ["--datacenter-cfg", "/dev/null"]),
            ("every round scored", ["--datacenter-cfg", "/dev/null", "--threshold", "0", "--hold", "1"]),
            (
                "every round scored + TOPSIS what-if",
                ["--datacenter-cfg", "/dev/null", "--threshold", "0", "--hold", "1", "--what-if", "method=topsis"],
            ),
        ]
        for label, options in cases:
            seconds, cpu, summary = timed(directory, options, args.repeat)
            print(
                f"  review, {label:<36} {seconds:6.2f} s wall, {cpu:6.2f} s cpu"
                f"  ({summary['rounds']} rounds, {summary['above-threshold']} above the threshold)"
            )
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"  largest resident size of a review: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
