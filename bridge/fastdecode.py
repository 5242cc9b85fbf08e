"""Typed decoding of a request that carries expanded candidates: the fast way in for a big call.

orjson turns 100k expanded candidates into 200k dicts (some 80-120 ms for a 16 MB request), and
:mod:`bridge.fastpath` then reads them column by column. msgspec decodes the same bytes straight
into small typed records, checking each value's type and bounds as it parses, in about half the
time and memory; :func:`decode_candidate_request` turns those records into
:class:`core.CandidateColumns`, which the method surface takes as it takes the fast path's.

Like :mod:`bridge.fastpath` this is a filter, not a second schema. It takes a message only when
it is sure the orjson path would read the same request and the models would accept its
candidates as they are: a single request object, of a method that takes candidates, with named
params, whose ``candidates`` is a non-empty list of expanded candidates whose every value is in
range. Everything else in the message (the envelope, ``usage``, ``limit``, ...) is decoded by
orjson, as on the usual path, and checked by the models. Any doubt (a value out of range, a byte
count written as ``2.0``, an unknown param, invalid JSON, deep nesting, ...) gives None, and the
caller decodes the message as usual, so every error a client sees comes from the usual path.
``tests/test_fastdecode.py`` holds the two paths together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import numpy as np
import orjson

from core import CandidateColumns
from core.limits import MAX_BYTES, MAX_CORES

from .limits import TooDeep, decode

#: The nesting of expanded candidates in a request: envelope, params, list, candidate, stats.
CANDIDATE_DEPTH = 5

# The models' scalar types (bridge.models: Name, Cores, Bytes) as msgspec constraints. Cores
# accept integers and refuse booleans in both; a byte count written as a float (``2.0``), which
# the models accept as the integer it holds, is refused here and so takes the usual path.
_Name = Annotated[str, msgspec.Meta(min_length=1)]
_Cores = Annotated[float, msgspec.Meta(ge=0, le=MAX_CORES)]
_Bytes = Annotated[int, msgspec.Meta(ge=0, le=MAX_BYTES)]


class _Stats(msgspec.Struct, gc=False):
    """:class:`bridge.models.DynamicStats` (unknown keys ignored, as there)."""

    cpu: _Cores
    maxcpu: _Cores
    mem: _Bytes
    maxmem: _Bytes


class _Candidate(msgspec.Struct, gc=False, rename={"source_node": "source-node", "target_node": "target-node"}):
    """:class:`bridge.models.Candidate`. ``leader`` is kept only to see whether the first record
    has one: then the models read the list as compact bundles."""

    sid: _Name
    source_node: _Name
    target_node: _Name
    stats: _Stats
    leader: Any = msgspec.UNSET


def _params_type(names: Iterable[str]) -> type[msgspec.Struct]:
    """Named params: ``candidates`` typed, every other known name as raw JSON, unknown names
    refused (the models refuse them, with the message a client should see)."""
    others = [(name, msgspec.Raw, msgspec.UNSET) for name in sorted(set(names) - {"candidates"})]
    return msgspec.defstruct("_Params", [("candidates", list[_Candidate]), *others], forbid_unknown_fields=True)


class CandidateRequestDecoder:
    """Decodes requests of the methods in ``methods``, each with the names of its params."""

    def __init__(self, methods: Mapping[str, frozenset[str]]) -> None:
        self.methods = dict(methods)
        envelope = msgspec.defstruct(
            "_Request",
            [
                ("method", str),
                ("params", _params_type(frozenset().union(*self.methods.values()))),
                ("jsonrpc", msgspec.Raw, msgspec.UNSET),
                ("id", msgspec.Raw, msgspec.UNSET),
            ],
            forbid_unknown_fields=True,
        )
        self._decoder = msgspec.json.Decoder(envelope)
        self._held: msgspec.Struct | None = None

    def decode(self, message: bytes, max_depth: int) -> dict | None:
        """The request in ``message`` as orjson would decode it, but with its candidates as
        :class:`core.CandidateColumns`; None when the message is not such a request, or is
        in any doubt (see the module's docstring).

        The decoded records are held until :meth:`release` (or the next call): freeing 100k of
        them takes some 10 ms, better spent after the answer is sent.
        """
        self._held = None
        if max_depth < CANDIDATE_DEPTH or b'"source-node"' not in message:
            return None
        try:
            request = self._held = self._decoder.decode(message)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        candidates = request.params.candidates
        if request.method not in self.methods or not candidates or candidates[0].leader is not msgspec.UNSET:
            return None
        try:
            decoded = {"method": request.method, **_raw_members(request, max_depth - 1)}
            params = _raw_members(request.params, max_depth - 2)
        except (orjson.JSONDecodeError, TooDeep):  # the usual path says where, in the whole message
            return None
        if not params.keys() <= self.methods[request.method]:
            # A param of another method: the models name each such param in the message's order,
            # which the records do not keep.
            return None
        decoded["params"] = {**params, "candidates": candidate_columns(candidates)}
        return decoded

    def release(self) -> None:
        """Free the records of the last request decoded (see :meth:`decode`)."""
        self._held = None


def _raw_members(record: msgspec.Struct, max_depth: int) -> dict[str, Any]:
    """The raw JSON members of ``record`` that were present, decoded as the usual path would
    (``max_depth``: the nesting left at their level)."""
    return {
        name: decode(bytes(value), max_depth)
        for name, value in zip(record.__struct_fields__, msgspec.structs.astuple(record))
        if type(value) is msgspec.Raw
    }


_SID, _SOURCE, _TARGET, _STATS = map(attrgetter, ("sid", "source_node", "target_node", "stats"))
_CPU, _MEM = attrgetter("cpu"), attrgetter("mem")


class FieldView(Sequence[str]):
    """One name field of the decoded candidates, read in place: the engine maps a column over
    its node index once and looks at a few rows' sids, so a list of 100k names of its own would
    cost more than it saves. Iterating maps the field's getter over the records, in C."""

    __slots__ = ("_records", "_get")

    def __init__(self, records: list[_Candidate], get: Callable[[_Candidate], str]) -> None:
        self._records = records
        self._get = get

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, row):  # a row (an int), as the engine asks; a slice gives a list
        if isinstance(row, slice):
            return list(map(self._get, self._records[row]))
        return self._get(self._records[row])

    def __iter__(self) -> Iterator[str]:
        return map(self._get, self._records)


def candidate_columns(candidates: list[_Candidate]) -> CandidateColumns:
    """Decoded candidates as columns: cpu as float64 cores (-0.0 as 0.0, as the models give it),
    mem as int64 bytes, the names as views of the records (:class:`FieldView`)."""
    stats = list(map(_STATS, candidates))
    cpu = np.fromiter(map(_CPU, stats), dtype=np.float64, count=len(stats)) + 0.0
    mem = np.fromiter(map(_MEM, stats), dtype=np.int64, count=len(stats))
    sids, sources, targets = (FieldView(candidates, get) for get in (_SID, _SOURCE, _TARGET))
    return CandidateColumns(sids, sources, targets, cpu, mem)
