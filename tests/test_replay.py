"""``crs-bridge replay`` and plan/explain of a flight recorder file (crs_bridge/replay.py).

The recording here is made as the Perl drop-in's recorder makes one (perl-client/t/recorder.t
checks the real one): a scheduler's mutations and its queries with the responses a real server
wrote. Replay must find every answer identical, and an answer one bit off, at its call."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from crs_bridge.client import BridgeClient, cli_command
from crs_bridge.replay import _difference
from tests import ROOT

GIB = 2**30
NODES = [["add_node", f"n{i}", 8, 32 * GIB] for i in (1, 2, 3)]
SERVICES = [
    [
        "add_service",
        f"vm:{i}",
        {"stats": {"maxcpu": 1 + i / 3, "maxmem": i * GIB}, "running": True, "current-node": "n1" if i <= 4 else "n2"},
    ]
    for i in range(1, 7)
]
# HA's change_service_state: remove, then add again (moving); then a legacy add.
JOURNAL = [
    *NODES,
    *SERVICES,
    ["remove_service_usage", "vm:2"],
    [
        "add_service",
        "vm:2",
        {"stats": {"maxcpu": 2.0, "maxmem": 2 * GIB}, "running": True, "current-node": "n1", "target-node": "n3"},
    ],
    ["add_service_usage_to_node", "n3", "vm:5", {"maxcpu": 1.0, "maxmem": GIB}],
]
CANDIDATES = [{"leader": f"vm:{i}", "resources": [f"vm:{i}"], "nodes": ["n3"]} for i in (1, 3, 4)]


@pytest.fixture(scope="module")
def recording() -> dict:
    """A recording of a live scheduler: imbalance after the adds, then the scoring (the decision)."""
    with BridgeClient() as server:
        handle = server.call("scheduler.new", {"mode": "static", "imbalance": "raw"})["scheduler"]
        server.call("scheduler.apply", {"scheduler": handle, "mutations": JOURNAL[:9]})
        imbalance = server.request("scheduler.calculate_node_imbalance", {"scheduler": handle})
        server.call("scheduler.apply", {"scheduler": handle, "mutations": JOURNAL[9:]})
        params = {"candidates": CANDIDATES, "limit": 2}
        scores = server.request("scheduler.score_best_balancing_migration_candidates", {"scheduler": handle, **params})
    calls = [
        {"at": 9, "method": "scheduler.calculate_node_imbalance", "params": {}, "answer": imbalance},
        {
            "at": len(JOURNAL),
            "method": "scheduler.score_best_balancing_migration_candidates",
            "params": {"candidates": "@candidates", "limit": 2},
            "answer": scores,
        },
        {"at": len(JOURNAL), "method": "scheduler.list_nodes", "params": {}, "answer": {"result": ["n1", "n2", "n3"]}},
    ]
    record = {"format": 1, "mode": "static", "imbalance": "raw", "decision": 1, "journal": JOURNAL, "calls": calls}
    return {"candidates": CANDIDATES, "method": "bruteforce", "limit": 2, "imbalance": "raw", "record": record}


def write(tmp_path: Path, recording: dict) -> str:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(recording))
    return str(path)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_replay_finds_every_answer_identical(recording, tmp_path):
    done = run("replay", write(tmp_path, recording))
    assert done.returncode == 0, done.stderr
    assert "3 of 3 answers replayed, all bit-identical (1 answered by the client)" in done.stdout


def test_replay_shows_the_first_difference(recording, tmp_path):
    scores = recording["record"]["calls"][1]["answer"]["result"]
    original = scores[1]["imbalance"]
    scores[1]["imbalance"] = math.nextafter(original, math.inf)  # one bit off
    try:
        done = run("replay", write(tmp_path, recording))
    finally:
        scores[1]["imbalance"] = original
    assert done.returncode == 1
    assert (
        f"call 2 (scheduler.score_best_balancing_migration_candidates, after {len(JOURNAL)} mutations)" in done.stderr
    )
    assert f"result[1].imbalance: expected {math.nextafter(original, math.inf)!r}, got {original!r}" in done.stderr


def test_replay_refuses_what_is_no_recording(tmp_path):
    assert run("replay", str(tmp_path / "missing.json")).returncode == 2
    example = run("replay", "@examples/unbalanced-cluster.json")
    assert example.returncode == 2
    assert "not a flight recorder file" in example.stderr


def test_explain_sees_the_state_at_the_decision(recording, tmp_path):
    done = run("explain", "@" + write(tmp_path, recording), "--json", "--limit", "2")
    assert done.returncode == 0, done.stderr
    explanation = json.loads(done.stdout)
    scores = recording["record"]["calls"][1]["answer"]["result"]
    assert [c["migration"] for c in explanation["chosen"]] == [s["migration"] for s in scores]
    assert [c["imbalance"] for c in explanation["chosen"]] == [s["imbalance"] for s in scores]


def test_plan_takes_a_recording(recording, tmp_path):
    done = run("plan", "@" + write(tmp_path, recording), "--json", "--threshold", "0")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["steps"][0]
    assert first["sid"] == recording["record"]["calls"][1]["answer"]["result"][0]["migration"]["sid"]


def test_a_raw_threshold_of_a_recording_is_judged_by_its_nodes(recording, tmp_path):
    # 3 recorded nodes: a raw imbalance reaches sqrt(2); 1.4 is a threshold, 1.5 a percentage.
    path = "@" + write(tmp_path, recording)
    done = run("plan", path, "--json", "--threshold", "1.4")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["threshold"] == 1.4
    refused = run("plan", path, "--threshold", "1.5")
    assert refused.returncode == 2 and "did you mean --threshold 0.015?" in refused.stderr


@pytest.mark.parametrize(
    ("expected", "got", "where"),
    [
        (0.0, -0.0, "result"),  # the same value, not the same bits
        (1, 1.0, "result"),  # the same value, another JSON type
        (True, 1, "result"),
        ([1, 2], [1], "result"),
        ({"a": 1}, {"a": 1, "b": 2}, "result.b"),
        ([{"imbalance": 0.5}], [{"imbalance": 0.5000000000000001}], "result[0].imbalance"),
    ],
)
def test_difference_is_bit_exact(expected, got, where):
    found = _difference(expected, got, "result")
    assert found is not None and found.startswith(where + ":"), found


def test_identical_values_have_no_difference():
    value = {"result": [{"migration": {"sid": "vm:1"}, "imbalance": 0.1 + 0.2}], "nan": float("nan")}
    assert _difference(value, json.loads(json.dumps(value)), "result") is None
