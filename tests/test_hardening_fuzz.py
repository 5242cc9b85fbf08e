"""Fuzzing the protocol of ONE real server process (per module) with hypothesis.

Random JSON values in every position (envelope members, params, nested records of valid
requests), random and mutated bytes, and random framings (newline and Content-Length, with odd
and bad headers). After every fuzzed message a probe request follows; everything read up to the
probe's answer must be a valid JSON-RPC 2.0 response (or batch of them), results must match the
schema ``rpc.discover`` publishes for their method (so no NaN turned into null), and the probe
must be answered. Reads time out (``TIMEOUT`` seconds per message) instead of hanging.

Examples per test: ``CRS_FUZZ_EXAMPLES`` (default 60: a few hundred messages for the whole
module). ``benchmarks/fuzz_campaign.py`` runs the same tests for a long campaign.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from crs_bridge.client import CONTENT_LENGTH, NDJSON, BridgeClient

EXAMPLES = int(os.environ.get("CRS_FUZZ_EXAMPLES", "60"))
TIMEOUT = float(os.environ.get("CRS_FUZZ_TIMEOUT", "20"))
MAX_MESSAGE = 1 << 20
GiB = 1 << 30

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # one server's state evolves: a replayed example is not the same example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

#: What the module sent and read, for the campaign's report.
STATS = {"messages": 0, "answers": 0, "probes": 0}
_ids = itertools.count(1)


# -- the server and its probe --------------------------------------------------------------------


class Fuzzed:
    """The server, a live static (``S``) and dynamic (``D``) scheduler, and result validators."""

    def __init__(self) -> None:
        self.client = BridgeClient(["--max-message-bytes", str(MAX_MESSAGE)], timeout=TIMEOUT)
        call = self.client.call
        self.S = call("scheduler.new", {"mode": "static"})["scheduler"]
        self.D = call("scheduler.new", {"mode": "dynamic", "imbalance": "raw"})["scheduler"]
        for i, name in enumerate(["n1", "n2", "n3"]):
            call("scheduler.add_node", [self.S, name, 4 * (i + 1), 16 * GiB])
            stats = {"cpu": 1.5 * i, "maxcpu": 8, "mem": i * GiB, "maxmem": 32 * GiB}
            call("scheduler.add_node", [self.D, name, stats])
        for sid, node in [("vm:1", "n1"), ("vm:2", "n1"), ("vm:3", "n2")]:
            call("scheduler.add_service", [self.S, sid, service(node)])
            call("scheduler.add_resource", [self.D, sid, resource(node)])
        document = call("rpc.discover")
        self.validators = {
            m["name"]: jsonschema.Draft202012Validator({**m["result"]["schema"], "components": document["components"]})
            for m in document["methods"]
        }
        self.sent: dict[Any, str] = {}  # id -> method, for requests whose id we chose

    def exchange(self, data: bytes) -> None:
        """Send raw ``data`` and a probe; check every answer up to the probe's."""
        self.client.process.stdin.write(data)
        STATS["messages"] += 1
        probe = f"probe-{next(_ids)}"
        self.client.send_raw(orjson.dumps(BridgeClient.message("bridge.info", None, probe)), framing=NDJSON)
        STATS["probes"] += 1
        while True:
            answer = self.read()
            STATS["answers"] += 1
            if isinstance(answer, dict) and answer.get("id") == probe:
                assert answer["result"]["name"] == "crs-bridge"
                return
            for response in check_answer(answer):
                self.check_result(response)

    def read(self) -> Any:
        try:
            _, body = self.client.read_raw()
        except (EOFError, TimeoutError) as exc:
            status = self.client.process.poll()
            raise AssertionError(f"{exc} (exit status {status}); stderr:\n{self.client.stderr()[-4000:]}") from None
        return orjson.loads(body)

    def check_result(self, response: dict) -> None:
        method = self.sent.pop(response["id"], None) if type(response["id"]) is int else None
        if method is not None and "result" in response and method in self.validators:
            self.validators[method].validate(response["result"])

    def request(self, method: str, params: Any, framing: str = NDJSON) -> None:
        """Send a request with a fresh id (its result is checked against the method's schema)."""
        ident = next(_ids)
        self.sent[ident] = method
        body = encode(BridgeClient.message(method, params, ident))
        try:
            self.exchange(frame(body, framing))
        finally:
            # Answered by now (the probe's answer comes after it), or never (refused with a null
            # id): a later message of random bytes that happens to carry this id must not have its
            # answer checked against this method's schema.
            self.sent.pop(ident, None)

    def close(self) -> None:
        client = self.client
        assert client.close() == 0
        log = client.stderr()
        assert "Traceback" not in log, log[-4000:]
        client.process.stdout.close()


