"""``benchmarks/soak.py`` in a short run: it checks every answer itself; here only that a run
shorter than one progress interval completes and reports (it used to crash at its summary)."""

from __future__ import annotations

import subprocess
import sys

from tests import ROOT


def test_a_soak_shorter_than_its_progress_interval_reports_ok():
    done = subprocess.run(
        [sys.executable, "benchmarks/soak.py", "--calls", "300", "--progress", "1000"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "after the first 300 calls" in done.stdout and done.stdout.rstrip().endswith("result: ok")
