"""Foresight against requests written every which way (review): the envelope (ids of every JSON
type, escapes, whitespace, members in any order or twice) and the params (the handle's member twice,
spaced, escaped; handles that need escapes or equal a node's name or a guest's sid), the server idle
at any point. The guess answers only bytes equal to those it guessed; every answer is a server's
without foresight, byte for byte."""

from __future__ import annotations

import msgspec
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crs_bridge.bridge import foresight
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State
from crs_bridge.client import BridgeClient
from tests.test_protocol_foresight import IMBALANCE, SCORE, candidates, usage

#: Handles, among them names that need escapes and names of nodes and guests.
HANDLES = ["a", "n1", "vm:101", 'q"\\/\u00e9\u2028', "scheduler"]
METHODS = [
    SCORE,
    "scheduler.score_best_balancing_migration_candidates_topsis",
    "scheduler.select_best_balancing_migration",
    "scheduler.select_best_balancing_migration_topsis",
]
#: ids as written: every JSON type, big and float numbers, escapes.
IDS = [b"7", b"-0", b"7.0", b"7e0", b"-0.0", b"18446744073709551616", b"-9223372036854775809", b"1e400", b"true",
       b"null", b'"x"', b'"\\u00e9\\n"', b"[1]", b"{}", None]  # fmt: skip


def member(key: str, value: bytes) -> bytes:
    return orjson.dumps(key) + b":" + value


def handle_members(handle: str, form: str, other: str) -> list[bytes]:
    """The handle's member(s) as written in ``form`` (``other``: another handle some forms name)."""
    text, another = orjson.dumps(handle), orjson.dumps(other)
    escaped = b'"' + b"".join(b"\\u%04x" % ord(c) for c in handle) + b'"' if handle.isascii() else text
    return {
        "plain": [b'"scheduler":' + text],
        "spaced": [b'"scheduler" : ' + text],
        "escaped value": [b'"scheduler":' + escaped],
        "escaped key": [b'"sch\\u0065duler":' + text],
        "twice, the later spaced": [b'"scheduler":' + text, b'"scheduler" : ' + text],
        "twice, the later escaped": [b'"scheduler":' + text, b'"scheduler":' + escaped],
        "twice, the earlier another": [b'"scheduler":' + another, b'"scheduler":' + text],
        "twice, the later another": [b'"scheduler":' + text, b'"scheduler":' + another],
        "twice, the later another spaced": [b'"scheduler":' + text, b'"scheduler" : ' + another],
        "twice alike": [b'"scheduler":' + text, b'"scheduler":' + text],
    }[form]


#: The forms of the handle's member(s); those a decoder reads otherwise than they look, twice.
FORMS = [
    "plain",
    "spaced",
    "escaped value",
    "escaped key",
    "twice, the later spaced",
    "twice, the later escaped",
    "twice, the earlier another",
    "twice, the later another",
    "twice, the later another spaced",
    "twice alike",
]
TRICKY_FORMS = FORMS[4:]


def query_text(
    method: str, handle: str, form: str, other: str, ident: bytes | None, envelope: str, trailing: bytes
) -> bytes:
    params = {"candidates": candidates(), "limit": 2} if "score" in method else {"candidates": candidates(12)}
    rest = [member(key, orjson.dumps(value)) for key, value in params.items()]
    handles = handle_members(handle, form, other)
    body = b"{" + b",".join([handles[0], *rest, *handles[1:]]) + b"}"
    members = [member("jsonrpc", b'"2.0"'), member("method", orjson.dumps(method)), b'"params":' + body + trailing]
    if ident is not None:
        members.insert(1, member("id", ident))
    if envelope == "reversed":
        members.reverse()
    elif envelope == "escaped":
        members[0] = b'"json\\u0072pc":"2\\u002e0"'
    elif envelope == "method twice":
        members.insert(0, member("method", b'"scheduler.free"'))
    elif envelope == "jsonrpc twice":
        members.append(member("jsonrpc", b'"2.0"'))
    separator = b", \n" if envelope == "spaced" else b","
    return b"{" + separator.join(members) + b"}"


