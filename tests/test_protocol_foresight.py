"""Foresight (:mod:`bridge.foresight`): a query answered ahead of time, while the server would wait,
is reused only when it is exactly the next call, and every answer is the one a server without
foresight gives, byte for byte.

In process, the idle step is forced (:meth:`Protocol.foresee`, which the server calls when it
has nothing to read), so nothing depends on timing. Whether an answer was computed or reused is
seen in the engine: every balancing query expands its candidates (``Scheduler.candidate_batch``)
once, a foreseen one when it is foreseen. The expected side is always a protocol without foresight
fed the same messages.
"""

from __future__ import annotations

import msgspec
import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from crs_bridge.bridge import foresight, phases
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import MUTATORS, STAGING_METHODS, State
from crs_bridge.client import BridgeClient
from crs_bridge.core.modes import Scheduler

GiB = 1024**3
NODES = ["n1", "n2", "n3", "n4"]
SCORE = "scheduler.score_best_balancing_migration_candidates"
IMBALANCE = "scheduler.calculate_node_imbalance"


def home(i: int) -> str:
    return NODES[0] if i % 3 == 0 else NODES[i % len(NODES)]  # a third on the first node


def usage(shift: float) -> list:
    """A dynamic cluster's ``scheduler.apply`` mutations: 4 nodes, 24 guests; ``shift`` moves the
    measured cpu as a round's new stats would."""
    nodes = [
        ["add_node", n, {"cpu": 4.0 - i + shift, "maxcpu": 16, "mem": (8 - i) * GiB, "maxmem": 64 * GiB}]
        for i, n in enumerate(NODES)
    ]
    guests = [
        [
            "add_resource",
            f"vm:{100 + i}",
            {
                "stats": {
                    "cpu": 0.2 + (i * 7 % 5) * 0.3 + shift,
                    "maxcpu": 4,
                    "mem": (1 + i % 3) * GiB,
                    "maxmem": 8 * GiB,
                },
                "running": True,
                "current-node": home(i),
            },
        ]
        for i in range(24)
    ]
    return nodes + guests


def candidates(count: int = 24) -> list:
    """Bundles of the first ``count`` guests, to every other node."""
    return [
        {"leader": f"vm:{100 + i}", "resources": [f"vm:{100 + i}"], "nodes": [n for n in NODES if n != home(i)]}
        for i in range(count)
    ]


class Pair:
    """Two protocols fed the same messages, one with foresight (its idle step forced by
    :meth:`idle`), one without: :meth:`send` checks that they answer alike."""

    def __init__(self) -> None:
        self.foreseeing = Protocol(State(), foresight=True)
        self.reference = Protocol(State())
        self.ids = 0

    def send(self, message: bytes) -> bytes | None:
        answer = self.foreseeing.handle(message)
        assert answer == self.reference.handle(message)
        return answer

    def call(self, method: str, params: dict | list) -> dict:
        self.ids += 1
        return orjson.loads(
            self.send(orjson.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}))
        )

    def idle(self) -> None:
        self.foreseeing.foresee()

    def prepare(self, handle: str, shift: float, usage_of=usage) -> None:
        """An HA round on a new scheduler ``handle`` up to its imbalance, the server idle after each
        answer (where the client works)."""
        assert "result" in self.call("scheduler.new", {"mode": "dynamic", "scheduler": handle})
        assert self.call("scheduler.apply", {"scheduler": handle, "mutations": usage_of(shift)})["result"] is None
        self.idle()
        assert "result" in self.call(IMBALANCE, {"scheduler": handle})
        self.idle()

    def round(self, handle: str, shift: float) -> dict:
        """:meth:`prepare`, then the round's scoring, answered."""
        self.prepare(handle, shift)
        return self.call(SCORE, {"scheduler": handle, "candidates": candidates(), "limit": 1})


@pytest.fixture
def expansions(monkeypatch) -> list:
    """The schedulers whose candidates the engine expanded, in order (foreseen ones included)."""
    expanded, original = [], Scheduler.candidate_batch

    def spy(scheduler, batch):
        expanded.append(scheduler)
        return original(scheduler, batch)

    monkeypatch.setattr(Scheduler, "candidate_batch", spy)
    return expanded


