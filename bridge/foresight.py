"""Foresight: while the client prepares its next query, the server answers the one it expects.

An HA round asks the same of every round's new scheduler: after
``scheduler.calculate_node_imbalance`` comes ``scheduler.score_best_balancing_migration_candidates``
on the same handle, with the same candidates as last round (the same guests on the same nodes).
The client renders those candidates once it has the imbalance (0.16 ms at 4 nodes x 300 guests,
JSON::PP), and the server used to wait for them; with foresight it scores them meanwhile (0.2 ms in
the running server) and, when they arrive, compares their bytes with the ones it guessed and
answers: 45 us in process at 4 x 300, against 420 to compute the call. What pays for it: a 4 x 300
round whose usage changed took 0.88-0.91 times as long (``benchmarks/ha_round_sizes.pl`` against
the tree before); comparing bytes rather than decoded params took the reused call from 112 to 51 us,
and guessing on the params as decoded when they came, rather than decoding the guessed bytes, took
a guess from 340 to 216 us, so that the request mostly finds its answer ready (the round's scoring
phase 0.39 -> 0.29 ms). The cost: when the candidates changed (a guest moved), the wrong guess
delays their scoring by up to its 0.2-0.4 ms.

What it assumes, and why the answers stay the same byte for byte:

* A one-step predictor: per method, the query that followed its last call on the same handle (its
  method, and the message that carried it). A call followed by anything else forgets what
  followed it.
* The guess is a request: the query's params JSON as it came, with the handle's string replaced by
  the handle of the last call (when the params are a JSON object holding the handle's member
  once, as the member the decoder keeps; otherwise there is no guess). Its params are the query's
  as the strict decoder gave them, on the new handle: the handle's string is the one token that
  differs (:meth:`Query.params_on`). The same method with the same params on the same state gives
  the same answer.
* It guesses only the read-only queries of :data:`FORESEEABLE`, only from a message of at most
  :data:`FORESEE_UP_TO` bytes (a wrong guess delays the next request by the time it took), never on
  a handle with candidates staged (a call would drop them), and holds one answer at most.
* The held answer serves the next message only, when that message is one request of the guessed
  method whose params are the guessed bytes (its envelope taken as any request's); any call drops
  it, so nothing can change the scheduler between the guess and its use. The reply is made from
  it as from a computed result, through the same dispatch (the same id, the same form).
* A guess that raises is dropped: the real call then raises the same error and answers it.
* A guess changes no state: scoring only reads the scheduler; the usage's cache of node views it
  fills is the one the real call fills, for the same state (and any change clears it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from . import phases
from .registry import MethodSpec
from .schedulers import State
from .wire import REFUSED, MessageDecoder

#: The queries a guess may compute: they read a scheduler and change nothing.
FORESEEABLE = frozenset(
    f"scheduler.{name}"
    for name in (
        "calculate_node_imbalance",
        "score_best_balancing_migration_candidates",
        "score_best_balancing_migration_candidates_topsis",
        "select_best_balancing_migration",
        "select_best_balancing_migration_topsis",
    )
)

#: Largest message (bytes) whose query is guessed again (4 x 300's candidates, 24 KB, guessed in
#: 0.3 ms; 48 x 10000's, MBs and 100 ms, never). This caps the candidates, not the cluster: a query
#: of this size on many nodes takes longer (1.5-2.7 ms on 48 x 10000, 3-10 ms on 1000 nodes), and a
#: wrong guess delays the next request by that much, once: the time of a query the client sent.
FORESEE_UP_TO = 64 << 10

#: How a handle's member starts in params sent by name.
_HANDLE_MEMBER = b'"scheduler":'


class _Handle(msgspec.Struct):
    """The handle of params sent by name, as the strict decoder keeps it (of a member written more
    than once, the last; any other member skipped)."""

    scheduler: Any = None


_KEPT_HANDLE = msgspec.json.Decoder(_Handle)


@dataclass(slots=True)
class Query:
    """A foreseeable call as it came: its method, its scheduler ``handle``, its ``params`` as the
    strict decoder gave them (the call's checks then turn their candidates into columns, which the
    engine only reads) and the ``message`` that carried it (one request, or a batch: then it is not
    guessed)."""

    spec: MethodSpec
    handle: str
    params: Any
    message: bytes
    #: The params' JSON before and after the handle's string, once read (None: not read yet;
    #: False: they cannot be told, as in a batch, or params by position).
    around: tuple[bytes, bytes] | bool | None = field(default=None)

    def params_on(self, handle: str, requests: msgspec.json.Decoder) -> bytes | None:
        """The params' JSON as they came, on ``handle`` instead of their own (``requests``: the
        decoder of the method's requests with their params as JSON); None if they cannot be told.

        They decode to :attr:`params` on ``handle``: the handle's string is the one token that
        differs, as its member is found once in an object the strict decoder took, whose records
        take no key but their own fields (so no other key, and no string, holds these bytes), and
        it is the member the decoder keeps (none written otherwise overrides it)."""
        if self.around is None:
            self.around = self._around(requests)
        if not self.around:
            return None
        before, after = self.around
        return before + orjson.dumps(handle) + after

    def _around(self, requests: msgspec.json.Decoder) -> tuple[bytes, bytes] | bool:
        try:
            params = requests.decode(self.message).params
        except REFUSED:
            return False
        member = _HANDLE_MEMBER + orjson.dumps(self.handle)
        text = b"" if params is msgspec.UNSET else b"" + params
        if text[:1] != b"{" or text.count(member) != 1:
            return False
        at = text.index(member) + len(_HANDLE_MEMBER)
        before, after = text[:at], text[at + len(member) - len(_HANDLE_MEMBER) :]
        # The member found must be the one the decoder keeps, not one a later one overrides (the
        # same handle written otherwise: spaced, escaped): null in its place must be what it keeps.
        if _KEPT_HANDLE.decode(before + b"null" + after).scheduler is not None:
            return False
        return before, after


@dataclass(frozen=True, slots=True)
class Foreseen:
    """The ``result`` of ``query``'s method with the JSON ``params`` (``query``'s on ``handle``)."""

    query: Query
    handle: str
    params: bytes
    result: Any


class Foresight:
    """The predictor and the answer it holds, for :class:`bridge.protocol.Protocol`: it tells
    :meth:`request` of every message and :meth:`recall` of every call before the call runs, and
    calls :meth:`foresee` when the server would wait. ``call(spec, params)`` runs a call as the
    protocol does (raising its errors); ``messages`` is its decoder."""

    def __init__(self, state: State, call: Callable[[MethodSpec, Any], Any], messages: MessageDecoder) -> None:
        self._state = state
        self._call = call
        self._messages = messages
        #: Method -> the query that followed its last call, on the same handle.
        self._next: dict[str, Query] = {}
        #: The last call's method and handle (None: not a scheduler's, or not a struct's).
        self._last: tuple[str, str | None] | None = None
        self._guessed = True  # whether foresee() came since the last call
        self._held: Foreseen | None = None
        self._matched: Any = None  # the params (a Raw) of the request :meth:`request` matched
        #: The message being answered (:meth:`request`).
        self.message = b""

    def request(self, message: bytes) -> Any:
        """Note ``message`` as the one being answered; return it as a request struct, its params
        as JSON, if it is the held answer's query: one request of its method whose params are the
        guessed JSON byte for byte (so they decode to the guessed params); else None (the message
        is then decoded as any other)."""
        self.message = message
        held = self._held
        if held is None:
            return None
        try:
            request = self._messages.as_sent(held.query.spec.name).decode(message)
        except REFUSED:
            return None
        if request.params is msgspec.UNSET or b"" + request.params != held.params:
            return None
        self._matched = request.params
        return request

    def recall(self, spec: MethodSpec, params: Any) -> Foreseen | None:
        """Note a call of ``spec`` with ``params`` (as decoded, before any check) and return the
        answer held for it: when its params are those :meth:`request` matched. The held answer
        is dropped either way."""
        held, self._held = self._held, None
        matched, self._matched = self._matched, None
        if held is not None and params is matched:
            handle, query = held.handle, held.query
        else:
            held = None
            handle = params.scheduler if spec.stateful and isinstance(params, msgspec.Struct) else None
            query = self._query(spec, handle, params)
        if self._last is not None:
            method, last_handle = self._last
            if query is not None and handle == last_handle:
                self._next[method] = query
            else:
                self._next.pop(method, None)
        self._last, self._guessed = (spec.name, handle), False
        if held is not None and phases.timing:
            phases.mark("foreseen")
        return held

    def _query(self, spec: MethodSpec, handle: Any, params: Any) -> Query | None:
        if spec.name not in FORESEEABLE or not isinstance(handle, str) or len(self.message) > FORESEE_UP_TO:
            return None
        return Query(spec, handle, params, self.message)

    def foresee(self) -> None:
        """Compute and hold the answer to the query expected after the last call, if one is
        expected (once per call; the server calls it when it has nothing to read)."""
        if self._guessed:
            return
        self._guessed = True
        method, handle = self._last
        query = self._next.get(method)
        if query is None or handle is None or handle in self._state.staged:
            return
        name = query.spec.name
        params = query.params_on(handle, self._messages.as_sent(name))
        if params is None:
            return
        try:
            result = self._call(query.spec, msgspec.structs.replace(query.params, scheduler=handle))
        except Exception:  # the real call, should it come, answers the error
            return
        self._held = Foreseen(query, handle, params, result)
