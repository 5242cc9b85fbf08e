"""The wire side of a call: requests decoded into the structs of :mod:`bridge.structs`, the
engine values made of them, and the engine's results in wire form.

:class:`ParamsDecoder` decodes a method's params (JSON) straight into the structs of its params
model, checking every value. Params it refuses go to the models, in one place
(:meth:`ParamsDecoder.from_models`): they accept the lax cases and word every error, and their
values become the same structs. So a method gets one type per param, whichever way the
request came in. Results go out through their result models (:mod:`bridge.results`), which write
the wire's names.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import Any, get_args, get_origin

import msgspec
import numpy as np
from pydantic import TypeAdapter, ValidationError

from ..core import (
    CandidateColumns,
    CompactColumns,
    InvalidInputError,
    NodeStats,
    Resource,
    ResourceStats,
    Scheduler,
    new_scheduler,
)
from ..core.candidates import RepeatedLists, numbered
from . import models as m
from . import records as rec
from .errors import ParamsError
from .limits import ORJSON_MAX_INT, how_to_raise
from .structs import COLUMNS_OF, FIELDS, MODEL_OF, TEXTS, UNBOUNDED, params_structs, struct_of

# -- decoding ---------------------------------------------------------------------------------

#: What msgspec raises for JSON it refuses as the type asked for.
REFUSED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


def _first(decoders: Iterable[msgspec.json.Decoder], data: bytes) -> Any:
    """``data`` decoded by the first of ``decoders`` that takes it; None if every one refuses it."""
    for decoder in decoders:
        try:
            return decoder.decode(data)
        except REFUSED:
            continue
    return None


class ParamsDecoder:
    """The params of one model: decoded strictly from JSON, or else validated by the models."""

    def __init__(self, model: type[m.Params]) -> None:
        self.model = model
        self.kinds = params_structs(model)
        self._decoders = [msgspec.json.Decoder(kind) for kind in self.kinds]
        self._exactly_one = getattr(model, "exactly_one", ())
        #: Params struct -> its fields that hold records with REPEATING fields: (field, record struct,
        #: the record's field).
        self._repeating = {kind: list(_repeating(kind)) for kind in self.kinds}
        #: (record struct, REPEATING field) -> the decoder of the field's text, as a tuple (hashable).
        self._texts = {
            (record, field): msgspec.json.Decoder(tuple[(get_args(TEXTS[record][field])[0], ...)])
            for fields in self._repeating.values()
            for _, record, field in fields
        }

    def decode(self, params: bytes) -> Any:
        """``params`` (JSON) as a struct, or None if the strict decoder refuses them."""
        struct = _first(self._decoders, params)
        return None if struct is None else self.checked(struct)

    def checked(self, params: Any) -> Any:
        """``params`` (a struct) once the checks left after decoding pass it, else None: the model's
        own (exactly one of its ``exactly_one`` fields given), counts that orjson reads as the
        strict decoder does (the lax way reads one beyond 64 bits as a float, and so must this
        server), and the texts of :data:`REPEATING` fields (a list of their records then becomes
        the records' columns)."""
        if self._exactly_one and sum(getattr(params, name) is not None for name in self._exactly_one) != 1:
            return None
        for name in UNBOUNDED.get(type(params), ()):
            count = getattr(params, name)
            if count is not None and count > ORJSON_MAX_INT:
                return None
        columns = []
        for name, record, field in self._repeating.get(type(params), ()):
            records = getattr(params, name)
            if type(records) is list and records and type(records[0]) is record:  # else none, or columns
                rows, texts = numbered([bytes(text) for text in map(attrgetter(field), records)])
                try:
                    lists = list(map(self._texts[record, field].decode, texts))
                except REFUSED:
                    return None
                columns.append((name, COLUMNS_OF[record](records, RepeatedLists(rows, lists))))
        for name, value in columns:  # once every check passed: refused params keep their records
            setattr(params, name, value)
        return params

    def from_models(self, params: dict) -> Any:
        """``params`` (named, decoded JSON) validated by the models, as a struct: the values they
        accept, as they give them (ParamsError with their words if they refuse). The model's
        values become the struct's by msgspec's conversion from attributes (no JSON in between);
        records with :data:`REPEATING` fields become the records' columns here, as
        :meth:`checked` makes them of the structs."""
        try:
            validated = self.model.model_validate(params)
        except ValidationError as exc:
            raise ParamsError.from_validation(exc) from None
        for kind in self.kinds:
            columns = {}
            for name, record, field in self._repeating[kind]:
                records = getattr(validated, name)
                if type(records) is list and records and type(records[0]) is MODEL_OF[record]:
                    rows, distinct = numbered([tuple(getattr(r, field)) for r in records])
                    columns[name] = COLUMNS_OF[record](records, RepeatedLists(rows, distinct))
            values = validated.model_copy(update=dict.fromkeys(columns, []))
            try:
                struct = msgspec.convert(values, kind, from_attributes=True)
            except msgspec.ValidationError:
                continue  # another member of an untaggable union
            for name, value in columns.items():
                setattr(struct, name, value)
            return struct
        raise AssertionError(f"no struct of {self.model.__name__} takes what the model gave")


def _repeating(params: type[msgspec.Struct]) -> Iterator[tuple]:
    """The fields of a params struct that hold lists of records with :data:`REPEATING` fields."""
    for name, kind, *_ in FIELDS[params]:
        (record,) = get_args(kind) if get_origin(kind) is list else (None,)
        for field in TEXTS.get(record, {}):
            yield name, record, field


# -- engine values, and the engine's results as the wire gives them ----------------------------

StaticStats, DynamicStats = struct_of(rec.StaticStats), struct_of(rec.DynamicStats)
Candidate = struct_of(rec.Candidate)


def unsigned(value: float | None) -> float | None:
    """A core count or fraction as the engine takes it: -0.0 as 0.0 (the engine's results and
    echoes would show the sign). Every such value reaches the engine through here."""
    return None if value is None else value + 0.0


def resource_stats(stats: Any) -> ResourceStats:
    """Stats of a resource: static (``maxcpu``/``maxmem``, also the running usage) or dynamic."""
    # unsigned() written out: these fields are never None, and a round places thousands of them.
    if type(stats) is StaticStats:
        cores = stats.maxcpu + 0.0
        return ResourceStats(cores, cores, stats.maxmem, stats.maxmem)
    return ResourceStats(stats.cpu + 0.0, stats.maxcpu + 0.0, stats.mem, stats.maxmem)


def start_stats(stats: Any, mode: str) -> ResourceStats:
    """Stats of a resource to start on a ``mode`` cluster: static takes ``maxcpu``/``maxmem`` of
    either shape; dynamic needs DynamicStats (InvalidInputError otherwise)."""
    if mode == "static":
        return resource_stats(StaticStats(maxcpu=stats.maxcpu, maxmem=stats.maxmem))
    if type(stats) is not DynamicStats:
        raise InvalidInputError("stats", "a dynamic cluster needs DynamicStats {cpu, maxcpu, mem, maxmem}")
    return resource_stats(stats)


def node_stats(stats: Any) -> NodeStats:
    """A dynamic node's measured stats (a node of a snapshot, or add_node's stats)."""
    return NodeStats(unsigned(stats.cpu), stats.maxcpu, stats.mem, stats.maxmem)


def static_node_stats(node: Any) -> NodeStats:
    """A static node's stats (a node of a snapshot, or add_node's params): its ``maxcpu`` cores and
    ``maxmem`` bytes, nothing in use."""
    return NodeStats(0.0, node.maxcpu, 0, node.maxmem)


def placed(record: Any) -> Resource:
    """A resource as add_service/add_resource take it: stats, running, current and target node."""
    return Resource(resource_stats(record.stats), record.running, record.current_node, record.target_node)


def snapshot_scheduler(usage: Any, formula: str) -> Scheduler:
    """A fresh scheduler holding the snapshot ``usage``: nodes, then resources, in list order.

    Duplicate node names are refused (InvalidInputError naming the entry: product decision 4);
    resource errors are upstream's (SchedulingError), as if added one by one.
    """
    mode = usage.__struct_config__.tag
    names = [node.name for node in usage.nodes]
    if len(set(names)) < len(names):
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                raise InvalidInputError(f"usage.nodes[{i}].name", f"duplicate node name '{name}'")
            seen.add(name)
    scheduler = new_scheduler(mode, formula)
    # The models bound every value as the engine's own checks would: the usage takes them as
    # they are (a third of the cost of a big snapshot), checking what needs its state.
    stats_of = static_node_stats if mode == "static" else node_stats
    scheduler.usage.add_nodes([(node.name, stats_of(node)) for node in usage.nodes])
    scheduler.usage.add_resources([(res.sid, placed(res)) for res in usage.resources])
    return scheduler


@functools.cache
def _shape(result: Any) -> TypeAdapter:
    return TypeAdapter(result)


def as_wire(result: Any, value: Any) -> Any:
    """``value``, a method's result (an engine value, or built here), as the wire writes it: read by
    its result type ``result`` (a model of :mod:`bridge.results`, or a plain type) and written with
    the wire's names."""
    shape = _shape(result)
    return shape.dump_python(shape.validate_python(value, from_attributes=True), by_alias=True)


_SID, _SOURCE, _TARGET, _STATS = map(attrgetter, ("sid", "source_node", "target_node", "stats"))
_CPU, _MEM = attrgetter("cpu"), attrgetter("mem")


def candidate_columns(candidates: list | CompactColumns) -> CandidateColumns | CompactColumns:
    """Candidates of checked params (one form per list: bundles are columns already, see
    :data:`REPEATING`) as the engine's columns: expanded ones as lists of names, cpu as float64
    cores and mem as int64 bytes (their limits were checked by the structs, so none are given).
    No candidates give empty bundle columns."""
    if type(candidates) is CompactColumns:
        return candidates
    if candidates and type(candidates[0]) is Candidate:
        stats = list(map(_STATS, candidates))
        cpu = np.fromiter(map(_CPU, stats), dtype=np.float64, count=len(stats)) + 0.0  # as unsigned() gives it
        mem = np.fromiter(map(_MEM, stats), dtype=np.int64, count=len(stats))
        sids, sources, targets = (list(map(get, candidates)) for get in (_SID, _SOURCE, _TARGET))
        return CandidateColumns(sids, sources, targets, cpu, mem)
    return CompactColumns([], [], [])  # none


def candidate_counts(candidates: Any) -> tuple[int, int]:
    """(expanded candidates, bundle members) of candidates, decoded JSON, structs or bundles' columns:
    a bundle counts once per entry of its ``nodes``; an expanded candidate counts once (the list's
    form as :func:`bridge.records.candidate_form` decides it)."""
    if type(candidates) is CompactColumns:  # checked: every bundle has both lists (counted in C)
        return int(candidates.nodes.lengths().sum()), sum(map(len, candidates.resources))
    first = candidates[0]
    if type(first) is Candidate or rec.candidate_form(candidates) == "expanded":
        return len(candidates), 0
    expanded = members = 0
    for bundle in candidates:
        targets, resources = _member(bundle, "nodes"), _member(bundle, "resources")
        expanded += len(targets) if type(targets) is list else 0
        members += len(resources) if type(resources) is list else 0
    return expanded, members


def _member(record: Any, name: str) -> Any:
    """A member of a record: decoded JSON (anything, None if absent) or a struct."""
    return record.get(name) if type(record) is dict else getattr(record, name, None)


def at_most(limits: Any, name: str, count: int, loc: str, what: str) -> None:
    """Refuse ``count`` ``what`` (field ``loc``) over limit ``name`` of ``limits`` (a ServerLimits):
    ParamsError naming the field, the count, the limit and how to raise it."""
    limit = getattr(limits, name)
    if count > limit:
        raise ParamsError([(loc, f"{count} {what} exceed the limit of {limit} per call ({how_to_raise(name)})")])


def check_call_sizes(params: Any, limits: Any) -> None:
    """Refuse a call whose ``usage`` or ``candidates`` exceed ``limits`` (:func:`at_most`).
    ``params``: decoded JSON (before the models spend time and memory on it) or a struct. Counts
    list lengths only."""
    usage, candidates = _member(params, "usage"), _member(params, "candidates")
    if usage is not None:
        nodes, resources = _member(usage, "nodes"), _member(usage, "resources")
        at_most(limits, "max_nodes", len(nodes) if type(nodes) is list else 0, "usage.nodes", "nodes")
        at_most(
            limits, "max_resources", len(resources) if type(resources) is list else 0, "usage.resources", "resources"
        )
    if type(candidates) is CompactColumns or (type(candidates) is list and candidates):
        expanded, members = candidate_counts(candidates)
        at_most(limits, "max_candidates", expanded, "candidates", "expanded candidates")
        at_most(limits, "max_resources", members, "candidates", "bundle members")
