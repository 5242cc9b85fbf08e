"""How much of an end-to-end answer is only getting the request in: ``crs-bridge serve`` side by
side with a stand-in that reads each request through the server's own transport, decodes it the
server's strict way (the envelope, then the params straight into the structs: the fastest path the
server has) and answers a constant, without the envelope checks, dispatch or scoring. Requests
alternate between the two; medians are printed.

    .venv/bin/python benchmarks/decode_floor.py [--size 64x10000] [--method topsis] [--runs 40]

The stand-in's time is a floor for any server that takes the request as JSON text in Python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from bench_e2e import ROOT, SERVER, Cluster, score_request

#: The stand-in: read frames, decode each into its params structs, answer a constant.
_STAND_IN = """
import os
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State
from crs_bridge.bridge.transport import FrameReader, enlarge_pipe

protocol = Protocol(State())
enlarge_pipe(0)
for frame in FrameReader(0, 1 << 28):
    if protocol._strictly(frame.body) is None:
        raise SystemExit("the strict way did not take the request")
    os.write(1, b'{"jsonrpc":"2.0","result":[],"id":1}\\n')
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="64x10000", help="NODESxCANDIDATES (expanded candidates)")
    parser.add_argument("--method", default="topsis", choices=["bruteforce", "topsis"])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    nodes, count = map(int, args.size.split("x"))
    request = score_request(Cluster(nodes, count, 7), "expanded", args.method) + b"\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    servers = {
        "read + decode only": subprocess.Popen(
            [sys.executable, "-c", _STAND_IN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        ),
        "crs-bridge serve": subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT),
    }
    times: dict[str, list[float]] = {name: [] for name in servers}
    for run in range(args.runs + 3):  # the first three warm both up
        for name, server in servers.items():
            time.sleep(0.02)
            start = time.perf_counter()
            os.write(server.stdin.fileno(), request)
            server.stdout.readline()
            if run >= 3:
                times[name].append(time.perf_counter() - start)
    print(f"{args.size} expanded {args.method}, {len(request) / 1e6:.1f} MB request, {args.runs} alternated runs")
    for name, values in times.items():
        print(f"  {name:20s} median {statistics.median(values) * 1000:6.2f} ms   min {min(values) * 1000:6.2f} ms")
    for server in servers.values():
        server.stdin.close()
        server.wait()


if __name__ == "__main__":
    main()