@pytest.fixture(scope="module")
def fuzzed():
    server = Fuzzed()
    yield server
    server.close()


def check_answer(answer: Any) -> list[dict]:
    """The responses of one answer (a response, or a non-empty batch of them), each checked."""
    responses = answer if isinstance(answer, list) else [answer]
    assert responses, "an empty batch answer"
    for response in responses:
        assert isinstance(response, dict) and response.get("jsonrpc") == "2.0", response
        assert set(response) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), response
        assert response["id"] is None or type(response["id"]) in (str, int, float), response
        if "error" in response:
            error = response["error"]
            assert set(error) <= {"code", "message", "data"}, error
            assert type(error["code"]) is int and isinstance(error["message"], str), error
            assert error["code"] != -32603, error  # an internal error is a bug
    return responses


def encode(value: Any) -> bytes:
    """JSON bytes (integers beyond 64 bits through the json module: orjson cannot write them)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False).encode()


def frame(body: bytes, framing: str) -> bytes:
    if framing == CONTENT_LENGTH:
        return b"Content-Length: %d\r\n\r\n" % len(body) + body
    return body.replace(b"\n", b" ") + b"\n"


def service(node: str) -> dict:
    return {"stats": {"maxcpu": 1.0, "maxmem": GiB}, "running": True, "current-node": node}


def resource(node: str) -> dict:
    return {"stats": {"cpu": 0.5, "maxcpu": 2.0, "mem": GiB, "maxmem": 2 * GiB}, "running": True, "current-node": node}


# -- strategies ---------------------------------------------------------------------------------

NAMES = ["n1", "n2", "n3", "n9", "", "vm:1", "vm:2", "vm:3", "static", "dynamic", "raw", "topsis", "s0", "s999"]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, -1, 2**53, 2**62, 2**63, 2**64, 1e308, -0.0, 0.5, 4294967296.0])
    | st.text(max_size=12)
    | st.sampled_from(NAMES)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16,
)
framings = st.sampled_from([NDJSON, CONTENT_LENGTH])


def templates(f: Fuzzed) -> list[tuple[str, Any]]:
    """One valid params value for every method (``shutdown`` and ``scheduler.free`` of the live
    handles left out: they would end the fuzzing)."""
    usage = {
        "mode": "dynamic",
        "nodes": [{"name": n, "cpu": 1.0, "maxcpu": 8, "mem": GiB, "maxmem": 16 * GiB} for n in ("n1", "n2", "n3")],
        "resources": [{"sid": "vm:1", **resource("n1")}, {"sid": "vm:2", **resource("n2")}],
    }
    compact = [{"leader": "vm:1", "resources": ["vm:1", "vm:2"], "nodes": ["n2", "n3"]}]
    snapshot_compact = [{"leader": "vm:1", "resources": ["vm:1"], "nodes": ["n2", "n3"]}]
    expanded = [
        {
            "sid": "vm:9",
            "source-node": "n1",
            "target-node": "n2",
            "stats": {"cpu": 1, "maxcpu": 2, "mem": 5, "maxmem": 9},
        }
    ]
    dyn_stats = {"cpu": 0.5, "maxcpu": 2.0, "mem": GiB, "maxmem": 2 * GiB}
    s, d = f.S, f.D
    return [
        ("score_best_balancing_migrations", {"usage": usage, "candidates": snapshot_compact, "limit": 3}),
        ("score_best_balancing_migrations", {"scheduler": d, "candidates": expanded, "limit": 3, "method": "topsis"}),
        (
            "select_best_balancing_migration",
            {"usage": usage, "candidates": snapshot_compact, "imbalance_threshold": 0.2},
        ),
        ("calculate_node_imbalance", {"usage": usage, "imbalance": "raw"}),
        ("score_nodes_to_start_resource", {"usage": usage, "stats": dyn_stats}),
        ("plan_rebalance", {"usage": usage, "candidates": snapshot_compact, "threshold": 0.0, "margin": 0.0}),
        ("explain_migrations", {"usage": usage, "candidates": snapshot_compact, "threshold": 0.1, "margin": 0.1}),
        ("scheduler.new", {"mode": "static", "imbalance": "raw"}),
        ("scheduler.free", {"scheduler": "s999"}),
        ("bridge.info", {}),
        ("rpc.discover", []),
        ("scheduler.add_node", [s, "n4", 8, 16 * GiB]),
        ("scheduler.add_node", [d, "n4", {"cpu": 1.0, "maxcpu": 8, "mem": GiB, "maxmem": 16 * GiB}]),
        ("scheduler.remove_node", [s, "n4"]),
        ("scheduler.list_nodes", [d]),
        ("scheduler.contains_node", {"scheduler": s, "nodename": "n1"}),
        ("scheduler.add_service", [s, "vm:8", {**service("n1"), "target-node": "n2"}]),
        ("scheduler.add_service_usage_to_node", [s, "n2", "vm:7", {"maxcpu": 1.0, "maxmem": GiB}]),
        ("scheduler.remove_service_usage", [s, "vm:8"]),
        ("scheduler.add_resource", [d, "vm:8", {**resource("n2"), "running": False}]),
        ("scheduler.remove_resource", [d, "vm:8"]),
        ("scheduler.calculate_node_imbalance", [s]),
        ("scheduler.score_best_balancing_migration_candidates", [s, compact, 2]),
        ("scheduler.score_best_balancing_migration_candidates_topsis", [d, compact, 5]),
        ("scheduler.score_nodes_to_start_service", [s, {"maxcpu": 0.0, "maxmem": GiB}]),
        ("scheduler.score_nodes_to_start_resource", [d, dyn_stats]),
        ("scheduler.select_best_balancing_migration", [d, compact, 0.5]),
        ("scheduler.select_best_balancing_migration_topsis", [s, compact]),
        ("scheduler.plan_rebalance", [s, compact, "topsis", 0.0, 0.0, 3, True]),
        (
            "scheduler.apply",
            [s, [["add_node", "n5", 8, GiB], ["add_service", "vm:5", service("n5")], ["remove_node", "n5"]]],
        ),
        ("scheduler.apply", [d, [["add_resource", "vm:6", resource("n2")], ["remove_resource", "vm:6"]]]),
    ]


def positions(value: Any, path: tuple = ()) -> list[tuple]:
    """Every position in a JSON value (the root included), as a path of keys and indices."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += positions(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += positions(item, (*path, index))
    return found


