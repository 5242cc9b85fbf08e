"""JSON-RPC 2.0 envelopes against the real server: parse errors, invalid requests, batches,
notifications, unknown methods and internal errors. jsonrpcserver words the answers to what is
not JSON, not a request, or an unknown method; the server logs what is wrong with an invalid
request (at level info)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import orjson
import pytest

from crs_bridge.client import BridgeClient
from tests import ROOT


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient(["--debug-methods", "--log-level", "info"]) as client:
        yield client


#: jsonrpcserver's answer to a message that is not a request or a non-empty batch of requests.
INVALID_REQUEST = {"code": -32600, "message": "Invalid request", "data": "The request failed schema validation"}


def logged(bridge: BridgeClient, before: int) -> str:
    """What follows "invalid request: " in the server's next such log line after the first
    ``before`` ones (its writer thread writes whenever it runs: the log is read until the line is
    there; the wait is bounded only so that a missing record fails the test)."""
    deadline = time.monotonic() + 60
    while bridge.stderr().count(MARK) <= before:
        assert time.monotonic() < deadline, f"no new {MARK!r} logged; the log: {bridge.stderr()!r}"
        time.sleep(0.05)
    return bridge.stderr().split(MARK)[before + 1].splitlines()[0]


MARK = "invalid request: "


def error_of(answer: dict) -> tuple[int, str]:
    assert answer["jsonrpc"] == "2.0" and "result" not in answer
    return answer["error"]["code"], answer["error"]["message"]


def test_parse_error_says_where(bridge):
    bridge.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "bridge.info",, }')
    answer = bridge.read()
    assert answer["error"]["code"] == -32700 and answer["error"]["message"] == "Parse error"
    assert "line 1 column" in answer["error"]["data"]
    assert answer["id"] is None


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (1, "object"),
        ("bridge.info", "object"),
        ({"jsonrpc": "1.0", "id": 1, "method": "bridge.info"}, "jsonrpc"),
        ({"id": 1, "method": "bridge.info"}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1}, "method"),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, "method"),
        ({"jsonrpc": "2.0", "id": True, "method": "bridge.info"}, "id"),
        ({"jsonrpc": "2.0", "id": [1], "method": "bridge.info"}, "id"),
        ({"jsonrpc": "2.0", "id": 1, "method": "bridge.info", "params": "x"}, "params"),
        ({"jsonrpc": "2.0", "id": 1, "method": "bridge.info", "extra": 1}, "extra"),
    ],
)
def test_invalid_request_is_refused_and_what_is_wrong_is_logged(bridge, request_, problem):
    before = bridge.stderr().count(MARK)
    bridge.send(request_)
    answer = bridge.read()
    assert answer == {"jsonrpc": "2.0", "error": INVALID_REQUEST, "id": None}
    assert problem in logged(bridge, before)


def test_null_id_is_a_request_not_a_notification(bridge):
    bridge.send({"jsonrpc": "2.0", "id": None, "method": "bridge.info"})
    answer = bridge.read()
    assert answer["id"] is None and answer["result"]["name"] == "crs-bridge"


def test_string_and_fractional_ids_are_echoed(bridge):
    for ident in ["abc", 2.5, -3]:
        bridge.send(bridge.message("bridge.info", None, ident))
        assert bridge.read()["id"] == ident


def test_empty_batch_gets_one_invalid_request_error(bridge):
    before = bridge.stderr().count(MARK)
    bridge.send([])
    assert bridge.read() == {"jsonrpc": "2.0", "error": INVALID_REQUEST, "id": None}
    assert logged(bridge, before) == "empty batch"


def test_a_batch_with_an_invalid_element_is_refused_whole_and_runs_nothing(bridge):
    before = bridge.call("bridge.info")["schedulers"]
    batch = [
        bridge.message("scheduler.new", {"mode": "static"}, "new"),
        bridge.message("bridge.info", None, "info"),
        1,  # invalid element
    ]
    logged_before = bridge.stderr().count(MARK)
    bridge.send(batch)
    assert bridge.read() == {"jsonrpc": "2.0", "error": INVALID_REQUEST, "id": None}
    assert logged(bridge, logged_before) == "batch element 2: a request must be an object, got number"
    assert bridge.call("bridge.info")["schedulers"] == before


def test_mixed_batch_answers_each_request_but_no_notification(bridge):
    batch = [
        bridge.message("scheduler.new", {"mode": "static"}, "new"),
        bridge.message("bridge.info"),  # notification
        bridge.message("no.such.method", None, "missing"),
        bridge.message("calculate_node_imbalance", {"usage": {"mode": "static", "nodes": []}}, "imbalance"),
    ]
    bridge.send(batch)
    answers = bridge.read()
    assert isinstance(answers, list) and [a["id"] for a in answers] == ["new", "missing", "imbalance"]
    by_id = {a["id"]: a for a in answers}
    assert by_id["new"]["result"]["scheduler"].startswith("s")
    assert error_of(by_id["missing"])[0] == -32601
    assert by_id["imbalance"]["result"] == 0.0


def test_batch_answers_are_in_request_order_among_notifications(bridge):
    """Each answer in its request's place: the requests run in order (a notification's new
    scheduler counts for the next request)."""
    before = bridge.call("bridge.info")["schedulers"]
    batch = [
        bridge.message("scheduler.new", {"mode": "static"}),  # notification
        bridge.message("bridge.info", None, "info"),
        bridge.message("scheduler.free", ["no-such-handle"], "free"),
        bridge.message("scheduler.new", {"mode": "dynamic", "scheduler": "ordered"}, "new"),
        bridge.message("scheduler.list_nodes", ["ordered"], "nodes"),
        bridge.message("no.such.method"),  # notification of an unknown method: no answer
    ]
    bridge.send(batch)
    answers = bridge.read()
    assert [a["id"] for a in answers] == ["info", "free", "new", "nodes"]
    assert answers[0]["result"]["schedulers"] == before + 1
    assert error_of(answers[1])[0] == -32001
    assert answers[2]["result"] == {"scheduler": "ordered"} and answers[3]["result"] == []
    bridge.call("scheduler.free", ["ordered"])


def test_batch_of_notifications_gets_no_answer(bridge):
    before = bridge.call("bridge.info")["schedulers"]
    bridge.send(
        [bridge.message("scheduler.new", {"mode": "static"}), bridge.message("scheduler.new", {"mode": "dynamic"})]
    )
    # The next answer is the one to the next request: the batch produced none, but it ran.
    assert bridge.call("bridge.info")["schedulers"] == before + 2


def test_notification_runs_without_an_answer(bridge):
    before = bridge.call("bridge.info")["schedulers"]
    bridge.notify("scheduler.new", {"mode": "static"})
    bridge.notify("no.such.method")  # errors of notifications are not answered either
    assert bridge.pending_output() == b""
    assert bridge.call("bridge.info")["schedulers"] == before + 1


def test_unknown_method_is_named(bridge):
    answer = bridge.request("score_best_balancing_migration")
    assert answer["error"] == {"code": -32601, "message": "Method not found", "data": "score_best_balancing_migration"}


def test_internal_error_is_logged_and_the_server_keeps_serving():
    """The server logs from a writer thread of its own (crs_bridge.logsink), whenever that runs: its
    stderr is read until the record has arrived, each read waiting for data (the wait is bounded
    only so that a missing record fails the test instead of hanging it)."""
    command = [sys.executable, "-m", "crs_bridge", "serve", "--debug-methods"]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        server.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"debug.raise"}\n')
        server.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"bridge.info"}\n')
        server.stdin.flush()
        code, message = error_of(orjson.loads(server.stdout.readline()))
        assert code == -32603 and "RuntimeError" in message
        assert orjson.loads(server.stdout.readline())["result"]["name"] == "crs-bridge"
        log = b""
        while not (b"Traceback" in log and b"debug.raise" in log):
            ready, _, _ = select.select([server.stderr], [], [], 60)
            chunk = os.read(server.stderr.fileno(), 1 << 16) if ready else b""
            assert chunk, f"no log record of the internal error; stderr so far: {log!r}"
            log += chunk
    finally:
        server.stdin.close()
        server.wait(60)
        server.stdout.close()
        server.stderr.close()
