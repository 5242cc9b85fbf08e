"""``crs-bridge review`` against the HA logic itself: the project's HA-round simulator
(perl-client/t/lib/HASim.pm, a model of pve-ha-manager's ``load_balance``) runs rounds through
the Perl drop-in with the flight recorder on (tests/data/ha_rounds.pl); the review of that
directory must take, round by round and gate by gate, the decisions the simulator took: the
same gate, hold counter, imbalance and move, to the last bit. A what-if of the same recording
must take the decisions of a second simulator with those settings that judged every round on the
first one's state. Static (TOPSIS, margin stops) and dynamic (bruteforce, a guest not yet running,
loads that change), settings read from a datacenter.cfg in percent and in fractions.
Real Perl client, real server, real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from crs_bridge.client import cli_command
from tests import ROOT

GIB = 2**30
pytestmark = pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")


def dynamic_scenario() -> dict:
    """Four nodes with a base load, twelve guests piled on three (one not yet running), loads that
    jump in round 11 and 19; HA's settings: hold 2, bruteforce."""
    nodes = {f"n{i}": {"maxcpu": 16, "maxmem": 64 * GIB, "cpu": 0.5 + i / 7, "mem": GIB} for i in range(1, 5)}
    place = ["n1"] * 6 + ["n2"] * 4 + ["n3"] * 2
    services = {
        f"vm:{i}": {
            "node": place[i - 1],
            "state": "started",
            "running": 1,
            "maxcpu": 4,
            "maxmem": 8 * GIB,
            "cpu": 0.3 + (i % 5) * 0.45 + i / 13,
            "mem": (1 + i % 3) * GIB,
        }
        for i in range(1, 13)
    }
    services["vm:12"]["running"] = 0
    events = {
        "11": [["service", "vm:3", "cpu", 3.9], ["service", "vm:4", "cpu", 3.7], ["node", "n2", "cpu", 4.5]],
        "19": [["service", "vm:7", "cpu", 3.95], ["node", "n4", "cpu", 9.1]],
    }
    return {
        "mode": "dynamic",
        "nodes": nodes,
        "services": services,
        "rounds": 26,
        "events": events,
        "settings": {"threshold": 0.3, "margin": 0.1, "hold_duration": 2, "method": "bruteforce"},
        "cfg": "crs: ha=dynamic,ha-auto-rebalance=1,ha-auto-rebalance-threshold=30,ha-auto-rebalance-margin=10,"
        "ha-auto-rebalance-hold-duration=2",
        "pve-cluster": "9.1.5",
        "what-if": {"threshold": 0.2, "margin": 0.1, "hold_duration": 1, "method": "topsis"},
        "what-if-option": "threshold=0.2,hold=1,method=topsis",
    }


def static_scenario() -> dict:
    """Three nodes, ten containers (one without a cpu limit: the whole node) piled on one, limits
    raised in round 14; HA's settings: threshold 0.1, margin 0.15, hold 3, TOPSIS."""
    nodes = {f"n{i}": {"maxcpu": 24, "maxmem": 128 * GIB} for i in range(1, 4)}
    place = ["n1"] * 7 + ["n2"] * 2 + ["n3"]
    services = {
        f"ct:{i}": {
            "node": place[i - 1],
            "state": "started",
            "running": 1,
            "maxcpu": 2.0 + (i % 4) * 1.5,
            "maxmem": (2 + i % 5) * 4 * GIB,
        }
        for i in range(1, 11)
    }
    services["ct:10"]["maxcpu"] = 0
    events = {"14": [["service", "ct:2", "maxcpu", 12.0], ["service", "ct:5", "maxmem", 64 * GIB]]}
    return {
        "mode": "static",
        "nodes": nodes,
        "services": services,
        "rounds": 22,
        "events": events,
        "settings": {"threshold": 0.1, "margin": 0.15, "hold_duration": 3, "method": "topsis"},
        "cfg": "crs: ha=static,ha-auto-rebalance=1,ha-auto-rebalance-threshold=0.1,ha-auto-rebalance-margin=0.15,"
        "ha-auto-rebalance-hold-duration=3,ha-auto-rebalance-method=topsis",
        "pve-cluster": "9.1.4",
        "what-if": {"threshold": 0.1, "margin": 0.05, "hold_duration": 3, "method": "bruteforce"},
        "what-if-option": "margin=0.05,method=bruteforce",
    }


