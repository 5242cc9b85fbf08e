"""``scheduler.apply`` through the typed decoder (:mod:`bridge.fastdecode`) answers, and changes
the schedulers, exactly as the usual path does (orjson, then :func:`bridge.mutations.prepared` or
the models).

Each message goes to two protocols over bridges with the same history: one as the server runs
it, one with the typed decoder switched off. After every message their answers must be the same
bytes and their schedulers the same state, for the shapes the Perl client writes (which the typed
path must take) and for requests broken in every way the generators think of, sent to handles of
either mode.
"""

from __future__ import annotations

import copy
import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.bridge import mutations
from crs_bridge.bridge.fastdecode import APPLY_DEPTH, TypedMutations
from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.protocol import Protocol
from tests.test_fastdecode import corrupted, protocols
from tests.test_mutations import ANY, MOSTLY_VALID, dynamic_entries, state, static_entries

GiB = 1024**3


def dumps(value: object) -> bytes:
    """JSON bytes, integers past 64 bits and non-finite floats included (orjson refuses them)."""
    return json.dumps(value).encode()


def request(mutations: object, handle: object = "s1", ident: int = 1, **extra: object) -> dict:
    return {
        "jsonrpc": "2.0",
        "method": "scheduler.apply",
        "id": ident,
        "params": {"scheduler": handle, "mutations": mutations},
        **extra,
    }


def service(node: str, cpu: float = 1.0, mem: int = GiB) -> dict:
    """An add_service record as the Perl client writes it."""
    return {"stats": {"maxcpu": cpu, "maxmem": mem}, "running": True, "current-node": node}


def resource(node: str, cpu: float = 0.5, mem: int = GiB) -> dict:
    return {
        "stats": {"cpu": cpu, "maxcpu": 2 * cpu, "mem": mem, "maxmem": 2 * mem},
        "running": True,
        "current-node": node,
    }


NODES = {
    "static": [["add_node", f"n{i}", 16, 64 * GiB] for i in (1, 2, 3)],
    "dynamic": [["add_node", f"n{i}", {"cpu": 1.5, "maxcpu": 16, "mem": GiB, "maxmem": 64 * GiB}] for i in (1, 2, 3)],
}
#: A round as the Perl client journals it: the nodes, then its guests (sizes and nodes repeat).
ROUND = {
    "static": NODES["static"] + [["add_service", f"vm:{i}", service(f"n{1 + i % 3}", 1.0 + i % 4)] for i in range(60)],
    "dynamic": NODES["dynamic"]
    + [["add_resource", f"vm:{i}", resource(f"n{1 + i % 3}", 0.25 * (1 + i % 4))] for i in range(60)],
}


class Pair:
    """Two protocols with the same history, one taking the typed path and one not."""

    def __init__(self, limits: ServerLimits | None = None, modes: tuple[str, ...] = ("static", "dynamic")) -> None:
        self.fast, self.usual = protocols(limits)
        for ident, mode in enumerate(modes):  # handles s1, s2, ... in this order
            self.send(
                orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": "scheduler.new", "params": {"mode": mode}})
            )

    def send(self, raw: bytes) -> bytes | None:
        """The served protocol's answer, checked to be the usual path's, with the same states after."""
        answer = self.fast.handle(raw)
        assert answer == self.usual.handle(raw)
        fast, usual = self.fast.bridge.schedulers, self.usual.bridge.schedulers
        assert fast.keys() == usual.keys()
        for handle in fast:
            assert state(fast[handle]) == state(usual[handle]), handle
        return answer


