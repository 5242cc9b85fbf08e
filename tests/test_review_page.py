"""``crs-bridge review --html``: the page opened in headless Chromium renders, its chart has one
point per round, the browser logs no console message (the same harness does catch one on a page
that breaks its policy), and a screenshot is kept in the test's directory. Chromium is Debian's
``chromium`` (.ci/run installs it); without it the test is skipped, except in CI, where it fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_review_ha import dynamic_scenario, review, run_simulation

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
if BROWSER is None and os.environ.get("CI"):
    pytest.fail("chromium is not installed, and CI must check the page (.ci/run installs it)", pytrace=False)
pytestmark = [
    pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed"),
]
#: Lines Chromium logs for a page's console (messages, errors, policy violations).
CONSOLE = re.compile(r":CONSOLE[:(]")


def browse(page: Path, profile: Path, *action: str) -> subprocess.CompletedProcess:
    """Headless Chromium on ``page`` (its profile in ``profile``), logging the console to stderr."""
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",  # the tests may run as root
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1200,1500",
        *action,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, int]:
    """A review page of the simulator's dynamic rounds with a what-if, and the number of rounds."""
    base = tmp_path_factory.mktemp("page")
    scenario = dynamic_scenario()
    run_simulation(scenario, base / "records")
    path = base / "review.html"
    done = review(str(base / "records"), "--hold", "2", "--what-if", scenario["what-if-option"], "--html", str(path))
    assert done.returncode == 0, done.stderr
    return path, scenario["rounds"]


def test_the_page_has_one_point_per_round_and_no_console_message(page, tmp_path):
    path, rounds = page
    done = browse(path, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    points = re.findall(r'<circle class="point[^"]*" data-round="(\d+)"', dom)
    assert [int(n) for n in points] == list(range(1, rounds + 1))
    thresholds = re.findall(r'class="threshold (real|what-if)" data-threshold="([0-9.]+)"', dom)
    assert thresholds == [("real", "0.3"), ("what-if", "0.2")]
    assert 'class="move real"' in dom and 'class="move what-if"' in dom
    assert [line for line in done.stderr.splitlines() if CONSOLE.search(line)] == []


def test_the_console_check_catches_a_page_that_breaks_its_policy(page, tmp_path):
    path, _ = page
    broken = tmp_path / "broken.html"
    broken.write_text(path.read_text().replace("</body>", '<img src="http://example.invalid/x.png"></body>'))
    done = browse(broken, tmp_path / "profile", "--dump-dom")
    assert any(CONSOLE.search(line) for line in done.stderr.splitlines()), done.stderr


def test_the_page_renders_a_screenshot(page, tmp_path):
    path, _ = page
    shot = tmp_path / "review.png"  # kept: the test's artifact
    done = browse(path, tmp_path / "profile", f"--screenshot={shot}")
    assert done.returncode == 0, done.stderr
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1200, 1500)
    # A blank page compresses to a few kB; the chart, the bars and the table do not.
    assert len(png) > 50_000