def test_a_round_after_the_first_gets_its_scores_foreseen(expansions):
    pair = Pair()
    pair.round("c1", 0.0)
    assert len(expansions) == 2  # the first round has nothing to foresee: computed by each protocol
    pair.call("scheduler.free", {"scheduler": "c1"})
    scored = pair.round("c2", 0.25)
    foreseen = pair.foreseeing.state.schedulers["c2"]
    assert expansions[2:] == [foreseen, pair.reference.state.schedulers["c2"]]  # foreseen, then not again
    assert scored["result"][0]["migration"]["sid"].startswith("vm:")


def test_a_traced_call_answered_from_the_guess_shows_it_as_its_phase():
    pair = Pair()
    pair.round("c1", 0.0)
    pair.prepare("c2", 0.5)
    params = {"scheduler": "c2", "candidates": candidates(), "limit": 1}
    phases.start()
    pair.foreseeing.handle(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": SCORE, "params": params}))
    spent = phases.take()
    assert "foreseen" in spent and "validate" not in spent and "run" not in spent


def test_the_guess_is_made_once_and_holds_one_answer(expansions):
    pair = Pair()
    pair.round("c1", 0.0)
    pair.prepare("c2", 0.5)
    pair.idle()
    pair.idle()
    assert expansions[2:] == [pair.foreseeing.state.schedulers["c2"]]


#: What comes between the guess (after the imbalance of "c2") and its query, and the query: each
#: is computed, never answered from the guess. (method, params) pairs; "c3" is a second live
#: scheduler of the same usage.
NOT_REUSED = {
    "a mutation": ([("scheduler.remove_resource", {"scheduler": "c2", "sid": "vm:103"})], SCORE, {}),
    "an add that changes the best move": (
        [
            (
                "scheduler.apply",
                {
                    "scheduler": "c2",
                    "mutations": [["add_node", "n5", {"cpu": 0.0, "maxcpu": 64, "mem": 0, "maxmem": 256 * GiB}]],
                },
            )
        ],
        SCORE,
        {"candidates": [{**c, "nodes": [*c["nodes"], "n5"]} for c in candidates()]},
    ),
    "a free and a new scheduler under the same handle": (
        [
            ("scheduler.free", {"scheduler": "c2"}),
            ("scheduler.new", {"mode": "dynamic", "scheduler": "c2"}),
            ("scheduler.apply", {"scheduler": "c2", "mutations": usage(1.0)}),
        ],
        SCORE,
        {},
    ),
    "a query in between": ([(IMBALANCE, {"scheduler": "c2"})], SCORE, {}),
    "another handle": ([], SCORE, {"scheduler": "c3"}),
    "other candidates": ([], SCORE, {"candidates": candidates(23)}),
    "another limit": ([], SCORE, {"limit": 2}),
    "another method": ([], "scheduler.score_best_balancing_migration_candidates_topsis", {}),
    "the same params by position": ([], SCORE, None),
}


@pytest.mark.parametrize(("between", "method", "changes"), NOT_REUSED.values(), ids=NOT_REUSED)
def test_a_guess_serves_only_the_next_call_if_it_is_the_guessed_query(expansions, between, method, changes):
    pair = Pair()
    pair.round("c1", 0.0)
    pair.call("scheduler.new", {"mode": "dynamic", "scheduler": "c3"})
    pair.call("scheduler.apply", {"scheduler": "c3", "mutations": usage(0.5)})
    pair.prepare("c2", 0.5)
    assert expansions[-1] is pair.foreseeing.state.schedulers["c2"]  # the guess was made
    for step in between:
        pair.call(*step)
    params = {"scheduler": "c2", "candidates": candidates(), "limit": 1, **(changes or {})}
    expected_computations = len(expansions) + 2
    pair.call(method, params if changes is not None else list(params.values()))
    assert len(expansions) == expected_computations  # by both protocols


def score_message(handle: str, **envelope) -> bytes:
    """The round's scoring request as the client sends it (compact JSON, members in model order)."""
    params = {"scheduler": handle, "candidates": candidates(), "limit": 1}
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": SCORE, "params": params, **envelope})


#: The round's scoring request sent otherwise than the guess expects it, and how many times the
#: candidates are then expanded by the two protocols: 1 when the guess answers it (only the
#: protocol without foresight computes), 2 when both compute it, 0 when both refuse the request.
#: Only one request whose params are the guessed bytes is answered from the guess.
SENT_OTHERWISE = {
    "a string id": (lambda m: m.replace(b'"id":7', b'"id":"seven"'), 1),
    "as a notification": (lambda m: m.replace(b'"id":7,', b""), 1),
    "spaces in the params": (lambda m: m.replace(b'"limit":1', b'"limit": 1'), 2),
    "members in another order": (
        lambda m: m.replace(b'"scheduler":"c2",', b"").replace(b'"limit":1', b'"limit":1,"scheduler":"c2"'),
        2,
    ),
    "the handle escaped": (lambda m: m.replace(b'"scheduler":"c2"', b'"scheduler":"\\u00632"'), 2),
    "in a batch of one": (lambda m: b"[" + m + b"]", 2),
    "an unknown envelope member": (lambda m: m.replace(b'"id":7', b'"id":7,"extra":1'), 0),
}


@pytest.mark.parametrize(("change", "computed"), SENT_OTHERWISE.values(), ids=SENT_OTHERWISE)
def test_only_the_guessed_bytes_are_answered_from_the_guess(expansions, change, computed):
    pair = Pair()
    pair.round("c1", 0.0)
    pair.prepare("c2", 0.5)
    assert expansions[-1] is pair.foreseeing.state.schedulers["c2"]  # the guess was made
    guessed = len(expansions)
    pair.send(change(score_message("c2")))  # answered as without foresight (Pair checks)
    assert len(expansions) == guessed + computed


def test_a_handle_member_the_decoder_overrides_is_not_the_one_replaced():
    """The handle's member written twice, the later one otherwise (spaced): the decoder keeps the
    later one, so replacing the earlier one, the one found as written, would make a guess whose
    bytes name the old handle."""

    def twice(handle: str, kept: str) -> bytes:
        message = score_message(handle)
        return message.replace(b'"params":{', b'"params":{"scheduler":"%s",' % handle.encode()).replace(
            b'"scheduler":"%s","candidates"' % handle.encode(), b'"scheduler" : "%s","candidates"' % kept.encode()
        )

    pair = Pair()
    pair.prepare("c1", 0.0)
    pair.send(twice("c1", "c1"))
    pair.prepare("c2", 0.5)
    pair.send(twice("c2", "c1"))  # scores c1 (Pair checks the answers are alike)


#: Names that try to look like a handle's member inside the params.
TRICKY = st.sampled_from(["c1", "scheduler", '"scheduler":"c1"', 'x\\"', "\u00e9", "\x00", "c1\\"])


@given(
    old=st.one_of(TRICKY, st.text(max_size=6)),
    new=st.one_of(TRICKY, st.text(max_size=6)),
    sids=st.lists(st.one_of(TRICKY, st.text(min_size=1, max_size=6)), min_size=1, max_size=4),
)
def test_the_guessed_bytes_decode_to_the_params_as_they_came_on_the_new_handle(old, new, sids):
    protocol = Protocol(State(), foresight=True)
    messages = protocol._messages  # the protocol's own decoder, as the guess uses it
    bundles = [{"leader": sid, "resources": [sid], "nodes": [old, "scheduler"]} for sid in sids]
    params = {"scheduler": old, "candidates": bundles, "limit": 1}
    message = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": SCORE, "params": params})
    spec = protocol.state.methods[SCORE]
    first = messages.decode(message, 64)
    assume(first is not None)  # a handle the strict decoder refuses (empty, say) is never guessed on
    query = foresight.Query(spec, old, first.params, message)
    guessed = query.params_on(new, messages.as_sent(SCORE))
    if guessed is None:  # the handle's member is not found once: no guess
        assert message.count(b'"scheduler":' + orjson.dumps(old)) != 1
        return
    sent = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": SCORE, "params": {**params, "scheduler": new}})
    assert b"" + messages.as_sent(SCORE).decode(sent).params == guessed  # the client's bytes, as a client renders them
    as_decoded = messages.decode(sent, 64)
    assume(as_decoded is not None)  # the guess's handle is the last call's, which the strict decoder took
    assert as_decoded.params == msgspec.structs.replace(query.params, scheduler=new)


def test_a_message_that_is_no_call_keeps_the_guess(expansions):
    pair = Pair()
    pair.round("c1", 0.0)
    pair.prepare("c2", 0.5)
    assert b"-32700" in pair.send(b"{not json")
    pair.call(SCORE, {"scheduler": "c2", "candidates": candidates(), "limit": 1})
    assert expansions[2:] == [pair.foreseeing.state.schedulers["c2"], pair.reference.state.schedulers["c2"]]


def test_a_guess_that_fails_is_dropped_and_the_call_answers_its_error(expansions):
    pair = Pair()
    pair.round("c1", 0.0)
    pair.prepare("c2", 0.5, lambda shift: usage(shift)[:3])  # no n4, no guests
    assert expansions[2:] == [pair.foreseeing.state.schedulers["c2"]]  # guessed, and failed
    answer = pair.call(SCORE, {"scheduler": "c2", "candidates": candidates(), "limit": 1})
    assert answer["error"]["code"] in (-32000, -32602)
    assert len(expansions) == 5  # the real call ran, in both protocols


def test_a_guess_on_a_handle_gone_changes_nothing():
    pair = Pair()
    pair.round("c1", 0.0)
    pair.call(IMBALANCE, {"scheduler": "nobody"})  # the last call, on an unknown handle
    pair.idle()
    assert pair.call(SCORE, {"scheduler": "nobody", "candidates": candidates(), "limit": 1})["error"]["code"] == -32001


def test_staged_candidates_are_never_dropped_by_a_guess():
    pair = Pair()
    for handle, shift in (("c1", 0.0), ("c2", 0.5)):
        pair.call("scheduler.new", {"mode": "dynamic", "scheduler": handle})
        pair.call("scheduler.apply", {"scheduler": handle, "mutations": usage(shift)})
        assert (
            pair.call("scheduler.stage_candidates", {"scheduler": handle, "candidates": candidates()})["result"] == 24
        )
        pair.idle()  # last time stage_candidates was followed by scoring on the same handle...
        if handle == "c1":
            pair.call(SCORE, {"scheduler": handle, "candidates": candidates(), "limit": 1})
    # ...which would drop the staging, were it guessed
    staged = pair.call("scheduler.score_staged_candidates", {"scheduler": "c2", "count": 24, "limit": 1})
    assert "result" in staged


def test_a_mutation_that_followed_is_never_guessed():
    pair = Pair()
    for handle in ("c1", "c2"):
        pair.call("scheduler.new", {"mode": "dynamic", "scheduler": handle})
        pair.call("scheduler.apply", {"scheduler": handle, "mutations": usage(0.0)})
        pair.call(IMBALANCE, {"scheduler": handle})
        pair.idle()  # for c2: last time the imbalance was followed by a node's removal
        if handle == "c1":
            pair.call("scheduler.remove_node", {"scheduler": handle, "nodename": "n4"})
    pair.call(IMBALANCE, {"scheduler": "c2"})  # the same in both: n4 is still there
    pair.call("scheduler.remove_node", {"scheduler": "c2", "nodename": "n4"})
    assert pair.call(IMBALANCE, {"scheduler": "c2"})["result"] == pair.call(IMBALANCE, {"scheduler": "c1"})["result"]


def test_queries_in_bigger_messages_are_not_guessed(expansions, monkeypatch):
    monkeypatch.setattr(foresight, "FORESEE_UP_TO", len(orjson.dumps(candidates())) // 2)
    pair = Pair()
    pair.round("c1", 0.0)
    pair.prepare("c2", 0.5)
    assert len(expansions) == 2  # nothing guessed


def test_the_foreseeable_queries_are_methods_that_change_nothing():
    methods = Protocol(State()).state.methods
    assert methods.keys() >= foresight.FORESEEABLE
    mutations = {f"scheduler.{method}" for mutators in MUTATORS.values() for method in mutators}
    changing = {"scheduler.apply", "scheduler.new", "scheduler.free", *mutations, *STAGING_METHODS}
    assert changing <= methods.keys() and not foresight.FORESEEABLE & changing


# -- any sequence: the same answers ---------------------------------------------------------

HANDLES = ["a", "b"]
BUNDLES = [
    candidates(),
    candidates(12),
    [*candidates(6), {"leader": "vm:999", "resources": ["vm:999"], "nodes": ["n2"]}],  # an unknown guest
]
QUERIES = [
    SCORE,
    "scheduler.score_best_balancing_migration_candidates_topsis",
    "scheduler.select_best_balancing_migration",
    "scheduler.select_best_balancing_migration_topsis",
]


def renewed(handle: str, shift: float) -> list[tuple[str, dict]]:
    """The calls that free ``handle`` and make it a new cluster, as a round starts."""
    return [
        ("scheduler.free", {"scheduler": handle}),
        ("scheduler.new", {"mode": "dynamic", "scheduler": handle}),
        ("scheduler.apply", {"scheduler": handle, "mutations": usage(shift)}),
    ]


def query(method: str, handle: str, bundles: list, limit: int = 1) -> tuple[str, dict]:
    params = {"scheduler": handle, "candidates": bundles}
    return method, {**params, "limit": limit} if method in QUERIES[:2] else params


@st.composite
def messages(draw) -> list[tuple[list[tuple[str, dict]], bool]]:
    """Messages (their calls) on a scheduler, each with whether the server is idle after it: an HA
    round's (a new cluster, its imbalance, a query of a few that repeat), or one of any calls."""
    handle, idle = draw(st.sampled_from(HANDLES)), st.booleans()
    if draw(st.booleans()):
        method, bundles = draw(st.sampled_from(QUERIES[:2])), draw(st.sampled_from(BUNDLES[:2]))
        steps = [renewed(handle, draw(st.sampled_from([0.0, 0.5]))), [(IMBALANCE, {"scheduler": handle})]]
        return [(calls, draw(idle)) for calls in [*steps, [query(method, handle, bundles)]]]
    kind = draw(st.sampled_from(["remove", "imbalance", "query", "stage", "staged", "bad"]))
    bundles = draw(st.sampled_from(BUNDLES))
    if kind == "remove":
        calls = [("scheduler.remove_resource", {"scheduler": handle, "sid": f"vm:{draw(st.integers(100, 105))}"})]
    elif kind == "imbalance":
        calls = [(IMBALANCE, {"scheduler": handle})]
    elif kind == "stage":
        calls = [("scheduler.stage_candidates", {"scheduler": handle, "candidates": bundles})]
    elif kind == "staged":
        calls = [("scheduler.score_staged_candidates", {"scheduler": handle, "count": len(bundles), "limit": 1})]
    else:
        limit = draw(st.sampled_from([1, 2] if kind == "query" else [-1]))
        calls = [query(draw(st.sampled_from(QUERIES)), handle, bundles, limit)]
    if draw(st.booleans()):  # and a second one in the same message
        calls.append((IMBALANCE, {"scheduler": draw(st.sampled_from(HANDLES))}))
    return [(calls, draw(idle))]


@given(st.lists(messages(), max_size=12))
def test_any_sequence_is_answered_as_without_foresight(episodes):
    pair = Pair()
    for handle in HANDLES:
        for method, params in renewed(handle, 0.0)[1:]:
            pair.call(method, params)
    for number, (calls, idle) in enumerate(message for episode in episodes for message in episode):
        batch = [{"jsonrpc": "2.0", "id": f"{number}.{i}", "method": m, "params": p} for i, (m, p) in enumerate(calls)]
        pair.send(orjson.dumps(batch if len(batch) > 1 else batch[0]))  # checks the answers are the same
        if idle:
            pair.idle()


# -- through the real server ----------------------------------------------------------------


def test_the_server_answers_rounds_as_without_foresight_and_traces_the_real_messages(tmp_path):
    trace = tmp_path / "trace"
    reference = Protocol(State())
    messages, answers = [], []
    with BridgeClient(["--trace", str(trace)]) as client:
        for number in range(6):
            handle, ident = f"r{number}", 10 * number
            round_calls = [
                ("scheduler.new", {"mode": "dynamic", "scheduler": handle}),
                ("scheduler.apply", {"scheduler": handle, "mutations": usage(0.1 * number)}),
                (IMBALANCE, {"scheduler": handle}),
                (SCORE, {"scheduler": handle, "candidates": candidates(), "limit": 1}),
                (SCORE, {"scheduler": handle, "candidates": candidates(20 + number % 2), "limit": 1}),
                ("scheduler.free", {"scheduler": handle}),
            ]
            for method, params in round_calls:
                ident += 1
                message = orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
                client.send_raw(message)
                answer = client.read_raw()[1]  # the server then waits, and may guess
                assert answer == reference.handle(message)
                messages.append(message)
                answers.append(answer)
        assert client.close() == 0
    lines = trace.read_text().splitlines()
    assert [line.split("] ", 1)[1].encode() for line in lines if " --> " in line] == messages
    assert [line.rsplit("] ", 1)[1].encode() for line in lines if " <-- " in line] == answers
