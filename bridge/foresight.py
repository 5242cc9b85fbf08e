"""Foresight: while the client prepares its next query, the server answers the one it expects.

An HA round asks the same of every round's new scheduler: after
``scheduler.calculate_node_imbalance`` comes ``scheduler.score_best_balancing_migration_candidates``
on the same handle, with the same candidates as last round (the same guests on the same nodes).
The client renders those candidates once it has the imbalance (0.16 ms at 4 nodes x 300 guests,
JSON::PP), and the server used to wait for them; with foresight it scores them meanwhile (0.4 ms)
and, when they arrive, compares them (15 us) and answers. What pays for it: a 4 x 300 round whose
usage changed took 0.88-0.91 times as long (dynamic 1.87 -> 1.71 ms, static 1.68 -> 1.50; 8 x 500
0.88; ``benchmarks/ha_round_sizes.pl`` against the tree before). The cost: when the candidates
changed (a guest moved), the wrong guess delays their scoring by up to its 0.4 ms.

What it assumes, and why the answers stay the same byte for byte:

* A one-step predictor: per method, the query that followed its last call on the same handle
  (method, and params apart from the handle as the strict decoder gave them). A call followed by
  anything else forgets what followed it.
* It guesses only the read-only queries of :data:`FORESEEABLE`, only from a message of at most
  :data:`FORESEE_UP_TO` bytes (a wrong guess delays the next request by the time it took), never on
  a handle with candidates staged (a call would drop them), and holds one answer at most.
* The held answer serves the next call only, when that call is the guessed query: the same method
  on the same handle, params of the same struct whose JSON is the same bytes apart from the handle.
  Any other call drops it, so nothing can change the scheduler between the guess and its use (no
  version to keep). The reply is made from it as from a computed result (the same id, batch place).
* A guess that raises is dropped: the real call then raises the same error and answers it.
* A guess changes no state: scoring only reads the scheduler; the usage's cache of node views it
  fills is the one the real call fills, for the same state (and any change clears it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from . import phases
from .registry import MethodSpec
from .schedulers import State

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

#: Largest message (bytes) whose query is guessed again: a guess then takes about 1 ms at most
#: (4 x 300's candidates, 24 KB: 0.4 ms); 48 x 10000's (MBs, 100 ms and more) are never guessed.
FORESEE_UP_TO = 64 << 10


@dataclass(frozen=True, slots=True)
class Query:
    """A foreseeable call apart from its handle: the method, the params' struct ``kind`` and their
    JSON with the handle blank (``key``); ``template``, those params, to guess the call again."""

    spec: MethodSpec
    kind: type
    key: bytes
    template: Any = field(compare=False)

    @classmethod
    def of(cls, spec: MethodSpec, params: Any) -> Query:
        template = msgspec.structs.replace(params, scheduler="")
        return cls(spec, type(params), msgspec.json.encode(template), template)


@dataclass(frozen=True, slots=True)
class Foreseen:
    """The ``result`` of ``query`` on the scheduler ``handle``."""

    query: Query
    handle: str
    result: Any


class Foresight:
    """The predictor and the answer it holds, for :class:`bridge.protocol.Protocol`: it tells
    :meth:`recall` of every call before the call runs, and calls :meth:`foresee` when the server
    would wait. ``call(spec, params)`` runs a call as the protocol does (raising its errors)."""

    def __init__(self, state: State, call: Callable[[MethodSpec, Any], Any]) -> None:
        self._state = state
        self._call = call
        #: Method -> the query that followed its last call, on the same handle.
        self._next: dict[str, Query] = {}
        #: The last call's method and handle (None: not a scheduler's, or not a struct's).
        self._last: tuple[str, str | None] | None = None
        self._guessed = True  # whether foresee() came since the last call
        self._held: Foreseen | None = None
        #: Size (bytes) of the message being answered; the protocol sets it.
        self.message_bytes = 0

    def recall(self, spec: MethodSpec, params: Any) -> Foreseen | None:
        """Note a call of ``spec`` with ``params`` (as decoded, before any check) and return the
        answer held for it, if any; the held answer is dropped either way."""
        held, self._held = self._held, None
        handle = params.scheduler if spec.stateful and isinstance(params, msgspec.Struct) else None
        query = self._query(spec, params) if handle is not None else None
        if self._last is not None:
            method, last_handle = self._last
            if query is not None and handle == last_handle:
                self._next[method] = query
            else:
                self._next.pop(method, None)
        self._last, self._guessed = (spec.name, handle), False
        if held is None or held.handle != handle or held.query != query:
            return None
        if phases.timing:
            phases.mark("foreseen")
        return held

    def _query(self, spec: MethodSpec, params: Any) -> Query | None:
        if spec.name not in FORESEEABLE or self.message_bytes > FORESEE_UP_TO:
            return None
        return Query.of(spec, params)

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
        try:
            result = self._call(query.spec, msgspec.structs.replace(query.template, scheduler=handle))
        except Exception:  # the real call, should it come, answers the error
            return
        self._held = Foreseen(query, handle, result)
