"""The wire records: typed structs generated from :mod:`bridge.models`, the strict decoder of whole
messages made of them, the engine values of the records, and the engine's results in wire form.

The pydantic models are the one declaration of every wire shape. From each model this module
generates a msgspec struct with the model's field names, wire names (aliases), types, bounds and
defaults; msgspec decodes a whole request straight into them (envelope, params, records) and checks
every value as it parses. That decoder is strict: it refuses what the models accept only by
changing the value (an integral float as a byte count, ``running`` by Perl truthiness, an unknown
key they ignore) and what it cannot measure (nesting beyond the depth limit).
A refused request goes to the models, in one place (:meth:`ParamsDecoder.from_models`): they accept
the lax cases and word every error, and what they accept is decoded into the same structs. So a
handler gets one type per param, whichever way the request came in.

The generator knows the models' few validators (:data:`_VALIDATORS`) and fails at import on any
other, so a rule added to the models cannot be skipped here unnoticed. ``tests/test_wire.py`` checks
the one property that matters: over requests drawn from the schema, the strict decoder accepts
only what the models accept, with the same values.
"""

from __future__ import annotations

import functools
import itertools
import operator
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
import numpy as np
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

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
from .errors import ParamsError
from .limits import how_to_raise

# -- generating the structs -------------------------------------------------------------------

#: The models' validators, and what the strict decoder does for each: a ``lax`` one widens what the
#: models accept (the strict types refuse the widened inputs, which then go to the models); an
#: ``errors`` one only shapes the errors of the models; an ``exactly one`` one is checked on the
#: struct (:meth:`ParamsDecoder.checked`).
_VALIDATORS = {
    m._integral_float_to_int: "lax",
    m._perl_truth: "lax",
    m._in_parts: "errors",
    m.ClusterParams._exactly_one_cluster: "exactly one",  # of the model's exactly_one fields
}
#: Fields whose lists repeat from record to record (an HA round's bundles list every node but the
#: guest's own: a few dozen distinct lists for thousands of bundles). The strict decoder keeps each
#: as JSON text; :meth:`ParamsDecoder.checked` decodes (checks) each distinct text once, by the
#: field's own type, into one tuple that the records with that text share, and hands a list of
#: such records over as the engine's columns (:data:`COLUMNS`), the field a
#: :class:`~core.candidates.RepeatedLists` numbered by the texts: the engine looks each distinct
#: list up once, and no record is touched again.
REPEATING = {(m.CompactCandidate, "nodes")}


def _bundle_columns(bundles: list, nodes: Sequence[Sequence[str]]) -> CompactColumns:
    """Bundle records as the engine's columns, their target lists given as ``nodes``."""
    return CompactColumns(list(map(_LEADER, bundles)), list(map(_RESOURCES, bundles)), nodes)


#: Record model with a :data:`REPEATING` field -> how a list of its records is made columns, given
#: that field's column.
COLUMNS: dict[type[BaseModel], Callable[[list, Sequence], Any]] = {m.CompactCandidate: _bundle_columns}

_BOUNDS = {at.Ge: "ge", at.Gt: "gt", at.Le: "le", at.Lt: "lt", at.MinLen: "min_length", at.MaxLen: "max_length"}
#: Metadata that only describes a type (its JSON schema, its union tag) or that the strict types
#: already are (strict, finite numbers: JSON has no NaN and msgspec refuses overflowing numbers).
_DESCRIPTIVE = ("WithJsonSchema", "Tag", "Strict", "AllowInfNan", "_PublishAsAnyOf")


class Untaggable(TypeError):
    """A union msgspec cannot tell apart by a tag: a params field of it is decoded by trying each
    of its ``members`` in order (:func:`params_structs`)."""

    def __init__(self, members: Sequence[Any]) -> None:
        super().__init__(f"union of {members} needs trying in order")
        self.members = members


def _noted(items: Iterable[Any], note: dict[str, Any]) -> None:
    """Collect bounds (as msgspec.Meta keywords) and a union's discriminator from metadata."""
    for item in items:
        kind = type(item)
        if kind in _BOUNDS:
            note[_BOUNDS[kind]] = getattr(item, _BOUNDS[kind])
        elif isinstance(item, FieldInfo):
            _noted(item.metadata, note)
            if item.discriminator is not None:
                note["discriminator"] = item.discriminator
        elif kind.__name__ == "StringConstraints":
            _noted(item, note)  # a group of bounds (min_length)
        elif hasattr(item, "func"):  # a Before-, After- or WrapValidator
            if item.func not in _VALIDATORS:
                raise TypeError(f"the strict decoder does not know validator {item.func.__qualname__}")
        elif kind.__name__ == "Discriminator":
            note["discriminator"] = item.discriminator
        elif kind.__name__ == "_PydanticGeneralMetadata":
            if getattr(item, "union_mode", "left_to_right") != "left_to_right":
                raise TypeError(f"the strict decoder does not know {item}")
        elif kind.__name__ not in _DESCRIPTIVE:
            raise TypeError(f"the strict decoder does not know {item!r}")


