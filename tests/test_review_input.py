"""``crs-bridge review``'s input: files that are no round (not a recording, truncated, another
mode, another cluster, a mutation the engine refuses) get a line each and the rest is reviewed
(exit 1); the settings' sources (datacenter.cfg in percent or fractions by pve-cluster's version,
the command line) and bad settings (exit 2); progress only on a terminal."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
from pathlib import Path

import pytest

from crs_bridge import review_settings as rs
from crs_bridge.client import cli_command
from tests import ROOT
from tests.test_review_ha import dynamic_scenario, review, run_simulation

pytestmark = pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """The simulator's dynamic rounds, recorded."""
    directory = tmp_path_factory.mktemp("input") / "records"
    run_simulation(dynamic_scenario(), directory)
    return directory


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob("crs-*.json"))


def test_each_bad_file_gets_a_line_and_the_rest_is_reviewed(records, tmp_path):
    directory = tmp_path / "mixed"
    shutil.copytree(records, directory)
    good = files(directory)
    text = good[3].read_text()
    (directory / "notes.json").write_text('{"comment": "not a recording"}')
    (directory / "README").write_text("the records of node 1\n")
    (directory / "crs-truncated.json").write_text(text[: len(text) // 2])
    static = json.loads(text)
    static["record"]["mode"] = "static"
    (directory / "crs-static.json").write_text(json.dumps(static))
    other = text
    for name in ("n1", "n2", "n3", "n4"):
        other = other.replace(f'"{name}"', f'"other-{name}"')
    (directory / "crs-other-cluster.json").write_text(other)
    refused = json.loads(text)
    refused["record"]["journal"].insert(4, ["add_resource", "vm:99", {"stats": {}, "running": True}])
    refused["record"]["decision"] = None
    refused["record"]["calls"] = []
    (directory / "crs-refused.json").write_text(json.dumps(refused))

    done = review(str(directory), "--hold", "2")
    assert done.returncode == 1
    lines = {line.split(": skipped: ")[0]: line for line in done.stderr.splitlines() if ": skipped: " in line}
    expected = {
        "notes.json": "not a flight recorder file",
        "README": "not JSON",
        "crs-truncated.json": "truncated: the JSON ends early",
        "crs-static.json": "a static round among",
        "crs-other-cluster.json": "another cluster's round: its nodes (other-n1, other-n2, other-n3, other-n4)",
        "crs-refused.json": "the engine refuses it",
    }
    assert sorted(Path(path.removeprefix("crs-bridge review: ")).name for path in lines) == sorted(expected)
    for name, words in expected.items():
        line = next(line for path, line in lines.items() if path.endswith(name))
        assert words in line, line
    assert f"Summary: {len(good)} rounds" in done.stdout
    assert f"{len(expected)} files skipped" in done.stdout


def test_an_empty_or_missing_directory(tmp_path):
    missing = review(str(tmp_path / "missing"))
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    empty = review(str(tmp_path))
    assert empty.returncode == 1 and "no recording in" in empty.stderr


def test_the_settings_say_where_they_come_from(records, tmp_path):
    cfg = tmp_path / "datacenter.cfg"
    cfg.write_text("crs: ha=dynamic,ha-auto-rebalance=1,ha-auto-rebalance-threshold=25,ha-auto-rebalance-margin=5\n")
    done = review(str(records), "--datacenter-cfg", str(cfg), "--pve-cluster", "9.1.5", "--hold", "2", "--json")
    settings = json.loads(done.stdout)["settings"]
    assert settings["threshold"] == {
        "value": 0.25,
        "source": f"{cfg}: ha-auto-rebalance-threshold=25 (percent, pve-cluster 9.1.5)",
    }
    assert settings["margin"]["value"] == 0.05
    assert settings["hold"] == {"value": 2.0, "source": "--hold"}
    assert settings["method"] == {"value": "bruteforce", "source": "HA 5.2.0's default"}
    assert settings["imbalance"] == {"value": None, "source": "each recording's own"}
    # pve-cluster 9.1.4 read the same numbers as fractions: a threshold of 25 moves nothing.
    done = review(str(records), "--datacenter-cfg", str(cfg), "--pve-cluster", "9.1.4", "--json")
    result = json.loads(done.stdout)
    assert result["settings"]["threshold"]["value"] == 25.0 and result["summary"]["moves"] == 0


def test_what_datacenter_cfg_says_about_ha(tmp_path):
    cfg = tmp_path / "datacenter.cfg"
    cfg.write_text("# crs: ha=dynamic\ncrs: basic,ha-auto-rebalance-hold-duration=5\n")
    settings, notes = rs.from_datacenter_cfg(rs.Settings(), str(cfg), cfg.read_text(), None)
    assert settings.hold == 5.0 and settings.threshold == 0.3
    assert any("ha-auto-rebalance is off" in note for note in notes)
    assert any("crs ha=basic" in note for note in notes)


@pytest.mark.parametrize(
    ("version", "values", "unit"),
    [
        ("9.1.5", {"threshold": 0.3}, "percent"),
        ("9.1.10-1", {"threshold": 0.3}, "percent"),
        ("9.1.4", {"threshold": 30.0}, "fraction"),
        ("9.1.2", {}, "fraction"),
        (None, {"threshold": 30.0}, "percent"),
        (None, {"margin": 0.1}, "fraction"),
    ],
)
def test_the_unit_of_datacenter_cfg(version, values, unit):
    assert rs.cfg_unit(version, values)[0] == unit


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--margin", "10"], "margin 10 is above 1: a margin is a fraction here (did you mean 0.1?)"),
        (["--threshold", "-1"], "threshold must be a finite number >= 0"),
        (["--what-if", "threshold"], "expected key=value"),
        (["--what-if", "speed=2"], "no setting 'speed'"),
        (["--what-if", "method=fast"], "method must be one of bruteforce, topsis"),
        (["--datacenter-cfg", "/nonexistent/datacenter.cfg"], "cannot read /nonexistent/datacenter.cfg"),
    ],
)
def test_bad_settings_are_refused(records, args, words):
    done = review(str(records), *args)
    assert done.returncode == 2
    assert words in done.stderr


def test_progress_goes_to_a_terminal_only(records):
    quiet = review(str(records))
    assert quiet.returncode == 0 and "round 1 of" not in quiet.stderr
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*cli_command(), "review", str(records)],
            stdout=subprocess.PIPE,
            stderr=follower,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0
    rounds = len(files(records))
    assert f"round {rounds} of {rounds}".encode() in seen
    assert b"round 1 of" not in done.stdout


def test_a_what_if_of_the_imbalance_formula(records):
    done = review(str(records), "--hold", "2", "--what-if", "imbalance=normalized", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["what-if"]["imbalance"] == {"value": "normalized", "source": "--what-if"}
    for r in result["rounds"]:
        # normalized = raw / sqrt(n - 1), here 4 nodes
        assert r["what-if"]["imbalance"] == pytest.approx(r["imbalance"] / 3**0.5, rel=1e-12)
    assert sum(r["what-if"]["decision"] == "threshold" for r in result["rounds"]) > sum(
        r["decision"] == "threshold" for r in result["rounds"]
    )


def test_the_page_shows_the_chosen_round_first(records, tmp_path):
    page = tmp_path / "review.html"
    done = review(str(records), "--html", str(page), "--round", "11")
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert html.count('class="bars chosen"') == 1 and '<div class="bars chosen" id="round-11">' in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
