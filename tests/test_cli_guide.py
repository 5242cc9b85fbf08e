"""The command line as a new user meets it: --version, the method list, close names for a typo,
a file name without @, which command failed, percentages for fractions, the example clusters
answering the first questions, and `make demo`. Every command runs the real console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from crs_bridge.client import BridgeClient, cli_command
from tests import ROOT

CLUSTERS = ["dynamic-cluster.json", "static-cluster.json", "unbalanced-cluster.json"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def cluster(name: str) -> dict:
    return json.loads((ROOT / "examples" / name).read_text())


@pytest.fixture(scope="module")
def server():
    with BridgeClient() as client:
        yield client


def test_version_is_the_installed_one():
    done = run("--version")
    assert done.returncode == 0
    assert done.stdout == f"crs-bridge {version('crs-bridge')}\n"


def test_methods_lists_every_served_method_with_its_summary(server):
    methods = server.call("rpc.discover")["methods"]
    done = run("methods")
    assert done.returncode == 0, done.stderr
    names = [line for line in done.stdout.splitlines() if line and not line.startswith((" ", "'"))]
    assert names == [method["name"] for method in methods]
    text = " ".join(done.stdout.split())
    assert all(method["summary"] in text for method in methods)


def test_methods_name_shows_its_params_and_positional_orders():
    done = run("methods", "scheduler.add_node")
    assert done.returncode == 0, done.stderr
    assert "  nodename (required, string)" in done.stdout
    assert "Positional on a static scheduler: [scheduler, nodename, maxcpu, maxmem]" in done.stdout
    assert "  threshold (default 0.3, number)" in run("methods", "plan_rebalance").stdout


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("score_best_balancing_migration", "score_best_balancing_migrations"),
        ("add_nod", "scheduler.add_node"),
        ("calculate_imbalance", "calculate_node_imbalance"),
    ],
)
def test_unknown_method_names_the_close_ones(typo, meant):
    done = run("call", typo, "{}")
    assert done.returncode == 1
    assert "crs-bridge call: error -32601" in done.stderr
    assert f"crs-bridge call: did you mean {meant}" in done.stderr
    listed = run("methods", typo)
    assert listed.returncode == 2 and f"did you mean {meant}" in listed.stderr


def test_unknown_method_without_close_names_points_to_the_list():
    done = run("call", "xyzzy")
    assert done.returncode == 1
    assert "did you mean" not in done.stderr and "'crs-bridge methods' lists them all" in done.stderr


@pytest.mark.parametrize("command", [["call", "calculate_node_imbalance"], ["plan"], ["explain"]])
def test_a_file_name_without_at_says_to_write_at(command):
    done = run(*command, "examples/dynamic-cluster.json")
    assert done.returncode == 2
    assert f"crs-bridge {command[0]}: " in done.stderr
    assert "write @examples/dynamic-cluster.json" in done.stderr


@pytest.mark.parametrize("command", ["plan", "explain"])
def test_plan_and_explain_errors_name_their_command(command):
    done = run(command, '{"usage": 1}')
    assert done.returncode == 1
    assert done.stderr.startswith(f"crs-bridge {command}: error -32602")
    missing = run(command, "@examples/no-such-cluster.json")
    assert missing.returncode == 2 and missing.stderr.startswith(f"crs-bridge {command}: cannot read CLUSTER")


@pytest.mark.parametrize(
    ("command", "option", "value", "meant"),
    [
        ("plan", "--threshold", "30", "--threshold 0.3"),
        ("plan", "--margin", "10", "--margin 0.1"),
        ("explain", "--threshold", "30", "--threshold 0.3"),
        ("explain", "--margin", "12.5", "--margin 0.125"),
    ],
)
def test_a_percentage_is_refused_naming_the_fraction(command, option, value, meant):
    done = run(command, "@examples/unbalanced-cluster.json", option, value)
    assert done.returncode == 2 and done.stdout == ""
    assert f"crs-bridge {command}: {option} {value} reads as a percentage" in done.stderr
    assert f"did you mean {meant}?" in done.stderr


def test_a_percentage_in_the_cluster_file_is_refused_too():
    params = {**cluster("unbalanced-cluster.json"), "threshold": 30}
    done = run("plan", json.dumps(params))
    assert done.returncode == 2
    assert "'threshold': 30 in CLUSTER reads as a percentage" in done.stderr
    assert "did you mean 'threshold': 0.3?" in done.stderr


def test_a_raw_threshold_up_to_the_largest_raw_imbalance_is_taken():
    # 3 nodes: a raw imbalance reaches sqrt(2) = 1.414 (all load on one node); 1.4 is a threshold.
    done = run("plan", "@examples/unbalanced-cluster.json", "--threshold", "1.4", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["threshold"] == 1.4
    refused = run("plan", "@examples/unbalanced-cluster.json", "--threshold", "1.4", "--imbalance", "normalized")
    assert refused.returncode == 2 and "did you mean --threshold 0.014?" in refused.stderr
    assert run("plan", "@examples/unbalanced-cluster.json", "--threshold", "1.5").returncode == 2


def test_fractions_up_to_one_are_taken():
    done = run("plan", "@examples/unbalanced-cluster.json", "--threshold", "1", "--margin", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert (plan["threshold"], plan["margin"]) == (1.0, 0.5)


@pytest.mark.parametrize("name", CLUSTERS)
def test_example_clusters_answer_the_imbalance(server, name):
    done = run("call", "calculate_node_imbalance", f"@examples/{name}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == server.call("calculate_node_imbalance", {"usage": cluster(name)["usage"]})
    assert f"not sent from examples/{name}: candidates, limit" in done.stderr


@pytest.mark.parametrize("name", ["dynamic-cluster.json", "static-cluster.json"])
def test_example_clusters_answer_where_a_guest_would_start(server, name):
    params = cluster(name)
    done = run("call", "score_nodes_to_start_resource", f"@examples/{name}")
    assert done.returncode == 0, done.stderr
    expected = server.call("score_nodes_to_start_resource", {"usage": params["usage"], "stats": params["stats"]})
    assert json.loads(done.stdout) == expected
    assert [node for node, _ in expected] == [node["name"] for node in params["usage"]["nodes"]]


def test_a_key_no_method_takes_still_reaches_the_server(tmp_path):
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({**cluster("dynamic-cluster.json"), "limt": 3}))
    done = run("call", "score_best_balancing_migrations", f"@{path}")
    assert done.returncode == 1
    assert "limt" in done.stderr and "error -32602" in done.stderr


def test_inline_params_are_sent_as_written():
    done = run("call", "calculate_node_imbalance", json.dumps(cluster("dynamic-cluster.json")))
    assert done.returncode == 1 and "not sent" not in done.stderr
    assert "candidates" in done.stderr and "error -32602" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_explains_before_the_json():
    venv = Path(sys.executable).parents[1]
    if not (venv / ".installed").exists():
        pytest.skip("make demo needs the venv of `make setup`")
    env = {**os.environ, "MAKEFLAGS": ""}
    done = subprocess.run(
        ["make", "-s", "demo", f"VENV={venv}"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    words, _, data = done.stdout.partition("\n[")
    assert "Decision: Migrate " in words and "Node load now" in words
    scored = json.loads("[" + data)
    assert f"from {scored[0]['migration']['source-node']} to {scored[0]['migration']['target-node']}" in words
