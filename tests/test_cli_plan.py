"""``crs-bridge plan`` and ``crs-bridge explain``: the real command (and through it the real
server) on examples/unbalanced-cluster.json; the text views against the JSON the server returns
for the same params, plus the bar drawing of crs_bridge/render.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from crs_bridge.client import BridgeClient, cli_command
from crs_bridge.render import WIDTH, bar, load_bars

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "@examples/unbalanced-cluster.json"
PARAMS = json.loads((ROOT / "examples" / "unbalanced-cluster.json").read_text())
CLUSTER_PARAMS = {"usage": PARAMS["usage"], "candidates": PARAMS["candidates"]}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


@pytest.fixture(scope="module")
def server():
    with BridgeClient() as client:
        yield client


@pytest.fixture(scope="module")
def plan(server):
    """The plan of the example as the RPC method returns it (the file's scoring 'limit' dropped)."""
    return server.call("plan_rebalance", CLUSTER_PARAMS)


def test_plan_json_is_the_rpc_result(plan):
    done = run("plan", CLUSTER, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == plan
    assert 2 <= len(plan["steps"]) <= 4  # the README's worked example needs several moves


def test_plan_text_shows_every_step_and_every_node_bar(plan):
    done = run("plan", CLUSTER)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= WIDTH for line in lines), [line for line in lines if len(line) > WIDTH]
    for number, step in enumerate(plan["steps"], 1):
        row = [line for line in lines if re.match(rf"\s*{number}\s+{re.escape(step['sid'])}\b", line)]
        assert len(row) == 1, lines
        assert f"{step['source-node']} -> {step['target-node']}" in row[0]
        assert f"{step['imbalance-before']:.4f} -> {step['imbalance-after']:.4f}" in row[0]
    assert plan["stop-message"].split(";")[0] in done.stdout.replace("\n  ", " ")
    bars = [re.fullmatch(r"(\S*)\s+(before|after)\s+\|([#.>]+)\|\s+(\d+\.\d)%", line) for line in lines]
    bars = [b for b in bars if b]
    nodes = [name for name, when in ((b[1], b[2]) for b in bars) if when == "before"]
    assert nodes == [n["node"] for n in plan["before"]["nodes"]]
    shown = [float(b[4]) for b in bars]
    expected = [
        round(100 * n[k]["load"], 1) for n in zip(plan["before"]["nodes"], plan["after"]["nodes"]) for k in (0, 1)
    ]
    assert shown == pytest.approx(expected, abs=0.051)
    widths = {len(b[3]) for b in bars}
    assert len(widths) == 1  # one scale for every bar
    full = [b[3].count("#") / len(b[3]) for b in bars]
    assert full == pytest.approx([value / 100 for value in shown], abs=1 / len(bars[0][3]))


def test_plan_flags_override_the_file(server):
    done = run("plan", CLUSTER, "--method", "topsis", "--max-steps", "1", "--margin", "0", "--json")
    assert done.returncode == 0, done.stderr
    expected = server.call("plan_rebalance", {**CLUSTER_PARAMS, "method": "topsis", "max_steps": 1, "margin": 0})
    assert json.loads(done.stdout) == expected
    assert expected["stop-reason"] == "max-steps" and len(expected["steps"]) == 1


def test_plan_max_steps_none_overrides_the_file(server):
    """'--max-steps none' is null (no limit), not 'not given': the file's max_steps must not apply."""
    cluster = json.dumps({**CLUSTER_PARAMS, "max_steps": 1})
    done = run("plan", cluster, "--max-steps", "none", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == server.call("plan_rebalance", {**CLUSTER_PARAMS, "max_steps": None})
    assert result["max-steps"] is None and len(result["steps"]) > 1 and result["stop-reason"] != "max-steps"
    limited = json.loads(run("plan", cluster, "--json").stdout)  # without the flag, the file's limit
    assert limited["max-steps"] == 1 and len(limited["steps"]) == 1


def test_plan_json_keeps_an_integer_beyond_64_bits():
    """The server echoes max_steps 2**64 as it was sent; --json printed it as a float (found in review)."""
    cluster = json.dumps({**CLUSTER_PARAMS, "max_steps": 2**64})
    done = run("plan", cluster, "--json")
    assert done.returncode == 0, done.stderr
    assert '"max-steps": 18446744073709551616' in done.stdout
    assert json.loads(done.stdout)["max-steps"] == 2**64


def test_plan_invalid_option_is_the_server_error_naming_the_field():
    done = run("plan", CLUSTER, "--threshold", "-1")
    assert done.returncode == 1
    assert "error -32602" in done.stderr and "threshold" in done.stderr
    assert done.stdout == ""


def test_plan_refuses_unreadable_input():
    assert run("plan", "@examples/no-such-cluster.json").returncode == 2
    assert run("plan", "[1, 2]").returncode == 2
    done = run("plan", CLUSTER, "--threshold", "nan")
    assert done.returncode == 2 and "finite" in done.stderr


def test_explain_text_names_the_choice_and_the_runner_up(server):
    expected = server.call("explain_migrations", {**CLUSTER_PARAMS, "threshold": 0.3, "margin": 0.1})
    done = run("explain", CLUSTER)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= WIDTH for line in lines)
    for label, detail in (("Chosen", expected["chosen"][0]), ("Runner-up", expected["runner-up"])):
        m = detail["migration"]
        line = next(line for line in lines if line.startswith(f"{label}:"))
        assert f"{m['sid']}  {m['source-node']} -> {m['target-node']}" in line
        assert f"imbalance {detail['imbalance']:.6f}" in line
    assert f"Migrate {expected['chosen'][0]['migration']['sid']}" in done.stdout
    assert len([line for line in lines if re.search(r"\snow\s+\|[#.>]+\|", line)]) == len(PARAMS["usage"]["nodes"])


def test_explain_json_says_why_nothing_moves(server):
    done = run("explain", CLUSTER, "--threshold", "0.9", "--method", "topsis", "--imbalance", "normalized", "--json")
    assert done.returncode == 0, done.stderr
    params = {**CLUSTER_PARAMS, "method": "topsis", "imbalance": "normalized", "threshold": 0.9, "margin": 0.1}
    expected = server.call("explain_migrations", params)
    assert json.loads(done.stdout) == expected
    assert expected["reason"] == "threshold-reached"
    text = run("explain", CLUSTER, "--threshold", "0.9", "--imbalance", "normalized")
    words = " ".join(text.stdout.split())  # the decision is wrapped to the terminal width
    assert "nothing needs to move" in words and "Best:" in words


def test_explain_checks_can_be_turned_off():
    done = run("explain", CLUSTER, "--threshold", "none", "--margin", "none", "--limit", "2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["threshold"], result["margin"], result["limit"], len(result["chosen"])) == (None, None, 2, 2)


# -- the text pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (0.0, "." * 10),
        (0.5, "#" * 5 + "." * 5),
        (0.04, "." * 10),
        (0.96, "#" * 10),
        (1.0, "#" * 10),
        (1.7, "#" * 9 + ">"),
    ],
)
def test_bar(fraction, expected):
    assert bar(fraction, 10) == expected


def test_load_bars_fit_the_width_and_cut_long_names():
    long = "a-node-name-much-longer-than-sixteen"
    lines = load_bars([(long, [("before", 0.25), ("after", 1.5)]), ("n2", [("before", 0.0), ("after", 0.5)])])
    assert len(lines) == 4
    assert all(len(line) <= WIDTH for line in lines)
    assert lines[0].startswith("a-node-name-muc~ ")
    assert lines[1].startswith(" " * 16) and lines[1].rstrip().endswith("150.0%")


def test_readme_shows_the_real_output_of_the_worked_example():
    readme = (ROOT / "README.md").read_text()
    for command in ("plan", "explain"):
        prompt = f"    $ .venv/bin/crs-bridge {command} {CLUSTER}\n"
        assert prompt in readme
        block = readme.split(prompt, 1)[1].split("\n\n    $ ", 1)[0].split("\n\n`", 1)[0]
        shown = [line.removeprefix("    ") for line in block.splitlines()]
        done = run(command, CLUSTER)
        assert shown == done.stdout.splitlines()
