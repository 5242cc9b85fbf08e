"""The typed decoder (:mod:`bridge.fastdecode`) answers exactly as the usual path does, for
expanded candidates and compact bundles (``scheduler.apply``: ``tests/test_fastdecode_apply.py``).

Each message goes to two protocols over the same kind of bridge: one as the server runs it, one
with the typed decoder switched off (orjson, then :mod:`bridge.fastpath` or the models). Their
answers must be the same bytes, for valid requests (which the typed decoder must take, or it would
be dead code) and for requests broken in every way the generators think of.
"""

from __future__ import annotations

import copy
import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.bridge import convert
from crs_bridge.bridge import models as m
from crs_bridge.bridge.fastdecode import CANDIDATE_DEPTH
from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.methods import Bridge
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.core import CandidateColumns, CompactColumns
from crs_bridge.core.limits import MAX_BYTES, MAX_CORES

GiB = 2**30
NODES = [
    {"name": "n1", "cpu": 6.0, "maxcpu": 16, "mem": 40 * GiB, "maxmem": 64 * GiB},
    {"name": "n2", "cpu": 1.5, "maxcpu": 8, "mem": 10 * GiB, "maxmem": 32 * GiB},
    {"name": "n3", "cpu": 2.0, "maxcpu": 8, "mem": 5 * GiB, "maxmem": 32 * GiB},
]


def stats(cpu: float, mem: int) -> dict:
    return {"cpu": cpu, "maxcpu": 4.0, "mem": mem, "maxmem": 8 * GiB}


RESOURCES = [
    {"sid": f"vm:{100 + i}", "stats": stats(0.5 + i, (1 + i) * GiB), "running": True, "current-node": "n1"}
    for i in range(3)
]
USAGE = {"mode": "dynamic", "nodes": NODES, "resources": RESOURCES}


def expanded(sid: str, target: str) -> dict:
    resource = next(r for r in RESOURCES if r["sid"] == sid)
    return {"sid": sid, "source-node": "n1", "target-node": target, "stats": copy.deepcopy(resource["stats"])}


CANDIDATES = [expanded(r["sid"], target) for r in RESOURCES for target in ("n2", "n3")]

#: One valid request per stateless method that takes candidates.
REQUESTS = {
    "score": {"method": "score_best_balancing_migrations", "params": {"usage": USAGE, "limit": 4}},
    "topsis": {
        "method": "score_best_balancing_migrations",
        "params": {"usage": USAGE, "limit": 3, "method": "topsis", "imbalance": "raw"},
    },
    "select": {
        "method": "select_best_balancing_migration",
        "params": {"usage": USAGE, "imbalance_threshold": 0.3},
    },
    "explain": {"method": "explain_migrations", "params": {"usage": USAGE, "limit": 2}},
}


def message(name: str = "score", candidates: list | None = None, ident: object = 7) -> dict:
    request = copy.deepcopy(REQUESTS[name])
    request["params"]["candidates"] = copy.deepcopy(CANDIDATES if candidates is None else candidates)
    return {"jsonrpc": "2.0", "id": ident, **request}


def protocols(limits: ServerLimits | None = None) -> tuple[Protocol, Protocol]:
    """(as served, typed decoder off) over bridges with the same limits."""
    fast = Protocol(Bridge(limits=limits or ServerLimits()))
    usual = Protocol(Bridge(limits=limits or ServerLimits()))
    usual._typed_requests.decode = lambda message, max_depth: None
    return fast, usual


FAST, USUAL = protocols()


def both(raw: bytes, pair: tuple[Protocol, Protocol] = (FAST, USUAL)) -> bytes | None:
    """The answer of the served protocol, checked to be the usual path's answer."""
    fast, usual = pair
    answer = fast.handle(raw)
    assert answer == usual.handle(raw)
    return answer


def taken(raw: bytes, protocol: Protocol = FAST) -> bool:
    decoded = protocol._typed_requests.decode(raw, protocol.bridge.limits.max_json_depth)
    return decoded is not None and type(decoded["params"]["candidates"]) is CandidateColumns


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_valid_requests_take_the_typed_path_and_answer_alike(name):
    raw = orjson.dumps(message(name))
    assert taken(raw)
    answer = orjson.loads(both(raw))
    assert "result" in answer, answer