def replaced(value: Any, path: tuple, new: Any) -> Any:
    """A copy of ``value`` with the position ``path`` set to ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value.get(head), rest, new)}
    return [*value[:head], replaced(value[head], rest, new), *value[head + 1 :]]


def removed(value: Any, path: tuple) -> Any:
    """A copy of ``value`` without the entry at ``path`` (not the root)."""
    if len(path) == 1:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k != path[0]}
        return [*value[: path[0]], *value[path[0] + 1 :]]
    head = path[0]
    inner = removed(value[head], path[1:])
    return {**value, head: inner} if isinstance(value, dict) else [*value[:head], inner, *value[head + 1 :]]


def not_a_header(data: bytes) -> bool:
    """True if no line of ``data`` would open a Content-Length header block (which would then
    swallow the probe as its body)."""
    return not any(line.lower().startswith(b"content-length:") for line in data.split(b"\n"))


# -- the properties -----------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_fuzzed_params_in_every_position(fuzzed, data):
    method, params = data.draw(st.sampled_from(templates(fuzzed)), label="template")
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        spots = positions(params)
        path = data.draw(st.sampled_from(spots), label="position")
        action = data.draw(st.sampled_from(["replace", "remove", "add"]), label="action")
        if action == "remove" and path:
            params = removed(params, path)
        elif action == "add":
            target = path if isinstance(_at(params, path), dict) else ()
            if isinstance(_at(params, target), dict):
                key = data.draw(st.sampled_from(["scheduler", "limit", "stats", "cpu", "x"]) | st.text(max_size=8))
                params = replaced(params, (*target, key), data.draw(json_values))
        else:
            params = replaced(params, path, data.draw(json_values, label="value"))
    fuzzed.request(method, params, data.draw(framings, label="framing"))


def _at(value: Any, path: tuple) -> Any:
    for part in path:
        value = value[part]
    return value


envelope_member = st.one_of(st.just("absent"), st.just("valid"), json_values)


@FUZZ
@given(
    members=st.lists(
        st.tuples(envelope_member, envelope_member, envelope_member, envelope_member), min_size=1, max_size=3
    ),
    extra=st.dictionaries(st.text(max_size=6), json_values, max_size=2),
    batch=st.booleans(),
    framing=framings,
)
def test_fuzzed_envelopes(fuzzed, members, extra, batch, framing):
    requests = []
    for jsonrpc, ident, method, params in members:
        request = dict(extra)
        for key, value, valid in (
            ("jsonrpc", jsonrpc, "2.0"),
            ("id", ident, next(_ids)),
            ("method", method, "scheduler.list_nodes"),
            ("params", params, [fuzzed.S]),
        ):
            if value == "valid":
                request[key] = valid
            elif value != "absent":
                request[key] = value
        assume(request.get("method") != "shutdown")
        requests.append(request)
    fuzzed.exchange(frame(encode(requests if batch else requests[0]), framing))


valid_request = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "scheduler.list_nodes", "params": ["s1"]})


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.lists(
            st.tuples(st.integers(0, len(valid_request)), st.binary(max_size=3), st.integers(0, 3)),
            min_size=1,
            max_size=4,
        ).map(lambda edits: _mutate(valid_request, edits)),
        st.sampled_from(
            [
                b"NaN",
                b"[NaN]",
                b"-Infinity",
                b"1e400",
                b"\xef\xbb\xbf{}",
                b'"\\ud800"',
                b'{"a":',
                b"[" * 1100,
                b"]" * 3,
                b"\x00",
                b"\r",
                b"   \t  ",
                b"[]",
                b"[[]]",
                b"{}" * 3,
            ]
        ),
    ),
    framing=framings,
)
def test_random_bytes(fuzzed, data, framing):
    assume(framing == CONTENT_LENGTH or not_a_header(data))
    fuzzed.exchange(frame(data, framing) if framing == CONTENT_LENGTH else data.replace(b"\n", b"") + b"\n")


def _mutate(base: bytes, edits: list[tuple[int, bytes, int]]) -> bytes:
    """``base`` with each (position, inserted bytes, deleted count) edit applied."""
    data = base
    for position, inserted, deleted in edits:
        position = min(position, len(data))
        data = data[:position] + inserted + data[position + deleted :]
    return data


header_name = st.sampled_from([b"Content-Length", b"content-length", b"CONTENT-LENGTH", b"Content-length"])
line_end = st.sampled_from([b"\r\n", b"\n"])


@FUZZ
@given(
    name=header_name,
    spaces=st.sampled_from([b"", b" ", b"  ", b"\t"]),
    end=line_end,
    extra_headers=st.lists(
        st.sampled_from([b"Content-Type: application/vscode-jsonrpc; charset=utf-8", b"X-A: b", b"junk"]), max_size=2
    ),
    body=st.one_of(st.just(valid_request), json_values.map(encode), st.binary(max_size=100)),
    length=st.one_of(st.just(None), st.sampled_from([b"abc", b"-1", b"", b"1.5", b"0x10", b"+3"])),
    oversize=st.booleans(),
)
def test_random_framings(fuzzed, name, spaces, end, extra_headers, body, length, oversize):
    if length is not None:
        # A header the server must not take for one: its line is an (invalid) message of its own,
        # and so is every following line.
        data = name + b":" + spaces + length + end + b"".join(h + end for h in extra_headers) + end + body + b"\n"
        assume(not_a_header(b"\n".join(data.split(b"\n")[1:])))
    elif oversize:
        body = body + b" " * (MAX_MESSAGE + 1 - len(body))  # skipped unread, then the probe
        data = name + b":" + spaces + b"%d" % len(body) + end + b"".join(h + end for h in extra_headers) + end + body
    else:
        # Extra header lines are allowed before the blank line that ends the header block.
        headers = b"".join(h + end for h in extra_headers if b":" in h)
        data = name + b":" + spaces + b"%d" % len(body) + end + headers + end + body
    fuzzed.exchange(data)


def test_the_fuzzed_server_is_alive_and_clean(fuzzed):
    assert fuzzed.client.call("bridge.info")["name"] == "crs-bridge"
    assert re.search(r"Traceback", fuzzed.client.stderr()) is None
