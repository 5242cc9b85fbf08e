"""Typed decoding of the big requests: the fast way in for candidates and ``scheduler.apply``.

orjson turns 100k expanded candidates into 200k dicts (some 80-120 ms for a 16 MB request), and
:mod:`bridge.fastpath` then reads them column by column. msgspec decodes the same bytes straight
into small typed records, checking each value's type and bounds as it parses, in about half the
time and memory. Three kinds of request are decoded so:

* expanded candidates, as :class:`core.CandidateColumns` (:func:`candidate_columns`);
* compact bundles, as :class:`core.CompactColumns` (:func:`compact_columns`) whose target lists
  are kept as JSON text and decoded once per distinct text (an HA round's 2000 bundles repeat
  some 16 lists);
* ``scheduler.apply``, alone or in a batch (as the Perl client sends its journal), its mutations
  as :class:`TypedMutations`: records tagged by their method (each entry's first element), a
  resource's own record kept as JSON text (a round's 2000 guests repeat a few dozen), which
  :func:`bridge.mutations.prepared` turns into the engine's arguments.

Like :mod:`bridge.fastpath` this is a filter, not a second schema. It takes a message only when
it is sure the orjson path would read the same request and the models would accept the typed
part as it is: requests of the methods that take it, with named params, whose typed part has
every value in range and no key the records do not know (an ignored key could nest deeper than
the depth limit allows, which only the usual path measures). Everything else in the message (the
envelope, ``usage``, ``limit``, ``scheduler``, ...) is decoded by orjson, as on the usual path,
and checked by the models. Any doubt (a value out of range, a byte count written as ``2.0``,
``running`` written as ``1``, an unknown key or param, invalid JSON, ...) gives None, and the
caller decodes the message as usual, so every error a client sees comes from the usual path.
``tests/test_fastdecode.py`` and ``tests/test_fastdecode_apply.py`` hold the paths together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any, ClassVar

import msgspec
import numpy as np
import orjson

from ..core import CandidateColumns, CompactColumns
from ..core.candidates import RepeatedLists
from ..core.limits import MAX_BYTES, MAX_CORES
from .limits import TooDeep, decode

#: The nesting of candidates in a request: envelope, params, list, candidate, stats (or a
#: bundle's lists).
CANDIDATE_DEPTH = 5
#: The nesting of ``scheduler.apply`` in a batch: batch, envelope, params, mutations, entry,
#: record, stats.
APPLY_DEPTH = 7

#: What msgspec raises for JSON it cannot decode as the type asked for.
_REFUSED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)

# The models' scalar types (bridge.models: Name, Cores, Bytes, NodeCores, NodeBytes) as msgspec
# constraints. Cores accept integers and refuse booleans in both; a byte count or core count
# written as a float (``2.0``), which the models accept as the integer it holds, is refused here
# and so takes the usual path.
_Name = Annotated[str, msgspec.Meta(min_length=1)]
_Cores = Annotated[float, msgspec.Meta(ge=0, le=MAX_CORES)]
_Bytes = Annotated[int, msgspec.Meta(ge=0, le=MAX_BYTES)]
_NodeCores = Annotated[int, msgspec.Meta(gt=0, le=int(MAX_CORES))]
_NodeBytes = Annotated[int, msgspec.Meta(gt=0, le=MAX_BYTES)]


class _Record(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    """A typed record: unknown keys refused (the models ignore them, but only the usual path
    measures how deep they nest)."""


class ResourceStats(_Record):
    """:class:`bridge.models.DynamicStats`."""

    cpu: _Cores
    maxcpu: _Cores
    mem: _Bytes
    maxmem: _Bytes


class _Candidate(_Record, rename={"source_node": "source-node", "target_node": "target-node"}):
    """:class:`bridge.models.Candidate` (with no ``leader``: the models read a list whose first
    record has one as bundles)."""

    sid: _Name
    source_node: _Name
    target_node: _Name
    stats: ResourceStats


class _Bundle(_Record):
    """:class:`bridge.models.CompactCandidate`, its ``nodes`` as JSON text: the lists repeat, and
    each distinct text is decoded (and checked) once, by :func:`compact_columns`."""

    leader: _Name
    resources: list[_Name]
    nodes: msgspec.Raw


def _params_type(names: Iterable[str], candidate: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """Named params: ``candidates`` typed, every other known name as raw JSON, unknown names
    refused (the models refuse them, with the message a client should see)."""
    others = [(name, msgspec.Raw, msgspec.UNSET) for name in sorted(set(names) - {"candidates"})]
    return msgspec.defstruct("_Params", [("candidates", list[candidate]), *others], forbid_unknown_fields=True)


def _request_type(params: type) -> type[msgspec.Struct]:
    """A request object with typed ``params``; unknown members refused (the protocol names them)."""
    return msgspec.defstruct(
        "_Request",
        [
            ("method", str),
            ("params", params),
            ("jsonrpc", msgspec.Raw, msgspec.UNSET),
            ("id", msgspec.Raw, msgspec.UNSET),
        ],
        forbid_unknown_fields=True,
    )


class TypedRequestDecoder:
    """Decodes the big requests (see the module's docstring): those of the methods in
    ``methods`` (each with the names of its params) that carry candidates, and
    ``scheduler.apply``."""

    def __init__(self, methods: Mapping[str, frozenset[str]]) -> None:
        self.methods = dict(methods)
        names = frozenset().union(*self.methods.values())
        self._expanded = msgspec.json.Decoder(_request_type(_params_type(names, _Candidate)))
        self._compact = msgspec.json.Decoder(_request_type(_params_type(names, _Bundle)))
        self._apply = msgspec.json.Decoder(list[_ApplyRequest] | _ApplyRequest)
        self._held: Any = None

    def decode(self, message: bytes, max_depth: int) -> dict | list | None:
        """The request (or batch) in ``message`` as orjson would decode it, but with its
        candidates as :class:`core.CandidateColumns` or :class:`core.CompactColumns`, or its
        mutations as :class:`TypedMutations`; None when the message is not such a request, or
        is in any doubt (see the module's docstring).

        The decoded records are held until :meth:`release` (or the next call): freeing 100k of
        them takes some 10 ms, better spent after the answer is sent.
        """
        self._held = None
        # Each kind is tried when its mark is in the message (a name may hold any text).
        decoded = None
        if b'"source-node"' in message:
            decoded = self._candidates(self._expanded, message, max_depth)
        if decoded is None and b'"leader"' in message:
            decoded = self._candidates(self._compact, message, max_depth)
        if decoded is None and b'"scheduler.apply"' in message:
            decoded = self._mutations(message, max_depth)
        return decoded

    def release(self) -> None:
        """Free the records of the last request decoded (see :meth:`decode`)."""
        self._held = None

    def _candidates(self, decoder: msgspec.json.Decoder, message: bytes, max_depth: int) -> dict | None:
        if max_depth < CANDIDATE_DEPTH:
            return None
        try:
            request = self._held = decoder.decode(message)
        except _REFUSED:
            return None
        candidates = request.params.candidates
        if request.method not in self.methods or not candidates:
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
        columns = candidate_columns(candidates) if type(candidates[0]) is _Candidate else compact_columns(candidates)
        if columns is None:
            return None
        decoded["params"] = {**params, "candidates": columns}
        return decoded

    def _mutations(self, message: bytes, max_depth: int) -> dict | list | None:
        if max_depth < APPLY_DEPTH:
            return None
        try:
            requests = self._held = self._apply.decode(message)
        except _REFUSED:
            return None
        batch = type(requests) is list
        if not batch:
            requests = [requests]
        depth = max_depth - 1 if batch else max_depth  # the nesting left at a request's level
        decoded = []
        for index, request in enumerate(requests):
            source = _Source(message, max_depth, (index, "params", "mutations") if batch else ("params", "mutations"))
            try:
                decoded.append(_apply_request(request, depth, source))
            except (orjson.JSONDecodeError, TooDeep):  # the usual path says where, in the whole message
                return None
        if not decoded or None in decoded:  # an empty batch: the usual path answers it
            return None
        return decoded if batch else decoded[0]


def _raw_members(record: msgspec.Struct, max_depth: int) -> dict[str, Any]:
    """The raw JSON members of ``record`` that were present, decoded as the usual path would
    (``max_depth``: the nesting left at their level)."""
    return {
        name: decode(bytes(value), max_depth)
        for name, value in zip(record.__struct_fields__, msgspec.structs.astuple(record))
        if type(value) is msgspec.Raw
    }


# -- expanded candidates --------------------------------------------------------------------------

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


# -- compact bundles ------------------------------------------------------------------------------

_LEADER, _RESOURCES, _NODES = map(attrgetter, ("leader", "resources", "nodes"))
_NAME_LIST = msgspec.json.Decoder(tuple[_Name, ...])


def compact_columns(bundles: list[_Bundle]) -> CompactColumns | None:
    """Decoded bundles as columns, their target lists as :class:`core.candidates.RepeatedLists`
    keyed by their JSON text (equal texts are equal lists); None if a target list is not a list
    of names."""
    keys = list(map(bytes, map(_NODES, bundles)))
    try:
        lists = {key: _NAME_LIST.decode(key) for key in dict.fromkeys(keys)}
    except _REFUSED:
        return None
    return CompactColumns(list(map(_LEADER, bundles)), list(map(_RESOURCES, bundles)), RepeatedLists(keys, lists))


# -- scheduler.apply ------------------------------------------------------------------------------
# A mutation ``[method, args...]`` is a record tagged by its method, the first element; its args
# are typed as the models type the single call's params (bridge.models.MUTATIONS). Methods of both
# modes are here, since the handle's mode is not known while decoding: add_node's second arg is
# a static node's core count or a dynamic node's stats, and its third a static node's memory.
# bridge.mutations.prepared takes the records when they are all of the handle's mode.


class StaticStats(_Record):
    """:class:`bridge.models.StaticStats`."""

    maxcpu: _Cores
    maxmem: _Bytes


class NodeStats(_Record):
    """:class:`bridge.models.DynamicNodeStats`."""

    cpu: _Cores
    maxcpu: _NodeCores
    mem: _Bytes
    maxmem: _NodeBytes


_PLACED = {"current_node": "current-node", "target_node": "target-node"}


class StaticPlaced(_Record, rename=_PLACED):
    """:class:`bridge.models.StaticService`, ``running`` as a JSON boolean only."""

    stats: StaticStats
    running: bool
    current_node: _Name
    target_node: _Name | None = None


class DynamicPlaced(_Record, rename=_PLACED):
    """:class:`bridge.models.DynamicResource`, ``running`` as a JSON boolean only."""

    stats: ResourceStats
    running: bool
    current_node: _Name
    target_node: _Name | None = None


class _Mutation(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True, gc=False):
    """``[method, args...]``: exactly the args (forbid_unknown_fields refuses more)."""


class AddNode(_Mutation, tag="add_node"):
    nodename: _Name
    maxcpu_or_stats: _NodeCores | NodeStats  # static: maxcpu; dynamic: the stats
    maxmem: _NodeBytes | msgspec.UnsetType = msgspec.UNSET  # static only


class RemoveNode(_Mutation, tag="remove_node"):
    nodename: str  # removals take any string, even an empty one


class AddService(_Mutation, tag="add_service"):
    """``add_service``, the service's record as JSON text: equal texts are equal records, so a
    run of adds (a round's guests repeat a few dozen) decodes each distinct one once, with
    ``decoder`` (:func:`_add_records`)."""

    sid: _Name
    record: msgspec.Raw
    decoder: ClassVar[msgspec.json.Decoder] = msgspec.json.Decoder(StaticPlaced)


class AddServiceUsage(_Mutation, tag="add_service_usage_to_node"):
    nodename: _Name
    sid: _Name
    stats: StaticStats


class RemoveServiceUsage(_Mutation, tag="remove_service_usage"):
    sid: str


class AddResource(_Mutation, tag="add_resource"):
    """``add_resource``, the resource's record as JSON text (see :class:`AddService`)."""

    sid: _Name
    record: msgspec.Raw
    decoder: ClassVar[msgspec.json.Decoder] = msgspec.json.Decoder(DynamicPlaced)


class RemoveResource(_Mutation, tag="remove_resource"):
    sid: str


Mutation = AddNode | RemoveNode | AddService | AddServiceUsage | RemoveServiceUsage | AddResource | RemoveResource


class _ApplyParams(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Named params of ``scheduler.apply`` (or of a call with only ``scheduler``, as a batch's
    ``scheduler.free``)."""

    scheduler: msgspec.Raw = msgspec.UNSET
    mutations: list[Mutation] | msgspec.UnsetType = msgspec.UNSET


class _ApplyRequest(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    method: str
    params: _ApplyParams
    jsonrpc: msgspec.Raw = msgspec.UNSET
    id: msgspec.Raw = msgspec.UNSET


@dataclass(frozen=True, slots=True)
class _Source:
    """Where a value is in a message: what :meth:`TypedMutations.json` decodes."""

    message: bytes
    max_depth: int
    path: tuple


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypedMutations:
    """``scheduler.apply``'s mutations as typed records (``entries``); the adds' records as
    JSON text (``texts``, one per add in order) and decoded (``records``, by text); and where
    the mutations are in their message, which :meth:`json` decodes as the usual path does: what
    the models validate when the records are not the handle's mode's."""

    entries: list[Mutation]
    texts: list[bytes]
    records: dict[bytes, StaticPlaced | DynamicPlaced]
    source: _Source

    def json(self) -> list:
        value = decode(self.source.message, self.source.max_depth)
        for key in self.source.path:
            value = value[key]
        return value

    def __repr__(self) -> str:
        return f"TypedMutations({len(self.entries)} entries)"


def _apply_request(request: _ApplyRequest, max_depth: int, source: _Source) -> dict | None:
    """One request of an apply message (``max_depth``: the nesting left at its level) as orjson
    decodes it, its mutations typed; None if they would go to another method, or have records
    the typed path does not take. Raises for a raw member the usual path would refuse (TooDeep,
    JSONDecodeError)."""
    params, scheduler, mutations = {}, request.params.scheduler, request.params.mutations
    if scheduler is not msgspec.UNSET:
        params["scheduler"] = decode(bytes(scheduler), max_depth - 2)
    if mutations is not msgspec.UNSET:
        records = _add_records(mutations)
        if request.method != "scheduler.apply" or records is None:
            return None
        params["mutations"] = TypedMutations(mutations, *records, source)
    return {"method": request.method, **_raw_members(request, max_depth - 1), "params": params}


_ADD_KINDS = frozenset({AddService, AddResource})
_RECORD = attrgetter("record")


def _add_records(entries: list[Mutation]) -> tuple[list[bytes], dict] | None:
    """The texts of the adds' records in order, and each distinct one decoded; None if a record
    is not one the typed path takes (``running`` as a number, an unknown key, ...) or the adds
    are of both modes (the models refuse that list for either). Decoding every distinct text here
    is what checks it: msgspec keeps a JSON text raw without checking it all (its UTF-8, say)."""
    kinds = set(map(type, entries))
    adds = kinds & _ADD_KINDS
    if not adds:
        return [], {}
    if len(adds) > 1:
        return None
    (kind,) = adds
    run = entries if len(kinds) == 1 else [entry for entry in entries if type(entry) is kind]
    texts = list(map(bytes, map(_RECORD, run)))
    try:
        return texts, {text: kind.decoder.decode(text) for text in dict.fromkeys(texts)}
    except _REFUSED:
        return None