def test_stateful_methods_take_the_typed_path_and_answer_alike():
    fast, usual = protocols()
    new = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "scheduler.new", "params": {"mode": "dynamic"}})
    handle = orjson.loads(both(new, (fast, usual)))["result"]["scheduler"]
    for node in NODES:
        node_stats = {k: node[k] for k in ("cpu", "maxcpu", "mem", "maxmem")}
        add = {"scheduler": handle, "nodename": node["name"], "stats": node_stats}
        answer = both(
            orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "scheduler.add_node", "params": add}), (fast, usual)
        )
        assert "result" in orjson.loads(answer)
    for r in RESOURCES:
        resource = {k: r[k] for k in ("stats", "running", "current-node")}
        add = {"scheduler": handle, "sid": r["sid"], "resource": resource}
        answer = both(
            orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "scheduler.add_resource", "params": add}), (fast, usual)
        )
        assert "result" in orjson.loads(answer)
    for method, extra in [
        ("scheduler.score_best_balancing_migration_candidates", {"limit": 3}),
        ("scheduler.score_best_balancing_migration_candidates_topsis", {"limit": 3}),
        ("scheduler.select_best_balancing_migration", {"imbalance_threshold": 0.0}),
        ("scheduler.stage_candidates", {}),
    ]:
        params = {"scheduler": handle, "candidates": CANDIDATES, **extra}
        raw = orjson.dumps({"jsonrpc": "2.0", "id": 4, "method": method, "params": params})
        assert taken(raw, fast), method
        assert "result" in orjson.loads(both(raw, (fast, usual))), method


def test_values_reach_the_engine_as_the_models_give_them():
    # -0.0 cores become 0.0, integer cores become floats, byte counts stay exact integers.
    candidates = [dict(CANDIDATES[0], stats={"cpu": -0.0, "maxcpu": 2, "mem": MAX_BYTES, "maxmem": 0})]
    decoded = FAST._typed_requests.decode(orjson.dumps(message(candidates=candidates)), 1024)
    columns = decoded["params"]["candidates"]
    assert str(columns.cpu[0]) == "0.0" and columns.mem.tolist() == [MAX_BYTES]
    both(orjson.dumps(message(candidates=candidates)))


# -- broken in every way ------------------------------------------------------------------------

ODD_VALUES = st.sampled_from(
    [None, True, False, 0, -1, 1.5, 2.0, -0.0, "", "n9", "vm:100", [], {}, [1], {"cpu": 1},
     MAX_BYTES, MAX_BYTES + 1, 2**63, 2**64 + 1, MAX_CORES, float(MAX_CORES) * 2, 1e300, -1e-300, "n1"]
).map(copy.deepcopy)  # fmt: skip
CANDIDATE_KEYS = ["sid", "source-node", "target-node", "stats", "leader", "nodes", "resources", "extra"]
STATS_KEYS = ["cpu", "maxcpu", "mem", "maxmem", "extra"]


def dumps(value: object) -> bytes:
    """JSON bytes, integers past 64 bits included (orjson refuses to write them)."""
    return json.dumps(value).encode()


@st.composite
def broken_messages(draw) -> dict:
    request = message(draw(st.sampled_from(sorted(REQUESTS))), ident=draw(st.sampled_from([1, "x", None, 2.5])))
    candidates = request["params"]["candidates"]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["candidate", "stats", "drop", "params", "envelope", "list"]))
        index = draw(st.integers(0, len(candidates) - 1))
        record = candidates[index] if isinstance(candidates[index], dict) else {}
        if where == "candidate":
            record[draw(st.sampled_from(CANDIDATE_KEYS))] = draw(ODD_VALUES)
        elif where == "stats" and isinstance(record.get("stats"), dict):
            record["stats"][draw(st.sampled_from(STATS_KEYS))] = draw(ODD_VALUES)
        elif where == "drop":
            record.pop(draw(st.sampled_from(CANDIDATE_KEYS)), None)
        elif where == "params" and isinstance(request.get("params"), dict):
            key = draw(st.sampled_from(["usage", "limit", "method", "imbalance", "scheduler", "append", "bogus"]))
            request["params"][key] = draw(ODD_VALUES)
        elif where == "envelope":
            key = draw(st.sampled_from(["jsonrpc", "method", "id", "params", "extra"]))
            request[key] = draw(st.one_of(ODD_VALUES, st.sampled_from(["scheduler.new", "bridge.info", "1.0"])))
        else:
            candidates.insert(index, draw(ODD_VALUES))
    return request