def wire_type(annotation: Any, metadata: Iterable[Any] = ()) -> Any:
    """The msgspec type of a model annotation (with its field's ``metadata``); raises
    :class:`Untaggable` for a union that msgspec cannot tell apart by a tag."""
    note: dict[str, Any] = {}
    _noted(metadata, note)
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        _noted(extra, note)
    discriminator = note.pop("discriminator", None)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return _union(get_args(annotation), discriminator)
    if origin is list:
        return _bounded(list[wire_type(get_args(annotation)[0])], note)
    if origin is Literal or annotation in (str, int, float, bool, type(None)):
        return _bounded(annotation, note)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return struct_of(annotation)
    raise TypeError(f"the strict decoder has no type for {annotation!r}")


def _bounded(kind: Any, bounds: dict[str, Any]) -> Any:
    return Annotated[kind, msgspec.Meta(**bounds)] if bounds else kind


def _union(members: tuple, discriminator: Any) -> Any:
    if type(None) in members:
        rest = [member for member in members if member is not type(None)]
        return Union[(*(wire_type(member) for member in rest), None)]  # noqa: UP007 (built from a tuple)
    if isinstance(discriminator, str):  # models tagged by a Literal field (usage's "mode")
        return Union[tuple(_tagged_struct(model, discriminator) for model in members)]  # noqa: UP007
    entries = [_unwrapped(member) for member in members]
    if all(get_origin(entry) is tuple and get_origin(get_args(entry)[0]) is Literal for entry in entries):
        return Union[tuple(map(_entry_struct, members))]  # noqa: UP007 ([method, args...] lists)
    raise Untaggable(members)


