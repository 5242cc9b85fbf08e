"""What the editable install's import finder costs a server start.

``make setup`` installs the project in setuptools' default editable mode: a ``.pth`` file runs an
import finder at every interpreter start, which maps ``crs_bridge.core`` and ``crs_bridge.bridge``
to ``core/`` and ``bridge/``. This alternates two starts of ``crs-bridge serve`` up to its first
answer (``bridge.info``): as installed (the finder), and with the site-packages and a folder of
links to this tree on the path and no ``.pth`` file run (``python -S``). The difference is the
finder's cost (and that of the few other ``.pth`` lines of the venv).

Run: ``.venv/bin/python benchmarks/start_editable.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from trees import python_path

ROOT = Path(__file__).resolve().parent.parent
REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"bridge.info"}\n'


def start_ms(command: list[str], env: dict[str, str]) -> float:
    """Milliseconds from starting ``command`` to reading its first answer."""
    began = time.perf_counter()
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/")
    server.stdin.write(REQUEST)
    server.stdin.flush()
    answer = server.stdout.readline()
    elapsed = (time.perf_counter() - began) * 1e3
    server.stdin.close()
    server.wait()
    if b'"result"' not in answer:
        raise SystemExit(f"no answer from {command}: {answer!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    serve = ["-P", "-m", "crs_bridge", "serve"]
    installed = ([sys.executable, *serve], dict(os.environ))
    plain_env = dict(os.environ, PYTHONPATH=f"{python_path(ROOT)}:{sysconfig.get_paths()['purelib']}")
    plain = ([sys.executable, "-S", *serve], plain_env)
    times: dict[str, list[float]] = {"editable finder": [], "plain path": []}
    for _ in range(args.runs):
        for name, (command, env) in zip(times, (installed, plain)):
            times[name].append(start_ms(command, env))
    finder, path = (statistics.median(t) for t in times.values())
    print(f"start-up to the first answer, median of {args.runs} alternated runs:")
    print(f"  editable finder {finder:.1f} ms, plain path {path:.1f} ms, difference {finder - path:+.1f} ms")


if __name__ == "__main__":
    main()