def run_simulation(scenario: dict, directory: Path) -> dict:
    """The simulator's reports ({real, what-if}) of ``scenario``, its rounds recorded in ``directory``."""
    path = directory.parent / f"{directory.name}-scenario.json"
    path.write_text(json.dumps(scenario))
    env = {
        **os.environ,
        "CRS_BRIDGE_CONFIG": os.devnull,
        "CRS_BRIDGE_RECORD": str(directory),
        "CRS_BRIDGE_COMMAND": " ".join([*cli_command(), "serve"]),
    }
    done = subprocess.run(
        ["perl", str(ROOT / "tests" / "data" / "ha_rounds.pl"), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def review(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*cli_command(), "review", *args], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False
    )


@pytest.fixture(scope="module", params=[dynamic_scenario, static_scenario], ids=["dynamic", "static"])
def simulated(request, tmp_path_factory) -> tuple[dict, dict, Path, Path]:
    """(scenario, the simulator's reports, the recorder directory, a datacenter.cfg of its settings)."""
    scenario = request.param()
    base = tmp_path_factory.mktemp(scenario["mode"])
    directory = base / "records"
    reports = run_simulation(scenario, directory)
    cfg = base / "datacenter.cfg"
    cfg.write_text(f"keyboard: en-us\n{scenario['cfg']}\n")
    return scenario, reports, directory, cfg


def assert_same_decisions(reviewed: list[dict], simulated: list[dict]) -> None:
    """Round by round: the gate, the hold counter, the imbalance and the move (or the gain the
    margin refused), bit for bit."""
    assert len(reviewed) == len(simulated)
    for mine, ha in zip(reviewed, simulated):
        where = f"round {ha['round']}"
        assert mine["round"] == ha["round"], where
        assert mine["decision"] == ha["gate"], where
        assert mine["counter"] == ha["counter"], where
        assert mine["imbalance"] == float(ha["imbalance"]), where
        if ha["gate"] == "moved":
            move = ha["move"]
            assert (mine["best"]["sid"], mine["best"]["source"], mine["best"]["target"]) == (
                move["sid"],
                move["from"],
                move["to"],
            ), where
            assert mine["best"]["imbalance"] == float(move["expected"]), where
        if ha["gate"] in ("moved", "margin"):
            assert mine["best"]["relative"] == float(ha["relative"]), where


def test_the_review_takes_ha_s_decisions_gate_by_gate(simulated):
    scenario, reports, directory, cfg = simulated
    done = review(str(directory), "--datacenter-cfg", str(cfg), "--pve-cluster", scenario["pve-cluster"], "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    gates = {report["gate"] for report in reports["real"]}
    assert {"hold", "moved", "motion"} <= gates and gates & {"threshold", "margin"}, "the scenario covers the gates"
    settings = result["settings"]
    assert settings["threshold"]["value"] == scenario["settings"]["threshold"]
    assert settings["hold"]["value"] == scenario["settings"]["hold_duration"]
    assert str(cfg) in settings["margin"]["source"]
    unit = "percent" if scenario["pve-cluster"] == "9.1.5" else "fraction"
    assert f"({unit}, pve-cluster {scenario['pve-cluster']})" in settings["threshold"]["source"]
    assert_same_decisions(result["rounds"], reports["real"])
    # With HA's own settings, nothing in the recordings contradicts the review.
    assert [r["notes"] for r in result["rounds"]] == [[] for _ in result["rounds"]]
    assert result["summary"]["moves"] == sum(r["gate"] == "moved" for r in reports["real"])


def test_a_what_if_takes_the_decisions_of_a_run_with_those_settings(simulated):
    scenario, reports, directory, cfg = simulated
    done = review(
        str(directory),
        "--datacenter-cfg",
        str(cfg),
        "--pve-cluster",
        scenario["pve-cluster"],
        "--what-if",
        scenario["what-if-option"],
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert_same_decisions([{**r["what-if"], "round": r["round"]} for r in result["rounds"]], reports["what-if"])
    differ = [r["round"] for r in result["rounds"] if r["what-if"]["differs"]]
    expected = [
        real["round"]
        for real, other in zip(reports["real"], reports["what-if"])
        if (real["gate"], real["move"] and real["move"]["sid"])
        != (other["gate"], other["move"] and other["move"]["sid"])
    ]
    assert differ == expected and differ, "the what-if decides some rounds otherwise"


def test_the_text_walks_the_rounds_oldest_first(simulated):
    scenario, reports, directory, cfg = simulated
    done = review(str(directory), "--datacenter-cfg", str(cfg), "--pve-cluster", scenario["pve-cluster"])
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line[:5].strip().isdigit()]
    assert [int(row[0]) for row in rows] == list(range(1, scenario["rounds"] + 1))
    moved = [int(row[0]) for row in rows if row[-1] == "MOVED"]
    assert moved == [r["round"] for r in reports["real"] if r["gate"] == "moved"]
    summary = next(line for line in done.stdout.splitlines() if line.startswith("Summary:"))
    assert f"{scenario['rounds']} rounds" in summary and f"{len(moved)} move" in summary
    assert "Imbalance, oldest to newest" in done.stdout