@given(broken_messages())
def test_broken_requests_answer_alike(request):
    both(dumps(request))


@given(broken_messages(), st.integers(1, 8))
def test_depth_limits_answer_alike(request, max_depth):
    pair = protocols(ServerLimits(max_json_depth=max_depth))
    raw = dumps(request)
    both(raw, pair)
    if max_depth < CANDIDATE_DEPTH:
        assert not taken(raw, pair[0])


@st.composite
def corrupted(draw, raw: bytes) -> bytes:
    """``raw`` cut short, or with a byte that matters to JSON put in place of one or inserted."""
    at = draw(st.integers(0, len(raw) - 1))
    edit = draw(st.sampled_from(["cut", "byte", "insert"]))
    if edit == "cut":
        return raw[:at]
    byte = draw(st.sampled_from([b",", b"]", b"}", b"[", b"\x00", b"\xff", b"\\", b'"', b"1", b"-", b"e", b" "]))
    return raw[:at] + byte + raw[at + (edit == "byte") :]


@given(st.data())
def test_broken_bytes_answer_alike(data):
    raw = orjson.dumps(message(data.draw(st.sampled_from(sorted(REQUESTS)))))
    both(data.draw(corrupted(raw)))


@pytest.mark.parametrize(
    "raw",
    [
        # duplicate keys: the last one counts, on both paths
        b'{"jsonrpc":"2.0","id":1,"method":"score_best_balancing_migrations","params":{"usage":%s,"limit":1,'
        b'"limit":2,"candidates":[{"sid":"vm:100","sid":"vm:101","source-node":"n1","target-node":"n2",'
        b'"stats":{"cpu":1,"maxcpu":2,"mem":1,"mem":2,"maxmem":9}}]}}' % orjson.dumps(USAGE),
        # a lone surrogate, an unescaped control character, a number past float range
        b'{"jsonrpc":"2.0","id":1,"method":"score_best_balancing_migrations","params":{"usage":%s,"limit":1,'
        b'"candidates":[{"sid":"\\ud800","source-node":"n1","target-node":"n2",'
        b'"stats":{"cpu":1,"maxcpu":2,"mem":1,"maxmem":9}}]}}' % orjson.dumps(USAGE),
        b'{"jsonrpc":"2.0","id":1,"method":"score_best_balancing_migrations","params":{"usage":%s,"limit":1,'
        b'"candidates":[{"sid":"vm\x01","source-node":"n1","target-node":"n2",'
        b'"stats":{"cpu":1e400,"maxcpu":2,"mem":1,"maxmem":9}}]}}' % orjson.dumps(USAGE),
        # nesting past orjson's limit inside a param the typed decoder keeps raw
        b'{"jsonrpc":"2.0","id":1,"method":"score_best_balancing_migrations","params":{"usage":%s,"limit":%s,'
        b'"candidates":%s}}' % (orjson.dumps(USAGE), b"[" * 1100 + b"]" * 1100, orjson.dumps(CANDIDATES)),
        # params of other methods, in an order the typed records do not keep (errors name each in turn)
        orjson.dumps({**message("select"), "params": {**message("select")["params"], "limit": 1, "append": 2}}),
        # positional params, and a batch: the usual path's
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "score_best_balancing_migrations",
                      "params": [USAGE, None, CANDIDATES, 2]}),
        orjson.dumps([message(), message("select", ident=8)]),
    ],
)  # fmt: skip
def test_edge_messages_answer_alike(raw):
    both(raw)


# -- compact bundles ------------------------------------------------------------------------------

#: Bundles over RESOURCES, as the HA manager builds them (target lists repeat), and one of two.
BUNDLES = [
    {"leader": "vm:100", "resources": ["vm:100"], "nodes": ["n2", "n3"]},
    {"leader": "vm:101", "resources": ["vm:101", "vm:102"], "nodes": ["n3"]},
    {"nodes": ["n2", "n3"], "resources": ["vm:102"], "leader": "vm:102"},
]


