"""Bad input against the real server: a table of malformed messages, each with the exact error
code and words of the message that name the field or say what is wrong.

After every case the server must still answer, and two stateful schedulers (static and dynamic,
with stationary, moving and starting resources) must be exactly as before: their node lists,
imbalance, start scores (which read resource stats) and migration scores (which read bundles),
and the number of live handles. Codes and texts come from the specification (rpc.md, binding.md
for upstream's scheduling errors, README product decision 4), not from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from crs_bridge.client import CONTENT_LENGTH, NDJSON, BridgeClient
from tests import ROOT

GiB = 1 << 30
LIMIT_ARGS = [
    *("--max-message-bytes", "65536", "--max-nodes", "50", "--max-resources", "50"),
    *("--max-candidates", "100", "--max-json-depth", "64"),
]


@dataclass(frozen=True)
class Handles:
    """The live static (S) and dynamic (D) schedulers, and a freed handle (F)."""

    S: str
    D: str
    F: str


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient(LIMIT_ARGS) as client:
        yield client


@pytest.fixture(scope="module")
def handles(bridge) -> Handles:
    s = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    for name, cpu, mem in [("n1", 8, 32 * GiB), ("n2", 16, 64 * GiB), ("n3", 4, 16 * GiB)]:
        bridge.call("scheduler.add_node", [s, name, cpu, mem])
    for sid, node, target in [("vm:1", "n1", None), ("vm:2", "n1", None), ("vm:3", "n2", None), ("ct:4", "n2", "n3")]:
        service = {"stats": {"maxcpu": 2.0, "maxmem": 4 * GiB}, "running": True, "current-node": node}
        if target:
            service["target-node"] = target
        bridge.call("scheduler.add_service", [s, sid, service])

    d = bridge.call("scheduler.new", {"mode": "dynamic", "imbalance": "raw"})["scheduler"]
    for name, cpu, mem in [("n1", 6.5, 20 * GiB), ("n2", 1.25, 4 * GiB), ("n3", 3.0, 9 * GiB)]:
        bridge.call("scheduler.add_node", [d, name, {"cpu": cpu, "maxcpu": 16, "mem": mem, "maxmem": 64 * GiB}])
    stats = {"cpu": 1.5, "maxcpu": 4.0, "mem": 3 * GiB, "maxmem": 8 * GiB}
    for sid, node, running, target in [("r1", "n1", True, None), ("r2", "n2", False, None), ("r3", "n1", True, "n3")]:
        resource = {"stats": stats, "running": running, "current-node": node, "target-node": target}
        bridge.call("scheduler.add_resource", [d, sid, resource])

    f = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    assert bridge.call("scheduler.free", [f]) is True
    return Handles(s, d, f)


def snapshot(bridge: BridgeClient, h: Handles) -> dict:
    """Everything observable of the two schedulers (and the handle count)."""
    bundle = [{"leader": "vm:1", "resources": ["vm:1", "vm:2"], "nodes": ["n2", "n3"]}]
    dyn_bundle = [{"leader": "r1", "resources": ["r1"], "nodes": ["n2", "n3"]}]
    return {
        "handles": bridge.call("bridge.info")["schedulers"],
        "static": [
            bridge.call("scheduler.list_nodes", [h.S]),
            bridge.call("scheduler.calculate_node_imbalance", [h.S]),
            bridge.call("scheduler.score_nodes_to_start_service", [h.S, {"maxcpu": 2.0, "maxmem": 2 * GiB}]),
            bridge.call("scheduler.score_best_balancing_migration_candidates", [h.S, bundle, 10]),
            bridge.call("scheduler.contains_node", [h.S, "n9"]),
        ],
        "dynamic": [
            bridge.call("scheduler.list_nodes", [h.D]),
            bridge.call("scheduler.calculate_node_imbalance", [h.D]),
            bridge.call(
                "scheduler.score_nodes_to_start_resource",
                [h.D, {"cpu": 1.0, "maxcpu": 2.0, "mem": GiB, "maxmem": 2 * GiB}],
            ),
            bridge.call("scheduler.score_best_balancing_migration_candidates_topsis", [h.D, dyn_bundle, 10]),
        ],
    }


# -- the corpus ---------------------------------------------------------------------------------

Message = Callable[[Handles], Any]  # -> bytes (sent as they are) or a JSON value


@dataclass(frozen=True)
class Case:
    """One class of bad input: the message, the expected code, and words the message must hold.
    ``ident`` is the id the answer must carry; ``batch``: the answer is a list, each element
    with ``code``."""

    name: str
    message: Message
    code: int
    words: tuple[str, ...]
    ident: Any = 1
    framing: str = NDJSON
    batch: bool = False


def call(method: str, params: Callable[[Handles], Any] | Any = None) -> Message:
    """A request (id 1) whose params may depend on the handles."""

    def build(h: Handles) -> dict:
        value = params(h) if callable(params) else params
        return BridgeClient.message(method, value, 1)

    return build


def raw(template: str) -> Message:
    """Raw bytes with ``{S}``/``{D}``/``{F}`` replaced by the handles."""
    return lambda h: template.format(S=h.S, D=h.D, F=h.F).encode()


def static_service(current: str, target: str | None = None, **stats: Any) -> dict:
    service = {"stats": {"maxcpu": 1.0, "maxmem": GiB, **stats}, "running": True, "current-node": current}
    if target is not None:
        service["target-node"] = target
    return service


def dyn_stats(**overrides: Any) -> dict:
    return {"cpu": 1.0, "maxcpu": 16, "mem": GiB, "maxmem": 64 * GiB, **overrides}


def snapshot_usage(nodes: list[dict], resources: list[dict] | None = None) -> dict:
    return {"mode": "static", "nodes": nodes, "resources": resources or []}


def node(name: str, maxcpu: Any = 8, maxmem: Any = 16 * GiB) -> dict:
    return {"name": name, "maxcpu": maxcpu, "maxmem": maxmem}


def bundle(leader: str, resources: list[str], nodes: list[str]) -> dict:
    return {"leader": leader, "resources": resources, "nodes": nodes}


def score_on_s(candidates: list, limit: Any = 5) -> Message:
    return call("scheduler.score_best_balancing_migration_candidates", lambda h: [h.S, candidates, limit])


def expanded(sid: str, source: str, target: str, **stats: Any) -> dict:
    return {"sid": sid, "source-node": source, "target-node": target, "stats": dyn_stats(**stats)}


INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, NOT_FOUND = -32602, -32600, -32700, -32601
SCHEDULING, UNKNOWN_HANDLE = -32000, -32001
NUL = None  # the id of an answer to a message whose id could not be read
#: jsonrpcserver's words for a message that is not a request or a non-empty batch of requests.
REFUSED = ("Invalid request", "schema validation")

CASES = [
    # -- not JSON (-32700, with the position) ----------------------------------------------------
    Case("not-json", lambda h: b"hello there", PARSE_ERROR, ("Parse error", "line 1 column 1"), NUL),
    Case("truncated", raw('{{"jsonrpc": "2.0", "id": 1, "method": "bridge.info"'), PARSE_ERROR, ("column",), NUL),
    Case(
        "truncated-batch",
        raw('[{{"jsonrpc": "2.0", "id": 1, "method": "bridge.info"}},'),
        PARSE_ERROR,
        ("column",),
        NUL,
    ),
    Case(
        "invalid-utf8",
        lambda h: (
            b'{"jsonrpc": "2.0", "id": 1, "method": "scheduler.add_node", "params": ["'
            + h.S.encode()
            + b'", "n\xff\xfe", 8, 1024]}'
        ),
        PARSE_ERROR,
        ("UTF-8",),
        NUL,
    ),
    Case(
        "lone-surrogate",
        raw('{{"jsonrpc": "2.0", "id": "\\ud800", "method": "bridge.info"}}'),
        PARSE_ERROR,
        ("surrogate",),
        NUL,
    ),
    Case("nul-byte", lambda h: b'{"jsonrpc": "2.0",\x00 "id": 1}', PARSE_ERROR, ("column",), NUL),
    Case(
        "nan-literal",
        raw('{{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node","params":["{S}","n9",NaN,1024]}}'),
        PARSE_ERROR,
        ("column",),
        NUL,
    ),
    Case(
        "infinity-literal",
        raw('{{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node","params":["{S}","n9",8,Infinity]}}'),
        PARSE_ERROR,
        ("column",),
        NUL,
    ),
    Case(
        "nan-threshold",
        raw('{{"jsonrpc":"2.0","id":1,"method":"scheduler.select_best_balancing_migration","params":["{S}",[],NaN]}}'),
        PARSE_ERROR,
        ("column",),
        NUL,
    ),
    Case(
        "double-overflow",
        raw('{{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node","params":["{S}","n9",8,1e400]}}'),
        PARSE_ERROR,
        ("infinity",),
        NUL,
    ),
    # -- not a request (jsonrpcserver's -32600 for the whole message; the server logs what is wrong) ---
    Case("empty-batch", lambda h: [], INVALID_REQUEST, REFUSED, NUL),
    Case("batch-all-invalid", lambda h: [1, "x", {"id": 1}], INVALID_REQUEST, REFUSED, NUL),
    Case(
        "batch-in-batch",
        lambda h: [[BridgeClient.message("bridge.info", None, 1)]],
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case("null-message", lambda h: None, INVALID_REQUEST, REFUSED, NUL),
    Case("missing-jsonrpc", lambda h: {"id": 1, "method": "bridge.info"}, INVALID_REQUEST, REFUSED, NUL),
    Case(
        "wrong-version",
        lambda h: {"jsonrpc": "1.0", "id": 1, "method": "bridge.info"},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case(
        "version-as-number",
        lambda h: {"jsonrpc": 2.0, "id": 1, "method": "bridge.info"},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case(
        "id-object",
        lambda h: {"jsonrpc": "2.0", "id": {"a": 1}, "method": "bridge.info"},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case(
        "id-boolean",
        lambda h: {"jsonrpc": "2.0", "id": True, "method": "bridge.info"},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case(
        "id-array",
        lambda h: {"jsonrpc": "2.0", "id": [1], "method": "bridge.info"},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case("missing-method", lambda h: {"jsonrpc": "2.0", "id": 1}, INVALID_REQUEST, REFUSED, NUL),
    Case(
        "method-not-string",
        lambda h: {"jsonrpc": "2.0", "id": 1, "method": ["bridge.info"]},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case(
        "params-string",
        lambda h: {"jsonrpc": "2.0", "id": 1, "method": "bridge.info", "params": "x"},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    Case(
        "extra-member",
        lambda h: {"jsonrpc": "2.0", "id": 1, "method": "bridge.info", "when": 1},
        INVALID_REQUEST,
        REFUSED,
        NUL,
    ),
    # Invalid, but valid once wrapped in the arrays that check the depth limit: must stay -32700.
    Case("invalid-unless-wrapped", lambda h: b"1],[" + b"[]," * 70 + b"2", PARSE_ERROR, ("column",), NUL),
    Case("nested-2000", lambda h: b"[" * 2000 + b"]" * 2000, PARSE_ERROR, ("nested deeper", "max-json-depth"), NUL),
    Case(
        "nested-100-in-params",
        lambda h: (
            b'{"jsonrpc":"2.0","id":1,"method":"scheduler.list_nodes","params":["'
            + h.S.encode()
            + b'",'
            + b"[" * 100
            + b"]" * 100
            + b"]}"
        ),
        PARSE_ERROR,
        ("nested deeper", "64", "CRS_BRIDGE_MAX_JSON_DEPTH"),
        NUL,
    ),
    Case(
        "oversize-ndjson",
        call("scheduler.list_nodes", lambda h: {"scheduler": h.S, "x": "y" * 100_000}),
        INVALID_REQUEST,
        ("exceeds the limit of 65536 bytes", "--max-message-bytes"),
        NUL,
    ),
    Case(
        "oversize-content-length",
        call("scheduler.list_nodes", lambda h: {"scheduler": h.S, "x": "y" * 100_000}),
        INVALID_REQUEST,
        ("exceeds the limit of 65536 bytes", "CRS_BRIDGE_MAX_MESSAGE_BYTES"),
        NUL,
        framing=CONTENT_LENGTH,
    ),
    Case(
        "content-length-not-json",
        lambda h: b"Content-Length is not a number",
        PARSE_ERROR,
        ("column",),
        NUL,
        framing=CONTENT_LENGTH,
    ),
    # -- unknown methods (-32601) ---------------------------------------------------------------
    Case("unknown-method", call("scheduler.fly"), NOT_FOUND, ("Method not found", "scheduler.fly")),
    Case(
        "method-of-other-mode",
        call("scheduler.add_resource", lambda h: [h.S, "r9", {}]),
        NOT_FOUND,
        ("add_resource", "static"),
    ),
    Case(
        "method-of-other-mode-dynamic",
        call("scheduler.add_service", lambda h: [h.D, "vm:9", {}]),
        NOT_FOUND,
        ("add_service", "dynamic"),
    ),
    # -- params (-32602, naming the field) --------------------------------------------------------
    Case("missing-param", call("scheduler.add_node", lambda h: [h.S]), INVALID_PARAMS, ("nodename", "required")),
    Case("missing-handle", call("scheduler.list_nodes", {}), INVALID_PARAMS, ("scheduler", "required")),
    Case("handle-wrong-type", call("scheduler.list_nodes", {"scheduler": 5}), INVALID_PARAMS, ("scheduler",)),
    Case(
        "extra-named-param",
        call("scheduler.list_nodes", lambda h: {"scheduler": h.S, "bogus": 1}),
        INVALID_PARAMS,
        ("bogus", "not permitted"),
    ),
    Case("too-many-positional", call("scheduler.list_nodes", lambda h: [h.S, 1]), INVALID_PARAMS, ("too many params",)),
    Case(
        "positional-headline",
        call("calculate_node_imbalance", [{"mode": "static", "nodes": []}]),
        INVALID_PARAMS,
        ("named params",),
    ),
    Case("mistyped-nodename", call("scheduler.contains_node", lambda h: [h.S, 5]), INVALID_PARAMS, ("nodename",)),
    Case(
        "string-for-number",
        call("scheduler.add_node", lambda h: [h.S, "n9", "8", GiB]),
        INVALID_PARAMS,
        ("maxcpu", "integer"),
    ),
    Case(
        "number-for-string",
        call("scheduler.add_node", lambda h: [h.S, 9, 8, GiB]),
        INVALID_PARAMS,
        ("nodename", "string"),
    ),
    Case(
        "boolean-for-number", call("scheduler.add_node", lambda h: [h.S, "n9", True, GiB]), INVALID_PARAMS, ("maxcpu",)
    ),
    Case(
        "string-for-bool",
        call("scheduler.add_service", lambda h: [h.S, "vm:9", {**static_service("n1"), "running": "yes"}]),
        INVALID_PARAMS,
        ("service.running",),
    ),
    Case("fraction-for-bytes", call("scheduler.add_node", lambda h: [h.S, "n9", 8, 1.5]), INVALID_PARAMS, ("maxmem",)),
    Case("bad-mode", call("scheduler.new", {"mode": "quantum"}), INVALID_PARAMS, ("mode",)),
    Case(
        "bad-formula", call("scheduler.new", {"mode": "static", "imbalance": "cubic"}), INVALID_PARAMS, ("imbalance",)
    ),
    Case(
        "usage-and-scheduler",
        call("calculate_node_imbalance", lambda h: {"scheduler": h.S, "usage": snapshot_usage([])}),
        INVALID_PARAMS,
        ("exactly one",),
    ),
    # -- numbers out of range (-32602, product decision 4) ---------------------------------------
    Case(
        "negative-cpu",
        call("scheduler.add_node", lambda h: [h.D, "n9", dyn_stats(cpu=-0.5)]),
        INVALID_PARAMS,
        ("stats.cpu", "greater than or equal to 0"),
    ),
    Case(
        "negative-mem",
        call("scheduler.add_node", lambda h: [h.D, "n9", dyn_stats(mem=-1)]),
        INVALID_PARAMS,
        ("stats.mem",),
    ),
    Case("negative-maxcpu", call("scheduler.add_node", lambda h: [h.S, "n9", -8, GiB]), INVALID_PARAMS, ("maxcpu",)),
    Case("negative-maxmem", call("scheduler.add_node", lambda h: [h.S, "n9", 8, -GiB]), INVALID_PARAMS, ("maxmem",)),
    Case(
        "negative-service-maxcpu",
        call("scheduler.add_service", lambda h: [h.S, "vm:9", static_service("n1", maxcpu=-1.0)]),
        INVALID_PARAMS,
        ("service.stats.maxcpu",),
    ),
    Case(
        "zero-node-maxcpu",
        call("scheduler.add_node", lambda h: [h.S, "n9", 0, GiB]),
        INVALID_PARAMS,
        ("maxcpu", "greater than 0"),
    ),
    Case(
        "zero-node-maxmem",
        call("scheduler.add_node", lambda h: [h.D, "n9", dyn_stats(maxmem=0)]),
        INVALID_PARAMS,
        ("stats.maxmem", "greater than 0"),
    ),
    Case(
        "zero-maxcpu-in-snapshot",
        call("calculate_node_imbalance", {"usage": snapshot_usage([node("a", 0)])}),
        INVALID_PARAMS,
        ("usage.nodes[0].maxcpu",),
    ),
    Case(
        "int-beyond-64-bits",
        raw(
            '{{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node",'
            '"params":["{S}","n9",8,123456789012345678901234567890]}}'
        ),
        INVALID_PARAMS,
        ("maxmem", "less than or equal"),
    ),
    Case(
        "int-beyond-64-bits-cpu",
        call("scheduler.add_node", lambda h: [h.D, "n9", dyn_stats(cpu=2**70)]),
        INVALID_PARAMS,
        ("stats.cpu",),
    ),
    Case(
        "square-overflow-cpu",
        call("scheduler.add_node", lambda h: [h.D, "n9", dyn_stats(cpu=1e308)]),
        INVALID_PARAMS,
        ("stats.cpu",),
    ),
    Case(
        "square-overflow-maxcpu",
        call("scheduler.add_node", lambda h: [h.S, "n9", 1e308, GiB]),
        INVALID_PARAMS,
        ("maxcpu",),
    ),
    Case(
        "square-overflow-service",
        call("scheduler.add_service_usage_to_node", lambda h: [h.S, "n1", "vm:9", {"maxcpu": 1e308, "maxmem": 1}]),
        INVALID_PARAMS,
        ("service_stats.maxcpu",),
    ),
    Case(
        "aggregated-memory-overflow",
        call("scheduler.add_service", lambda h: [h.S, "vm:9", static_service("n1", maxmem=2**62 - 1)]),
        INVALID_PARAMS,
        ("memory of node 'n1'", "vm:9"),
    ),
    # -- names ----------------------------------------------------------------------------------
    Case("empty-nodename", call("scheduler.add_node", lambda h: [h.S, "", 8, GiB]), INVALID_PARAMS, ("nodename",)),
    Case(
        "empty-node-name-in-snapshot",
        call("calculate_node_imbalance", {"usage": snapshot_usage([node("")])}),
        INVALID_PARAMS,
        ("usage.nodes[0].name",),
    ),
    Case(
        "empty-sid", call("scheduler.add_service", lambda h: [h.S, "", static_service("n1")]), INVALID_PARAMS, ("sid",)
    ),
    Case(
        "duplicate-node",
        call("scheduler.add_node", lambda h: [h.S, "n1", 8, GiB]),
        SCHEDULING,
        ("node 'n1' already exists",),
    ),
    Case(
        "duplicate-node-in-snapshot",
        call("calculate_node_imbalance", {"usage": snapshot_usage([node("a"), node("b"), node("a")])}),
        INVALID_PARAMS,
        ("usage.nodes[2].name", "duplicate node name 'a'"),
    ),
    Case(
        "duplicate-sid",
        call("scheduler.add_service", lambda h: [h.S, "vm:1", static_service("n2")]),
        SCHEDULING,
        ("resource 'vm:1' already exists",),
    ),
    Case(
        "unknown-current-node",
        call("scheduler.add_service", lambda h: [h.S, "vm:9", static_service("n7")]),
        SCHEDULING,
        ("current node for resource 'vm:9' does not exist",),
    ),
    Case(
        "unknown-target-node",
        call(
            "scheduler.add_resource",
            lambda h: [
                h.D,
                "r9",
                {"stats": dyn_stats(maxcpu=1.0), "running": True, "current-node": "n1", "target-node": "n7"},
            ],
        ),
        SCHEDULING,
        ("nodes for resource 'r9' do not exist",),
    ),
    Case(
        "target-equals-current",
        call("scheduler.add_service", lambda h: [h.S, "vm:9", static_service("n1", "n1")]),
        SCHEDULING,
        ("resource 'vm:9' has the same current and target node",),
    ),
    Case(
        "unknown-current-in-snapshot",
        call("calculate_node_imbalance", {"usage": snapshot_usage([node("a")], [{"sid": "x", **static_service("b")}])}),
        SCHEDULING,
        ("current node for resource 'x' does not exist",),
    ),
    Case(
        "already-moving",
        call("scheduler.add_service_usage_to_node", lambda h: [h.S, "n1", "ct:4", {"maxcpu": 1.0, "maxmem": 1}]),
        SCHEDULING,
        ("resource 'ct:4' is already moving to target node 'n3'",),
    ),
    # -- candidates: each validation rule ---------------------------------------------------------
    Case(
        "leader-unknown",
        score_on_s([bundle("vm:77", ["vm:77"], ["n2"])]),
        SCHEDULING,
        ("leader 'vm:77' is not present in the cluster usage",),
    ),
    Case(
        "leader-moving",
        score_on_s([bundle("ct:4", ["ct:4"], ["n1"])]),
        SCHEDULING,
        ("leader 'ct:4' is non-stationary",),
    ),
    Case(
        "leader-not-in-resources",
        score_on_s([bundle("vm:1", ["vm:2"], ["n2"])]),
        SCHEDULING,
        ("leader 'vm:1' is not present in the resources list",),
    ),
    Case(
        "member-unknown",
        score_on_s([bundle("vm:1", ["vm:1", "vm:77"], ["n2"])]),
        SCHEDULING,
        ("resource 'vm:77' is not present in the cluster usage",),
    ),
    Case(
        "member-moving",
        score_on_s([bundle("vm:3", ["vm:3", "ct:4"], ["n1"])]),
        SCHEDULING,
        ("resource 'ct:4' is non-stationary",),
    ),
    Case(
        "member-on-other-node",
        score_on_s([bundle("vm:1", ["vm:1", "vm:3"], ["n2"])]),
        SCHEDULING,
        ("resource 'vm:3' is on other node than leader",),
    ),
    Case(
        "bundle-target-unknown",
        score_on_s([bundle("vm:1", ["vm:1"], ["n2", "n7"])]),
        INVALID_PARAMS,
        ("candidates[0].nodes[1]", "target node 'n7' does not exist"),
    ),
    Case(
        "bundle-target-is-source",
        score_on_s([bundle("vm:3", ["vm:3"], ["n2"])]),
        INVALID_PARAMS,
        ("candidates[0].nodes[0]", "is the source node"),
    ),
    # Upstream fails on an empty leader anyway (no sid is empty): its error, not a refusal of ours.
    Case(
        "bundle-empty-leader",
        score_on_s([bundle("", ["vm:1"], ["n2"])]),
        SCHEDULING,
        ("leader '' is not present in the cluster usage",),
    ),
    Case(
        "bundle-empty-target", score_on_s([bundle("vm:1", ["vm:1"], [""])]), INVALID_PARAMS, ("candidates[0].nodes[0]",)
    ),
    Case(
        "bundle-empty-target-then-unknown-leader",
        score_on_s([bundle("vm:1", ["vm:1"], [""]), bundle("vm:9", ["vm:9"], ["n2"])]),
        SCHEDULING,
        ("leader 'vm:9' is not present in the cluster usage",),
    ),
    Case(
        "bundle-nodes-not-list",
        score_on_s([{"leader": "vm:1", "resources": ["vm:1"], "nodes": "n2"}]),
        INVALID_PARAMS,
        ("candidates[0].nodes",),
    ),
    Case(
        "expanded-source-unknown",
        score_on_s([expanded("vm:1", "n7", "n2")]),
        INVALID_PARAMS,
        ("candidates[0].source-node", "'n7' does not exist"),
    ),
    Case(
        "expanded-target-unknown",
        score_on_s([expanded("vm:1", "n1", "n7")]),
        INVALID_PARAMS,
        ("candidates[0].target-node", "'n7' does not exist"),
    ),
    Case(
        "expanded-target-is-source",
        score_on_s([expanded("vm:1", "n1", "n1")]),
        INVALID_PARAMS,
        ("candidates[0].target-node", "is the source node"),
    ),
    Case(
        "expanded-negative-stats",
        score_on_s([expanded("vm:1", "n1", "n2", cpu=-1.0)]),
        INVALID_PARAMS,
        ("candidates[0].stats.cpu",),
    ),
    # -- limit and threshold ----------------------------------------------------------------------
    Case("limit-negative", score_on_s([], -1), INVALID_PARAMS, ("limit", "greater than or equal to 0")),
    Case("limit-fractional", score_on_s([], 2.5), INVALID_PARAMS, ("limit", "integer")),
    Case("limit-string", score_on_s([], "10"), INVALID_PARAMS, ("limit", "integer")),
    Case("limit-boolean", score_on_s([], True), INVALID_PARAMS, ("limit",)),
    Case(
        "threshold-negative",
        call("scheduler.select_best_balancing_migration", lambda h: [h.S, [bundle("vm:1", ["vm:1"], ["n2"])], -0.1]),
        INVALID_PARAMS,
        ("imbalance_threshold", "greater than or equal to 0"),
    ),
    Case(
        "threshold-string-nan",
        call("scheduler.select_best_balancing_migration", lambda h: [h.S, [], "NaN"]),
        INVALID_PARAMS,
        ("imbalance_threshold",),
    ),
    Case(
        "threshold-with-topsis",
        call(
            "select_best_balancing_migration",
            {
                "usage": snapshot_usage([node("a"), node("b")]),
                "candidates": [],
                "method": "topsis",
                "imbalance_threshold": 0.1,
            },
        ),
        INVALID_PARAMS,
        ("imbalance_threshold", "bruteforce"),
    ),
    # -- handles --------------------------------------------------------------------------------
    Case("unknown-handle", call("scheduler.list_nodes", ["s999999"]), UNKNOWN_HANDLE, ("'s999999'",)),
    Case("freed-handle", call("scheduler.add_node", lambda h: [h.F, "n1", 8, GiB]), UNKNOWN_HANDLE, ("already freed",)),
    Case("free-twice", call("scheduler.free", lambda h: {"scheduler": h.F}), UNKNOWN_HANDLE, ("unknown scheduler",)),
    Case("huge-handle-is-cut", call("scheduler.list_nodes", ["s" * 10_000]), UNKNOWN_HANDLE, ("characters)",)),
    # -- scheduler.apply: all or nothing --------------------------------------------------------
    Case(
        "apply-second-entry-fails",
        call("scheduler.apply", lambda h: [h.S, [["add_node", "n8", 8, GiB], ["add_node", "n1", 8, GiB]]]),
        SCHEDULING,
        ("node 'n1' already exists",),
    ),
    Case(
        "apply-entry-mistyped",
        call("scheduler.apply", lambda h: [h.D, [["remove_node", "n1"], ["add_node", "n8", {"cpu": "1"}]]]),
        INVALID_PARAMS,
        ("mutations[1]",),
    ),
    Case(
        "apply-unknown-mutation",
        call("scheduler.apply", lambda h: [h.S, [["remove_node", "n1"], ["fly"]]]),
        INVALID_PARAMS,
        ("mutations[1]", "add_node"),
    ),
    # -- per-call size limits (-32602, naming the limit and how to raise it) ----------------------
    Case(
        "too-many-nodes",
        call("calculate_node_imbalance", {"usage": snapshot_usage([node(f"n{i}") for i in range(51)])}),
        INVALID_PARAMS,
        ("usage.nodes", "51 nodes exceed the limit of 50", "--max-nodes"),
    ),
    Case(  # a count is no list, however big (found in review: read as a count of nodes)
        "nodes-as-a-big-number",
        call("calculate_node_imbalance", {"usage": {"mode": "static", "nodes": 200_000}}),
        INVALID_PARAMS,
        ("usage.nodes", "Input should be a valid list"),
    ),
    Case(
        "too-many-resources",
        call(
            "calculate_node_imbalance",
            {"usage": snapshot_usage([node("a")], [{"sid": f"x{i}", **static_service("a")} for i in range(51)])},
        ),
        INVALID_PARAMS,
        ("usage.resources", "51 resources", "CRS_BRIDGE_MAX_RESOURCES"),
    ),
    Case(
        "too-many-candidates",
        score_on_s([bundle("vm:1", ["vm:1"], ["n2"] * 101)]),
        INVALID_PARAMS,
        ("candidates", "101 expanded candidates exceed the limit of 100", "--max-candidates"),
    ),
    Case(
        "too-many-bundle-members",
        score_on_s([bundle("vm:1", ["vm:1"] * 51, ["n2"])]),
        INVALID_PARAMS,
        ("candidates", "51 bundle members", "--max-resources"),
    ),
]


def send(bridge: BridgeClient, case: Case, h: Handles) -> None:
    message = case.message(h)
    bridge.send_raw(message if isinstance(message, bytes) else encode(message), framing=case.framing)


def encode(message: Any) -> bytes:
    """JSON bytes; integers beyond 64 bits (which orjson cannot write) through the json module."""
    try:
        return orjson.dumps(message)
    except TypeError:
        return json.dumps(message, ensure_ascii=False).encode()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_its_error_and_changes_nothing(bridge, handles, case):
    before = snapshot(bridge, handles)
    send(bridge, case, handles)
    framing, body = bridge.read_raw()
    assert framing == case.framing
    answer = orjson.loads(body)
    for element in answer if case.batch else [answer]:
        assert element["jsonrpc"] == "2.0" and "result" not in element, element
        error = element["error"]
        assert error["code"] == case.code, error
        # jsonrpcserver's answers say what is wrong in their data (a text), the methods' in the message.
        text = error["message"] + (f" {error['data']}" if isinstance(error.get("data"), str) else "")
        for word in case.words:
            assert word in text, (word, error)
        assert element["id"] == (NUL if case.batch else case.ident)
        if case.code == INVALID_PARAMS:
            assert error["data"]["errors"] and all({"loc", "msg"} <= set(e) for e in error["data"]["errors"])
    if case.batch:
        assert isinstance(answer, list) and len(answer) == len(case.message(handles))
    assert snapshot(bridge, handles) == before  # alive, and nothing changed


def test_corpus_covers_at_least_forty_classes():
    assert len({c.name for c in CASES}) == len(CASES) >= 40


# -- valid but unusual: answered, not refused ---------------------------------------------------


def test_unicode_node_names_work_end_to_end(bridge):
    names = ["nœud-1", "узел-2", "节点3", "🖥️-4", "a\u0000b"]
    handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    for i, name in enumerate(names):
        bridge.call("scheduler.add_node", [handle, name, 4 * (i + 1), 8 * GiB])
    bridge.call("scheduler.add_service", [handle, "vm:é", static_service(names[0])])
    assert bridge.call("scheduler.list_nodes", [handle]) == names
    assert bridge.call("scheduler.contains_node", [handle, "节点3"]) is True
    scored = bridge.call(
        "scheduler.score_best_balancing_migration_candidates", [handle, [bundle("vm:é", ["vm:é"], names[1:])], 10]
    )
    assert sorted(s["migration"]["target-node"] for s in scored) == sorted(names[1:])
    assert {s["migration"]["source-node"] for s in scored} == {names[0]}
    assert [
        name for name, _ in bridge.call("scheduler.score_nodes_to_start_service", [handle, {"maxcpu": 1, "maxmem": 1}])
    ] == names
    assert bridge.call("scheduler.free", [handle]) is True


def test_huge_limit_allocates_nothing_and_returns_all(bridge, handles):
    candidates = [bundle("vm:1", ["vm:1"], ["n2", "n3"])]
    for limit in (2**60, 2**63 - 1, 2**64 + 1, 10**30):
        params = [handles.S, candidates, limit]
        bridge.send_raw(encode(bridge.message("scheduler.score_best_balancing_migration_candidates", params, 1)))
        assert len(bridge.read()["result"]) == 2


def test_integer_id_beyond_64_bits_comes_back_as_sent(bridge):
    """JSON-RPC: the response's id is the request's (orjson alone reads such an integer as a float)."""
    bridge.send_raw(b'{"jsonrpc": "2.0", "id": 123456789012345678901234567890, "method": "bridge.info"}')
    answer = json.loads(bridge.read_raw()[1])
    assert answer["result"]["name"] == "crs-bridge" and answer["id"] == 123456789012345678901234567890
    bridge.send_raw(
        b'[{"jsonrpc": "2.0", "id": -9223372036854775809, "method": "bridge.nope"}, '
        b'{"jsonrpc": "2.0", "id": 2.5, "method": "bridge.info"}]'
    )
    assert [answer["id"] for answer in json.loads(bridge.read_raw()[1])] == [-9223372036854775809, 2.5]


def nest(depth: int) -> bytes:
    """JSON arrays nested ``depth`` deep."""
    return b"[" * depth + b"]" * depth


def test_deep_nesting_up_to_the_default_limit_is_handled_without_recursion():
    """1000 levels in several positions (within orjson's 1024) are answered like any other input;
    past 1024 the default limit refuses the message."""
    with BridgeClient() as client:
        handle = client.call("scheduler.new", {"mode": "static"})["scheduler"].encode()
        envelope = b'{"jsonrpc": "2.0", "id": 1, "method": '
        node = b'{"name": "a", "maxcpu": 4, "maxmem": 1024, "ignored": ' + nest(1000) + b"}"
        cases = [
            (envelope + b'"scheduler.list_nodes", "params": ["' + handle + b'", ' + nest(1000) + b"]}", "too many"),
            (b'{"jsonrpc": "2.0", "method": "bridge.info", "id": ' + nest(1000) + b"}", "Invalid request"),
            (b"[" + nest(1000) + b"]", "Invalid request"),
            (envelope + b'"calculate_node_imbalance", "params": {"usage": ' + nest(1000) + b"}}", "usage"),
            (envelope + b'"calculate_node_imbalance", "params": {"usage": {"mode": "static", "nodes": [' + node
             + b"]}}}", None),
            (nest(1025), "limit of 1024 levels"),
        ]  # fmt: skip
        for message, words in cases:
            client.send_raw(message)
            answer = client.read()
            answer = answer[0] if isinstance(answer, list) else answer
            if words is None:
                assert answer["result"] == 0.0
            else:
                assert words in f"{answer['error']['message']} {answer['error'].get('data', '')}", answer
        assert "Traceback" not in client.stderr()


def test_limits_come_from_flags_over_environment_and_are_reported(monkeypatch):
    monkeypatch.setenv("CRS_BRIDGE_MAX_NODES", "7")
    monkeypatch.setenv("CRS_BRIDGE_MAX_CANDIDATES", "9")
    with BridgeClient(["--max-candidates", "11", "--max-json-depth", "16"]) as client:
        limits = client.call("bridge.info")["limits"]
        assert (limits["max_nodes"], limits["max_candidates"], limits["max_json_depth"]) == (7, 11, 16)
        assert limits["max_message_bytes"] == 256 * 1024 * 1024 and limits["max_resources"] == 1_000_000
        client.send_raw(nest(17))
        assert "limit of 16 levels" in client.read()["error"]["data"]


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--max-json-depth", "2000"], {}, "max_json_depth must be at most 1024"),
        (["--max-nodes", "0"], {}, "max_nodes must be a positive integer"),
        ([], {"CRS_BRIDGE_MAX_MESSAGE_BYTES": "lots"}, "CRS_BRIDGE_MAX_MESSAGE_BYTES must be a positive integer"),
    ],
)
def test_bad_limit_settings_are_refused_at_start(args, env, words):
    done = subprocess.run(
        [sys.executable, "-m", "crs_bridge", "serve", *args],
        input=b"",
        capture_output=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and words in done.stderr.decode()


# -- 100 MB messages: streamed by the test, memory kept sane ------------------------------------

HUNDRED_MB = 100 * 1000 * 1000


def stream_message(client: BridgeClient, head: bytes, pad_bytes: int, tail: bytes, framing: str) -> None:
    """Write ``head + b"x" * pad_bytes + tail`` in 1 MB pieces (never the whole in memory)."""
    if framing == CONTENT_LENGTH:
        client.process.stdin.write(b"Content-Length: %d\r\n\r\n" % (len(head) + pad_bytes + len(tail)))
    client.process.stdin.write(head)
    piece = b"x" * (1 << 20)
    left = pad_bytes
    while left:
        step = min(left, len(piece))
        client.process.stdin.write(piece[:step])
        left -= step
    client.process.stdin.write(tail + (b"\n" if framing == NDJSON else b""))
    client.process.stdin.flush()


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM), bytes."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_100_mb_message_under_the_default_limit_is_answered():
    """A valid 100 MB request (an ignored 100 MB key inside the snapshot) gets its result."""
    usage = b'{"mode": "static", "nodes": [{"name": "a", "maxcpu": 4, "maxmem": 1024}], "pad": "'
    head = b'{"jsonrpc": "2.0", "id": "big", "method": "calculate_node_imbalance", "params": {"usage": ' + usage
    with BridgeClient() as client:
        stream_message(client, head, HUNDRED_MB, b'"}}}', NDJSON)
        answer = client.read()
        assert answer == {"jsonrpc": "2.0", "result": 0.0, "id": "big"}
        assert client.call("bridge.info")["name"] == "crs-bridge"


@pytest.mark.parametrize("framing", [NDJSON, CONTENT_LENGTH])
def test_100_mb_message_over_the_limit_is_skipped_without_being_held(framing):
    head = b'{"jsonrpc": "2.0", "id": 1, "method": "bridge.info", "params": {"pad": "'
    with BridgeClient(["--max-message-bytes", str(1 << 20)]) as client:
        stream_message(client, head, HUNDRED_MB, b'"}}', framing)
        answer = client.read()
        assert (
            answer["error"]["code"] == INVALID_REQUEST
            and "exceeds the limit of 1048576 bytes" in answer["error"]["message"]
        )
        assert client.call("bridge.info")["limits"]["max_message_bytes"] == 1 << 20  # the stream goes on
        if os.path.exists(f"/proc/{client.process.pid}/status"):
            assert peak_rss_bytes(client.process.pid) < HUNDRED_MB  # never held the message


def test_a_long_list_reports_the_errors_of_its_first_part_with_errors():
    """A list is checked 1000 entries at a time: the errors are those of the first part with any,
    indexed in the whole list (found in review: a million bad entries took gigabytes to refuse)."""
    node = {"name": "a", "maxcpu": 4, "maxmem": GiB}
    service = {"sid": "vm:0", "stats": {"maxcpu": 1, "maxmem": 1}, "running": True, "current-node": "a"}
    resources = [{**service, "sid": f"vm:{i}"} for i in range(2500)]
    del resources[1500]["running"], resources[2400]["running"]
    usage = {"mode": "static", "nodes": [node], "resources": resources}
    with BridgeClient() as client:
        error = client.request("calculate_node_imbalance", {"usage": usage})["error"]
        assert error["data"]["errors"] == [{"loc": "usage.resources[1500].running", "msg": "Field required"}]
        empty = b"[" + b",".join([b"{}"] * 200_000) + b"]"
        client.send_raw(
            b'{"jsonrpc": "2.0", "id": 2, "method": "score_best_balancing_migrations", "params": '
            b'{"usage": {"mode": "static", "nodes": []}, "limit": 1, "candidates": ' + empty + b"}}"
        )
        data = client.read()["error"]["data"]
        assert data["errors"][:3] == [
            {"loc": f"candidates[0].{field}", "msg": "Field required"} for field in ("leader", "nodes", "resources")
        ]
        assert len(data["errors"]) + data["omitted"] == 3 * 1000  # the first part's, not 600,000
        if os.path.exists(f"/proc/{client.process.pid}/status"):
            assert peak_rss_bytes(client.process.pid) < 1 << 30
