"""A long fuzzing campaign: the hypothesis tests of tests/test_hardening_fuzz.py with many examples.

Runs those tests (one real server for the whole campaign, a probe after every fuzzed message)
with ``--examples`` examples per test, then prints what was sent and read and how long it took.
Exit status: pytest's (0 = no failure found).

Run: ``.venv/bin/python benchmarks/fuzz_campaign.py --examples 25000`` (4 fuzz tests: 100k messages).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=25_000, help="examples per fuzz test (default 25000)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer (default 60)")
    args = parser.parse_args()
    # Read when the test module is imported: set before pytest imports it.
    os.environ["CRS_FUZZ_EXAMPLES"] = str(args.examples)
    os.environ["CRS_FUZZ_TIMEOUT"] = str(args.timeout)
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)

    import pytest

    started = time.perf_counter()
    status = pytest.main(["-q", "-x", "-p", "no:cacheprovider", "tests/test_hardening_fuzz.py"])
    seconds = time.perf_counter() - started

    from tests import test_hardening_fuzz as fuzz

    stats = fuzz.STATS
    print(f"examples per test: {args.examples}")
    print(f"fuzzed messages:   {stats['messages']} (+ {stats['probes']} probes)")
    print(f"answers checked:   {stats['answers']}")
    print(f"time:              {seconds:.1f} s ({stats['messages'] / seconds:.0f} fuzzed messages/s)")
    print(f"result:            {'no failure' if status == 0 else f'FAILED (pytest exit {status})'}")
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