def taken_as(raw: bytes, kind: type, protocol: Protocol = FAST) -> bool:
    decoded = protocol._typed_requests.decode(raw, protocol.bridge.limits.max_json_depth)
    protocol._typed_requests.release()
    return decoded is not None and type(decoded["params"]["candidates"]) is kind


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_valid_bundles_take_the_typed_path_and_answer_alike(name):
    raw = orjson.dumps(message(name, BUNDLES))
    assert taken_as(raw, CompactColumns)
    answer = orjson.loads(both(raw))
    assert "result" in answer, answer


def test_bundles_staged_through_a_handle_take_the_typed_path_and_answer_alike():
    fast, usual = protocols()
    for pair_protocol in (fast, usual):
        pair_protocol.bridge.new_handle(convert.build_scheduler(m.DynamicUsage.model_validate(USAGE), "normalized"))
    for append, part in [(False, BUNDLES[:1]), (True, BUNDLES[1:])]:
        params = {"scheduler": "s1", "candidates": part, "append": append}
        raw = orjson.dumps({"jsonrpc": "2.0", "id": 4, "method": "scheduler.stage_candidates", "params": params})
        assert taken_as(raw, CompactColumns, fast)
        assert "result" in orjson.loads(both(raw, (fast, usual)))
    score = {"scheduler": "s1", "count": len(BUNDLES), "limit": 3}
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 5, "method": "scheduler.score_staged_candidates", "params": score})
    assert len(orjson.loads(both(raw, (fast, usual)))["result"]) == 3


BUNDLE_KEYS = ["leader", "resources", "nodes", "sid", "extra"]


@st.composite
def broken_bundle_messages(draw) -> dict:
    request = message(draw(st.sampled_from(sorted(REQUESTS))), BUNDLES)
    bundles = request["params"]["candidates"]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["bundle", "list", "drop", "insert"]))
        index = draw(st.integers(0, len(bundles) - 1))
        record = bundles[index] if isinstance(bundles[index], dict) else {}
        if where == "bundle":
            record[draw(st.sampled_from(BUNDLE_KEYS))] = draw(ODD_VALUES)
        elif where == "list" and isinstance(record.get("nodes"), list) and isinstance(record.get("resources"), list):
            names = record[draw(st.sampled_from(["nodes", "resources"]))]
            names.insert(draw(st.integers(0, len(names))), draw(ODD_VALUES))
        elif where == "drop":
            record.pop(draw(st.sampled_from(BUNDLE_KEYS)), None)
        else:
            bundles.insert(index, draw(ODD_VALUES))
    return request


@given(broken_bundle_messages())
def test_broken_bundles_answer_alike(request):
    both(dumps(request))


@given(broken_bundle_messages(), st.integers(1, 8))
def test_depth_limits_answer_alike_for_bundles(request, max_depth):
    pair = protocols(ServerLimits(max_json_depth=max_depth))
    raw = dumps(request)
    both(raw, pair)
    if max_depth < CANDIDATE_DEPTH:
        assert not taken_as(raw, CompactColumns, pair[0])


@pytest.mark.parametrize("max_candidates, max_resources", [(1, 1000), (3, 1000), (4, 1000), (1000, 3), (1000, 4)])
def test_size_limits_answer_alike_for_bundles(max_candidates, max_resources):
    pair = protocols(ServerLimits(max_candidates=max_candidates, max_resources=max_resources))
    raw = orjson.dumps(message("score", BUNDLES))
    assert taken_as(raw, CompactColumns, pair[0])
    both(raw, pair)


@pytest.mark.parametrize("kind", ["expanded", "compact"])
@pytest.mark.parametrize("where", ["record", "stats", "list"])
def test_ignored_keys_nested_past_the_depth_limit_answer_alike(kind, where):
    """The models ignore unknown keys, but the usual path refuses a message nested deeper than
    the limit, wherever: the typed path must not take a record with a key it does not know."""
    candidates = copy.deepcopy(CANDIDATES if kind == "expanded" else BUNDLES)
    if where == "record":
        candidates[-1]["extra"] = [[1]]
    elif where == "stats" and kind == "expanded":
        candidates[-1]["stats"]["extra"] = [1]
    else:
        candidates[-1]["nodes" if kind == "compact" else "sid"] = [["n2"]]
    params = {"scheduler": "s1", "candidates": candidates}
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "scheduler.stage_candidates", "params": params})
    for max_depth in (5, 6, 1024):
        both(raw, protocols(ServerLimits(max_json_depth=max_depth)))