def typed_mutations(raw: bytes, protocol: Protocol) -> list[TypedMutations | None]:
    """The mutations of each request in ``raw`` as the typed decoder hands them over (None: not typed)."""
    decoded = protocol._typed_requests.decode(raw, protocol.bridge.limits.max_json_depth)
    if decoded is None:
        return []
    requests = decoded if isinstance(decoded, list) else [decoded]
    found = [r["params"].get("mutations") for r in requests]
    return [mutations if type(mutations) is TypedMutations else None for mutations in found]


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize("batch", [False, True])
def test_the_perl_clients_journal_takes_the_typed_path_and_changes_state_alike(mode, batch):
    pair = Pair(modes=(mode,))
    entries = ROUND[mode]
    parts = [request(entries[:25], ident=1), request(entries[25:], ident=2)]
    messages = [parts] if batch else parts
    for message in messages:
        raw = orjson.dumps(message)
        typed = typed_mutations(raw, pair.fast)
        assert typed and all(t is not None and mutations.prepared(mode, t) is not None for t in typed)
        answer = orjson.loads(pair.send(raw))
        assert all("result" in a for a in (answer if batch else [answer])), answer
    assert len(pair.fast.bridge.schedulers["s1"].usage.resources()) == 60


def test_the_last_flush_of_a_round_applies_and_frees_alike():
    pair = Pair()
    frees = [{"jsonrpc": "2.0", "method": "scheduler.free", "id": 9, "params": {"scheduler": "s2"}}]
    raw = orjson.dumps([request(ROUND["static"], ident=8), *frees])
    assert typed_mutations(raw, pair.fast)[0] is not None
    assert [a["result"] for a in orjson.loads(pair.send(raw))] == [None, True]


@pytest.mark.parametrize(
    "entries, handle",
    [
        (ROUND["dynamic"], "s1"),  # a dynamic journal for a static handle, and the other way round
        (ROUND["static"], "s2"),
        (NODES["static"] + [["remove_node", "n1"], ["remove_node", ""], ["remove_resource", "vm:1"]], "s2"),
        ([["remove_node", "n1"], ["remove_service_usage", "vm:1"]], "s2"),
        ([["add_node", "n1", 16]], "s1"),
        ([["add_node", "n1", {"cpu": 1, "maxcpu": 2, "mem": 1, "maxmem": 2}, 5]], "s2"),
        (NODES["static"] + [["add_service", "vm:1", {**service("n1"), "running": 1}]], "s1"),  # Perl truth
        (NODES["static"] + [["add_service", "vm:1", service("n1"), "extra"]], "s1"),
        (NODES["static"] + [["add_service", "vm:1", {**service("n1"), "note": "ignored"}]], "s1"),
        (NODES["static"] + [["add_service", "vm:1", service("n1", mem=2.0 * GiB)]], "s1"),
        (NODES["static"] + [["add_service", "vm:1", service("n9")], ["add_service", "vm:2", service("n1")]], "s1"),
        (NODES["static"] + [["add_service", "vm:1", service("n1")], ["add_service", "vm:1", service("n2")]], "s1"),
        (NODES["static"] + [["add_service_usage_to_node", "n2", "vm:1", {"maxcpu": -0.0, "maxmem": 0}]], "s1"),
        ([*NODES["static"], ["add_service", "vm:1", {**service("n1"), "target-node": "n1"}]], "s1"),
        ([], "s1"),
        ({"add_node": 1}, "s1"),
        ([5, ["add_node"]], "s2"),
    ],
)  # fmt: skip
def test_edge_journals_answer_and_change_state_alike(entries, handle):
    Pair().send(dumps(request(entries, handle)))