def _unwrapped(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


@functools.cache
def _entry_struct(member: Any) -> type[msgspec.Struct]:
    """``[method, args...]`` (a mutation, tagged ``"<mode> <method>"``) as an array-like struct
    tagged by its first element; the args named as :data:`bridge.models.MUTATION_ARGS` names them
    (those of the single call)."""
    entry, *notes = get_args(member)  # Annotated flattens: the tuple, then all its metadata
    method, *args = get_args(entry)
    (name,) = get_args(method)
    (tag,) = (note.tag for note in notes if type(note).__name__ == "Tag")
    fields = [(arg_name, wire_type(arg)) for arg_name, arg in zip(m.MUTATION_ARGS[tag], args)]
    return _defstruct(name, fields, array_like=True, tag=name, forbid_unknown_fields=True)


def _tagged_struct(model: type[BaseModel], tag_field: str) -> type[msgspec.Struct]:
    (tag,) = get_args(model.model_fields[tag_field].annotation)
    return struct_of(model, tag_field=tag_field, tag=tag)


@functools.cache
def struct_of(
    model: type[BaseModel], *, tag_field: str | None = None, tag: str | None = None, choice: int = 0
) -> type[msgspec.Struct]:
    """The struct of ``model``: the same field names, wire names, types, bounds and defaults, unknown
    keys refused. ``tag_field``/``tag``: the field that tells the model apart in a union (left out of
    the struct). ``choice``: which member of an :class:`Untaggable` field's union to take."""
    for validator in model.__pydantic_decorators__.model_validators.values():
        if _VALIDATORS.get(validator.func) != "exactly one":
            raise TypeError(f"the strict decoder does not know validator {validator.func.__qualname__}")
    fields, rename = [], {}
    for name, info in model.model_fields.items():
        if name == tag_field:
            continue
        try:
            kind = wire_type(info.annotation, info.metadata)
        except Untaggable as union:
            if not issubclass(model, m.Params):  # tried in order only as a whole request's params
                raise TypeError(f"the strict decoder cannot tell apart {model.__name__}.{name}") from None
            _CHOICES[model] = max(_CHOICES.get(model, 1), len(union.members))
            kind = wire_type(union.members[min(choice, len(union.members) - 1)])
        if (model, name) in REPEATING:
            if model not in COLUMNS:
                raise TypeError(f"the strict decoder has no columns for {model.__name__}'s repeating {name}")
            _TEXTS.setdefault(model, {})[name] = kind
            kind = msgspec.Raw
        if info.is_required():
            fields.append((name, kind))
        else:
            default = info.default
            fields.append((name, kind, msgspec.field(default_factory=list) if default == [] else default))
        if info.alias:
            rename[name] = info.alias
    options = {"tag_field": tag_field, "tag": tag} if tag is not None else {}
    struct = _defstruct(model.__name__, fields, rename=rename, kw_only=True, forbid_unknown_fields=True, **options)
    if model in _TEXTS:
        _TEXTS[struct], _COLUMNS[struct], _MODELS[struct] = _TEXTS[model], COLUMNS[model], model
    return struct


#: The field specs (name, type[, default]) of every struct made here (msgspec's own introspection
#: evaluates annotations: most of the cost of a server start's struct making).
_FIELDS: dict[type, list[tuple]] = {}


#: Model or struct -> its :data:`REPEATING` fields -> their type.
_TEXTS: dict[type, dict[str, Any]] = {}

#: Record struct with a :data:`REPEATING` field -> its columns' maker (:data:`COLUMNS`).
_COLUMNS: dict[type, Callable[[list, Sequence], Any]] = {}

#: Record struct with a :data:`REPEATING` field -> its model.
_MODELS: dict[type, type[BaseModel]] = {}

#: Params model -> how many members its widest :class:`Untaggable` field has (absent: none).
_CHOICES: dict[type, int] = {}


def _defstruct(name: str, fields: list[tuple], **options: Any) -> type[msgspec.Struct]:
    struct = msgspec.defstruct(name, fields, gc=False, **options)
    _FIELDS[struct] = fields
    return struct


def params_structs(model: type[m.Params], positional: bool) -> list[type[msgspec.Struct]]:
    """The param structs of ``model`` to try in order (msgspec tells none of them apart by a tag):
    one per member of its untaggable union (if any), each for named params and, if ``positional``,
    then for an array of them in field order."""
    kinds = []
    struct_of(model)  # notes the model's choices
    for choice in range(_CHOICES.get(model, 1)):
        named = struct_of(model, choice=choice)
        kinds.append(named)
        if positional:
            fields = _FIELDS[named]
            kinds.append(
                _defstruct(f"{model.__name__}Array", fields, array_like=True, kw_only=True, forbid_unknown_fields=True)
            )
    return kinds


@functools.cache
def depth(kind: Any) -> int:
    """How deep a value of msgspec type ``kind`` nests arrays and objects."""
    while get_origin(kind) is Annotated:
        kind = get_args(kind)[0]
    if get_origin(kind) in (Union, types.UnionType):
        return max(map(depth, get_args(kind)))
    if get_origin(kind) in (list, tuple):
        return 1 + max(map(depth, get_args(kind)), default=0)
    if kind in _FIELDS:
        texts = _TEXTS.get(kind, {})
        return 1 + max((depth(texts.get(field[0], field[1])) for field in _FIELDS[kind]), default=0)
    return 0


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

    def __init__(self, model: type[m.Params], positional: bool) -> None:
        self.model = model
        self.kinds = params_structs(model, positional)
        self.structs = frozenset(self.kinds)
        self._decoders = [msgspec.json.Decoder(kind) for kind in self.kinds]
        self._exactly_one = getattr(model, "exactly_one", ())
        #: Params struct -> its fields that hold records with REPEATING fields: (field, record struct,
        #: the record's field, the decoder of its text).
        self._repeating = {kind: list(_repeating(kind)) for kind in self.kinds}
        #: The kinds of named params, in the order tried.
        self._named = [kind for kind in self.kinds if not kind.__struct_config__.array_like]

    def decode(self, params: bytes) -> Any:
        """``params`` (JSON) as a struct, or None if the strict decoder refuses them."""
        struct = _first(self._decoders, params)
        return None if struct is None else self.checked(struct)

    def checked(self, params: Any) -> Any:
        """``params`` (a struct) once the checks left after decoding pass it, else None: the model's
        own (exactly one of its ``exactly_one`` fields given), and the texts of :data:`REPEATING`
        fields (a list of their records is then the records' columns)."""
        if self._exactly_one and sum(getattr(params, name) is not None for name in self._exactly_one) != 1:
            return None
        columns = []
        for name, record, field, decoder in self._repeating.get(type(params), ()):
            records = getattr(params, name)
            if not (type(records) is list and records and type(records[0]) is record):
                continue  # none, or columns already
            # b"" + text: the bytes of a Raw without bytes()'s parsing of its arguments (300 texts:
            # 14 us against 21).
            texts = list(map(operator.add, itertools.repeat(b""), map(attrgetter(field), records)))
            rows, distinct = numbered(texts)
            try:
                lists = [decoder.decode(text) for text in distinct]
            except REFUSED:
                return None
            columns.append((name, _COLUMNS[record](records, RepeatedLists(rows, lists))))
        for name, value in columns:  # once every check passed: refused params keep their records
            setattr(params, name, value)
        return params

    def from_models(self, params: dict) -> Any:
        """``params`` (named, decoded JSON) validated by the models, as a struct: the values they
        accept, as they give them (ParamsError with their words if they refuse). The model's
        values become the struct's by msgspec's conversion from attributes (no JSON in between);
        records with :data:`REPEATING` fields become the records' columns here, as
        :meth:`checked` makes them of decoded texts."""
        try:
            validated = self.model.model_validate(params)
        except ValidationError as exc:
            raise ParamsError.from_validation(exc) from None
        for kind in self._named:
            columns = {}
            for name, record, field, _ in self._repeating[kind]:
                records = getattr(validated, name)
                if type(records) is list and records and type(records[0]) is _MODELS[record]:
                    rows, distinct = numbered([tuple(getattr(r, field)) for r in records])
                    columns[name] = _COLUMNS[record](records, RepeatedLists(rows, distinct))
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
    for name, kind, *_ in _FIELDS[params]:
        (record,) = get_args(kind) if get_origin(kind) is list else (None,)
        for field, text in _TEXTS.get(record, {}).items():
            yield name, record, field, msgspec.json.Decoder(tuple[(get_args(text)[0], ...)])


class MessageDecoder:
    """Whole messages (a request or a batch) decoded strictly into structs: a request is a struct
    tagged by its method, its ``params`` a struct of its params model.

    ``params_kinds``: method -> the kinds its params may take (:attr:`ParamsDecoder.kinds` of its
    models), tried in order: named params first, then positional ones (a method without kinds of
    a form takes its others). Within a form the first decoder takes each method's first kind, the
    next its second (or its last), and so on: a client sends every request of a batch in one form,
    so the batch is taken whole (a Perl round's, a new scheduler's and a dynamic scheduler's
    mutations, named, by the second decoder).
    """

    def __init__(self, params_kinds: dict[str, list[Any]]) -> None:
        self.methods: dict[type, str] = {}
        unions, made = {}, {}
        for positional in (False, True):
            forms = {
                name: [kind for kind in kinds if kind.__struct_config__.array_like is positional] or kinds
                for name, kinds in params_kinds.items()
            }
            for choice in range(max(map(len, forms.values()))):
                union = []
                for name, kinds in forms.items():
                    kind = kinds[min(choice, len(kinds) - 1)]
                    union.append(made.get((name, kind)) or made.setdefault((name, kind), self._request(name, kind)))
                unions[tuple(union)] = None
        requests = [Union[union] for union in unions]  # noqa: UP007 (built from a tuple)
        self._decoders = [msgspec.json.Decoder(list[request] | request) for request in requests]
        self._requests = [msgspec.json.Decoder(request) for request in requests]
        self._batch = msgspec.json.Decoder(list[msgspec.Raw])
        self._as_sent: dict[str, msgspec.json.Decoder] = {}
        #: The deepest valid message (a batch of the deepest request).
        self.depth = 1 + max(map(depth, requests))

    def _request(self, name: str, params: Any) -> type[msgspec.Struct]:
        fields = [
            ("jsonrpc", Literal["2.0"]),
            ("id", Union[str, int, float, None], msgspec.UNSET),  # noqa: UP007
            ("params", params, msgspec.UNSET),
        ]
        request = _defstruct("Request", fields, tag_field="method", tag=name, forbid_unknown_fields=True)
        self.methods[request] = name
        return request

    def as_sent(self, method: str) -> msgspec.json.Decoder:
        """The decoder of one request of ``method`` whose params stay JSON text (a Raw), its
        envelope as :meth:`decode` takes it (its struct is one of :attr:`methods`)."""
        decoder = self._as_sent.get(method)
        if decoder is None:
            decoder = self._as_sent[method] = msgspec.json.Decoder(self._request(method, msgspec.Raw))
        return decoder

    def decode(self, message: bytes, max_depth: int) -> Any:
        """The request or batch in ``message`` as structs; None if the strict decoder refuses it,
        or cannot tell it within ``max_depth`` (the models then decide)."""
        if max_depth < self.depth:
            return None
        decoded = _first(self._decoders, message)
        return self._request_by_request(message) if decoded is None else decoded

    def _request_by_request(self, message: bytes) -> list | None:
        """A batch that no one decoder takes whole, its requests' params of kinds no one decoder
        pairs (a new scheduler's named params and a dynamic scheduler's mutations, as a Perl
        round sends them together), decoded request by request; None if a request is refused."""
        try:
            raws = self._batch.decode(message)
        except REFUSED:
            return None
        requests = [_first(self._requests, raw) for raw in raws]
        return None if None in requests else requests


# -- engine values, and the engine's results as the wire gives them ----------------------------

StaticStats, DynamicStats = struct_of(m.StaticStats), struct_of(m.DynamicStats)
Candidate = struct_of(m.Candidate)


def unsigned(value: float | None) -> float | None:
    """A core count or fraction as the engine takes it: -0.0 as 0.0 (the engine's results and
    echoes would show the sign). Every such value reaches the engine through here."""
    return None if value is None else value + 0.0


def resource_stats(stats: Any) -> ResourceStats:
    """Stats of a resource: static (``maxcpu``/``maxmem``, also the running usage) or dynamic."""
    # unsigned() inline (its fields are never None): a round adds hundreds of resources, and the
    # calls were a tenth of their placing (128 dynamic adds: 51 us placed, 46 so).
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
    for node in usage.nodes:
        stats = static_node_stats(node) if mode == "static" else node_stats(node)
        scheduler.usage.add_node(node.name, stats)
    scheduler.usage.add_resources([(res.sid, placed(res)) for res in usage.resources])
    return scheduler


def scored_list(scored: list) -> list[dict]:
    """Scored migrations as the wire gives them (a ScoredList)."""
    return [s.to_wire() for s in scored]


def scored_or_none(scored: Any) -> dict | None:
    """One scored migration, or None, as the wire gives it (a ScoredOrNone)."""
    return None if scored is None else scored.to_wire()


def start_scores(scores: list[tuple[str, float]]) -> list[list]:
    """``(node, score)`` pairs as the wire gives them: ``[node, score]`` lists."""
    return [[name, score] for name, score in scores]


_SID, _SOURCE, _TARGET, _STATS = map(attrgetter, ("sid", "source_node", "target_node", "stats"))
_CPU, _MEM, _LEADER, _RESOURCES = map(attrgetter, ("cpu", "mem", "leader", "resources"))


class FieldView(Sequence[str]):
    """One name field of decoded candidates, read in place: the engine maps a column over its node
    index once and looks at a few rows' sids, so a list of 100k names of its own would cost more
    than it saves. Iterating maps the field's getter over the records, in C."""

    __slots__ = ("_records", "_get")

    def __init__(self, records: list, get: Callable[[Any], str]) -> None:
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


def candidate_columns(candidates: list | CompactColumns) -> CandidateColumns | CompactColumns:
    """Candidates of checked params (one form per list: bundles are columns already, see
    :data:`REPEATING`) as the engine's columns: expanded ones with cpu as float64 cores and mem
    as int64 bytes."""
    if type(candidates) is CompactColumns:
        return candidates
    if candidates and type(candidates[0]) is Candidate:
        stats = list(map(_STATS, candidates))
        cpu = np.fromiter(map(_CPU, stats), dtype=np.float64, count=len(stats)) + 0.0  # as unsigned() gives it
        mem = np.fromiter(map(_MEM, stats), dtype=np.int64, count=len(stats))
        return CandidateColumns(*(FieldView(candidates, get) for get in (_SID, _SOURCE, _TARGET)), cpu, mem)
    return CompactColumns([], [], [])  # none


def candidate_counts(candidates: Any) -> tuple[int, int]:
    """(expanded candidates, bundle members) of candidates, decoded JSON, structs or bundles' columns:
    a bundle counts once per entry of its ``nodes``; an expanded candidate counts once (the list's
    form as :func:`bridge.models.candidate_form` decides it)."""
    if type(candidates) is CompactColumns:  # checked: every bundle has both lists (counted in C)
        return int(candidates.nodes.lengths().sum()), sum(map(len, candidates.resources))
    first = candidates[0]
    if type(first) is Candidate or m.candidate_form(candidates) == "expanded":
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
