"""The ``crs-bridge`` command: ``call`` (exit codes, output), the examples, ``serve --trace``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from crs_bridge.client import cli_command

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run(*args: str, stdin: bytes | None = None, command: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(command or cli_command()), *args], input=stdin, capture_output=True, cwd=ROOT, timeout=60, check=False
    )


def test_demo_call_pretty_prints_the_best_migrations():
    """What `make demo` runs."""
    done = run("call", "score_best_balancing_migrations", "@examples/dynamic-cluster.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"\n") > 10  # pretty-printed, not one line
    result = json.loads(done.stdout)
    limit = json.loads((EXAMPLES / "dynamic-cluster.json").read_text())["limit"]
    assert 0 < len(result) <= limit
    imbalances = [r["imbalance"] for r in result]
    assert imbalances == sorted(imbalances)


@pytest.mark.parametrize(
    ("method", "example"),
    [
        ("score_best_balancing_migrations", "static-cluster.json"),
        ("select_best_balancing_migration", "static-cluster.json"),
        ("score_nodes_to_start_resource", "start-resource.json"),
    ],
)
def test_examples_are_valid_params(method, example):
    params = json.loads((EXAMPLES / example).read_text())
    if method == "select_best_balancing_migration":
        params.pop("limit")
    if method != "score_nodes_to_start_resource":
        params.pop("stats", None)  # the guest to start, of score_nodes_to_start_resource
    done = run("call", method, json.dumps(params))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)


def test_session_example_runs_through_serve():
    script = (EXAMPLES / "static-session.jsonl").read_bytes()
    done = run("serve", stdin=script)
    assert done.returncode == 0, done.stderr
    answers = [orjson.loads(line) for line in done.stdout.splitlines()]
    requests = [orjson.loads(line) for line in script.splitlines() if line.strip()]
    assert [a["id"] for a in answers] == [r["id"] for r in requests]
    failed = [a["id"] for a in answers if "error" in a]
    assert failed == [14]  # the deliberate duplicate add_node
    assert answers[-2]["result"] is True  # scheduler.free


def test_call_with_inline_params_and_python_dash_m():
    done = run("call", "scheduler.new", '{"mode": "dynamic"}', command=[sys.executable, "-m", "crs_bridge"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"scheduler": "s1"}


def test_call_reads_params_from_stdin():
    done = run("call", "calculate_node_imbalance", "@-", stdin=b'{"usage": {"mode": "static", "nodes": []}}')
    assert done.returncode == 0 and json.loads(done.stdout) == 0.0


def test_call_error_goes_to_stderr_with_code_message_and_data():
    params = {"usage": {"mode": "static", "nodes": [{"name": "a", "maxcpu": 0, "maxmem": 1}]}}
    done = run("call", "calculate_node_imbalance", json.dumps(params))
    assert done.returncode == 1
    assert done.stdout == b""
    stderr = done.stderr.decode()
    assert "error -32602" in stderr and "usage.nodes[0].maxcpu" in stderr and '"errors"' in stderr


def test_call_of_unknown_method_fails():
    done = run("call", "no_such_method")
    assert done.returncode == 1 and b"error -32601" in done.stderr and b"no_such_method" in done.stderr


def test_call_with_unreadable_params_is_a_usage_error():
    assert run("call", "bridge.info", "{not json").returncode == 2
    assert run("call", "bridge.info", "@examples/no-such-file.json").returncode == 2


def test_call_with_a_params_file_that_is_not_utf8_is_a_usage_error(tmp_path):
    """Like not JSON, or @- with the same bytes: one line on stderr and exit 2, no traceback."""
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"usage": "\xff"}')
    for params, stdin in ((f"@{path}", None), ("@-", path.read_bytes())):
        done = run("call", "calculate_node_imbalance", params, stdin=stdin)
        assert done.returncode == 2, done.stderr
        assert done.stdout == b""
        assert done.stderr.decode().startswith("crs-bridge call: cannot read PARAMS: ")
        assert done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr


def test_serve_trace_file_records_requests_responses_and_durations(tmp_path):
    trace = tmp_path / "trace.log"
    done = run("serve", "--trace", str(trace), stdin=b'{"jsonrpc": "2.0", "id": 7, "method": "bridge.info"}\n')
    assert done.returncode == 0
    lines = trace.read_text().splitlines()
    assert len(lines) == 2
    assert "-->" in lines[0] and '"id": 7' in lines[0]
    assert "<--" in lines[1] and " ms " in lines[1] and '"id":7' in lines[1]


def test_the_server_validates_without_looking_for_pydantic_plugins():
    """serve() stands in for pydantic's plugin loader (bridge.server.skip_pydantic_plugin_discovery):
    the first validations import nothing to look for plugins, and validate as always."""
    script = """
import sys
from crs_bridge.bridge.server import skip_pydantic_plugin_discovery
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State
print(skip_pydantic_plugin_discovery(), skip_pydantic_plugin_discovery())
protocol = Protocol(State())
print(protocol.handle(b'{"jsonrpc":"2.0","id":1,"method":"scheduler.new","params":{"mode":"static"}}').decode())
print(protocol.handle(b'{"jsonrpc":"2.0","id":2,"method":"scheduler.new","params":{"mode":"x"}}').decode())
print("importlib.metadata" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=60, check=True)
    first, good, bad, looked = done.stdout.decode().splitlines()
    assert first == "True False"  # the second call finds the stand-in in place
    assert orjson.loads(good)["result"] == {"scheduler": "s1"}
    error = orjson.loads(bad)["error"]
    assert error["code"] == -32602 and error["data"]["errors"][0]["loc"] == "mode"
    assert looked == "False"