@st.composite
def steps(draw, form: str, method: str, handles: list[str]) -> tuple[list[bytes], bool]:
    """A round on a handle (mostly): the handle made anew, its imbalance, the query (mostly in the
    run's own form, its envelope written any way), each with whether the server then idles. The
    run's ``handles``: the first is the other handle that some forms name."""
    handle = draw(st.sampled_from(handles))
    texts = []
    if draw(st.booleans()):
        texts += [
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "scheduler.free", "params": {"scheduler": handle}}),
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "scheduler.new",
                    "params": {"mode": "dynamic", "scheduler": handle},
                }
            ),
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "scheduler.apply",
                    "params": {"scheduler": handle, "mutations": usage(draw(st.sampled_from([0.0, 0.5, 1.0, 1.5])))},
                }
            ),
        ]
    texts.append(orjson.dumps({"jsonrpc": "2.0", "id": 4, "method": IMBALANCE, "params": {"scheduler": handle}}))
    if draw(st.integers(0, 3)):
        ident = draw(st.sampled_from(IDS))
        envelope = draw(
            st.sampled_from(["plain", "plain", "reversed", "escaped", "spaced", "method twice", "jsonrpc twice"])
        )
        trailing = draw(st.sampled_from([b"", b"", b" ", b"\n\t"]))
        own = draw(st.integers(0, 4))
        text = query_text(
            method if own else draw(st.sampled_from(METHODS)),
            handle,
            form if own else draw(st.sampled_from(FORMS)),
            handles[0],
            ident,
            envelope,
            trailing,
        )
        texts.append(draw(st.sampled_from([b"", b" ", b"\n"])) + text + draw(st.sampled_from([b"", b"\r\n"])))
    return [(text, draw(st.booleans())) for text in texts]


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=300)
@given(st.data())
def test_requests_written_any_way_are_answered_as_without_foresight(data):
    form, method = data.draw(st.sampled_from(FORMS + TRICKY_FORMS)), data.draw(st.sampled_from(METHODS))
    foreseeing, reference = Protocol(State(), foresight=True), Protocol(State())
    for number, handle in enumerate(HANDLES):  # each cluster its own usage: each answers otherwise
        new = {"mode": "dynamic", "scheduler": handle}
        mutations = {"scheduler": handle, "mutations": usage(0.25 * number)}
        for text in (
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "scheduler.new", "params": new}),
            orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "scheduler.apply", "params": mutations}),
        ):
            foreseeing.handle(text), reference.handle(text)
    handles = data.draw(st.lists(st.sampled_from(HANDLES), min_size=2, max_size=3, unique=True))
    for step in data.draw(st.lists(steps(form, method, handles), min_size=2, max_size=10)):
        for text, idle in step:
            assert foreseeing.handle(text) == reference.handle(text), text[:300]
            if idle:
                foreseeing.foresee()


def test_the_server_answers_requests_written_otherwise_as_without_foresight():
    """The real server, in lockstep (it waits, and may guess, after each answer): rounds on two
    handles whose query names its handle, then the other one spaced (the decoder keeps the later)."""
    reference = Protocol(State())
    with BridgeClient([]) as client:

        def send(message: bytes) -> None:
            client.send_raw(message)
            assert client.read_raw()[1] == reference.handle(message), message[:200]

        for number, handle in enumerate(["a", "b"] * 3):
            calls = [
                ("scheduler.free", {"scheduler": handle}),
                ("scheduler.new", {"mode": "dynamic", "scheduler": handle}),
                ("scheduler.apply", {"scheduler": handle, "mutations": usage(0.5 * (number % 2))}),
                (IMBALANCE, {"scheduler": handle}),
            ]
            for method, params in calls[number < 2 :]:  # nothing to free at first
                send(orjson.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}))
            send(query_text(SCORE, handle, "twice, the later another spaced", "a", b"1", "plain", b""))
        assert client.close() == 0


@given(
    form=st.sampled_from(FORMS),
    old=st.sampled_from(HANDLES),
    new=st.sampled_from(HANDLES),
    other=st.sampled_from(HANDLES),
)
def test_the_guessed_bytes_name_the_new_handle_however_the_old_one_was_written(form, old, new, other):
    protocol = Protocol(State(), foresight=True)
    messages = protocol._messages
    message = query_text(SCORE, old, form, other, b"1", "plain", b"")
    first = messages.decode(message, 64)
    query = foresight.Query(protocol.state.methods[SCORE], first.params.scheduler, first.params, message)
    guessed = query.params_on(new, messages.as_sent(SCORE))
    if guessed is None:
        return
    sent = b'{"jsonrpc":"2.0","id":2,"method":"%s","params":%s}' % (SCORE.encode(), guessed)
    assert messages.decode(sent, 64).params == msgspec.structs.replace(first.params, scheduler=new)