@pytest.mark.parametrize(
    "message",
    [
        # duplicate keys: the last one counts, on both paths
        b'{"jsonrpc":"2.0","id":1,"method":"scheduler.apply","params":{"scheduler":"s2","scheduler":"s1",'
        b'"mutations":[["remove_node","n1"]],"mutations":[["add_node","n1",2,1024]]}}',
        b'[{"jsonrpc":"2.0","id":1,"method":"scheduler.apply","params":{"scheduler":"s1","mutations":'
        b'[["add_node","n1",2,1024],["add_service","vm:1",{"stats":{"maxcpu":1,"maxmem":5},"stats":{"maxcpu":2,'
        b'"maxmem":1},"running":true,"running":false,"current-node":"n1"}]]}}]',
        # params of other calls, positional params, no params, mutations in another method
        dumps({**request(NODES["static"]), "params": {"scheduler": "s1", "mutations": [], "bogus": 1}}),
        dumps({**request(NODES["static"]), "params": ["s1", NODES["static"]]}),
        dumps({**request(NODES["static"]), "params": {"mutations": NODES["static"]}}),
        dumps({**request(NODES["static"]), "params": {"scheduler": "s1"}}),
        dumps({**request(NODES["static"]), "params": {"scheduler": 5, "mutations": NODES["static"]}}),
        dumps({**request(NODES["static"]), "params": {"scheduler": "s9", "mutations": NODES["static"]}}),
        dumps({**request(NODES["static"]), "method": "scheduler.list_nodes"}),
        dumps(request(NODES["static"], extra=1)),
        dumps({k: v for k, v in request(NODES["static"]).items() if k != "id"}),  # a notification
        # batches: empty, with an element that is no request, with a request of a method unknown
        b"[]",
        dumps([request(NODES["static"]), 5]),
        dumps([request(NODES["static"]), {"jsonrpc": "2.0", "id": 3, "method": "nope", "params": {"scheduler": "s1"}}]),
        dumps([request(NODES["static"]), request(NODES["dynamic"], "s2", 2), request(ROUND["static"], "s1", 3)]),
        # the method named elsewhere in the message only
        dumps({**request(None), "method": "scheduler.list_nodes", "params": {"scheduler": "scheduler.apply"}}),
    ],
)  # fmt: skip
def test_edge_messages_answer_and_change_state_alike(message):
    Pair().send(message)


# -- broken in every way --------------------------------------------------------------------------


@st.composite
def journals(draw) -> tuple[str, list]:
    """A handle and a list of mutations for it: mostly of its mode and mostly valid, sometimes
    of the other mode or broken (the generators of tests/test_mutations.py)."""
    handle = draw(st.sampled_from(["s1", "s2"]))
    pool = draw(st.sampled_from([ANY, MOSTLY_VALID, MOSTLY_VALID]))
    own, other = (static_entries, dynamic_entries) if handle == "s1" else (dynamic_entries, static_entries)
    mode = "static" if handle == "s1" else "dynamic"
    entries = copy.deepcopy(NODES[mode]) if draw(st.booleans()) else []
    entries += draw(st.lists(st.one_of(own(pool), own(pool), other(pool)), max_size=6))
    if draw(st.booleans()):
        entries += copy.deepcopy(ROUND[mode][3 : 3 + draw(st.integers(0, 10))])
    return handle, entries


@st.composite
def apply_messages(draw) -> object:
    requests = [
        request(entries, handle, ident)
        for ident, (handle, entries) in enumerate(draw(st.lists(journals(), min_size=1, max_size=3)))
    ]
    return requests if len(requests) > 1 or draw(st.booleans()) else requests[0]


@given(st.lists(apply_messages(), min_size=1, max_size=3))
def test_broken_journals_answer_and_change_state_alike(messages):
    pair = Pair()
    for message in messages:
        pair.send(dumps(message))


@given(apply_messages(), st.integers(1, 9))
def test_depth_limits_answer_alike(message, max_depth):
    pair = Pair(ServerLimits(max_json_depth=max(max_depth, 3)))
    raw = dumps(message)
    pair.send(raw)
    if max_depth < APPLY_DEPTH:
        assert typed_mutations(raw, pair.fast) == []


@given(st.data())
def test_broken_bytes_answer_alike(data):
    raw = orjson.dumps([request(ROUND["static"][:6]), request(ROUND["dynamic"][:5], "s2", 2)])
    Pair().send(data.draw(corrupted(raw)))
