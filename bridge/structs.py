"""The wire records as msgspec structs, generated from the pydantic models of :mod:`bridge.models`.

The pydantic models are the one declaration of every wire shape. From each model this module
generates a msgspec struct with the model's field names, wire names (aliases), types, bounds and
defaults, so that msgspec can decode a request's params straight into them (:mod:`bridge.wire`),
checking every value. The structs are strict: they refuse what the models accept only
by changing the value (an integral float as a byte count, ``running`` by Perl truthiness, an
unknown key they ignore); such requests go to the models.

The generator knows the models' few validators (:data:`_VALIDATORS`) and fails at import on any
other, so a rule added to the models cannot be skipped here unnoticed. ``tests/test_wire.py`` checks
the one property that matters: over requests drawn from the schema, the strict structs accept
only what the models accept, with the same values.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..core import CompactColumns
from . import models as m
from . import records as rec

#: The models' validators, and what the strict decoder does for each: a ``lax`` one widens what the
#: models accept (the strict types refuse the widened inputs, which then go to the models); an
#: ``errors`` one only shapes the errors of the models; an ``exactly one`` one is checked on the
#: struct (:meth:`ParamsDecoder.checked`).
_VALIDATORS = {
    rec._integral_float_to_int: "lax",
    rec._perl_truth: "lax",
    rec._in_parts: "errors",
    m.ClusterParams._exactly_one_cluster: "exactly one",  # of the model's exactly_one fields
}
#: Fields whose lists repeat from record to record (an HA round's bundles list every node but the
#: guest's own: a few dozen distinct lists for thousands of bundles). The strict structs take each
#: as its JSON text; :meth:`ParamsDecoder.checked` numbers the distinct texts, decodes each once
#: (as :data:`TEXTS` types it) and hands a list of such records over as the engine's columns
#: (:data:`COLUMNS`), the field a :class:`~core.candidates.RepeatedLists`: the engine looks each
#: distinct list up once, and no record is touched again.
REPEATING = {(rec.CompactCandidate, "nodes")}


_LEADER, _RESOURCES = attrgetter("leader"), attrgetter("resources")


def _bundle_columns(bundles: list, nodes: Sequence[Sequence[str]]) -> CompactColumns:
    """Bundle records as the engine's columns, their target lists given as ``nodes``."""
    return CompactColumns(list(map(_LEADER, bundles)), list(map(_RESOURCES, bundles)), nodes)


#: Record model with a :data:`REPEATING` field -> how a list of its records is made columns, given
#: that field's column.
COLUMNS: dict[type[BaseModel], Callable[[list, Sequence], Any]] = {rec.CompactCandidate: _bundle_columns}

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
    return defstruct(name, fields, array_like=True, tag=name, forbid_unknown_fields=True)


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
    fields, rename, unbounded = [], {}, []
    for name, info in model.model_fields.items():
        if name == tag_field:
            continue
        try:
            kind = wire_type(info.annotation, info.metadata)
        except Untaggable as union:
            if not issubclass(model, m.Params):  # tried in order only as a whole request's params
                raise TypeError(f"the strict decoder cannot tell apart {model.__name__}.{name}") from None
            CHOICES[model] = max(CHOICES.get(model, 1), len(union.members))
            kind = wire_type(union.members[min(choice, len(union.members) - 1)])
        if _takes_any_integer(kind):
            if not issubclass(model, m.Params):  # checked by ParamsDecoder.checked at the params' level only
                raise TypeError(f"the strict decoder needs an upper bound on {model.__name__}.{name}")
            unbounded.append(name)
        if (model, name) in REPEATING:
            if model not in COLUMNS:
                raise TypeError(f"the strict decoder has no columns for {model.__name__}'s repeating {name}")
            TEXTS.setdefault(model, {})[name] = kind
            kind = msgspec.Raw
        if info.is_required():
            fields.append((name, kind))
        else:
            default = info.default
            fields.append((name, kind, msgspec.field(default_factory=list) if default == [] else default))
        if info.alias:
            rename[name] = info.alias
    options = {"tag_field": tag_field, "tag": tag} if tag is not None else {}
    struct = defstruct(model.__name__, fields, rename=rename, kw_only=True, forbid_unknown_fields=True, **options)
    if model in TEXTS:
        TEXTS[struct], COLUMNS_OF[struct], MODEL_OF[struct] = TEXTS[model], COLUMNS[model], model
    if unbounded:
        UNBOUNDED[struct] = unbounded
    return struct


def _takes_any_integer(kind: Any) -> bool:
    """Whether the msgspec type ``kind`` takes integers without an upper bound (in a union too)."""
    meta = None
    while get_origin(kind) is Annotated:
        kind, meta = get_args(kind)[:2]
    if get_origin(kind) in (Union, types.UnionType, list):
        return any(map(_takes_any_integer, get_args(kind)))
    return kind is int and (meta is None or (meta.le is None and meta.lt is None))


@functools.cache
def nesting(kind: Any) -> int:
    """How deep a value of the msgspec type ``kind`` (a struct made here, or a type in one) nests
    arrays and objects: none of them takes a member it does not declare, so nothing they decode
    is deeper."""
    while get_origin(kind) is Annotated:
        kind = get_args(kind)[0]
    if get_origin(kind) in (Union, types.UnionType):
        return max(map(nesting, get_args(kind)))
    if get_origin(kind) in (list, tuple):
        return 1 + max(map(nesting, get_args(kind)), default=0)
    if kind in FIELDS:
        texts = TEXTS.get(kind, {})  # decoded as this type, or refused
        return 1 + max((nesting(texts.get(field[0], field[1])) for field in FIELDS[kind]), default=0)
    return 0


#: The field specs (name, type[, default]) of every struct made here (msgspec's own introspection
#: evaluates annotations: most of the cost of a server start's struct making).
FIELDS: dict[type, list[tuple]] = {}


#: Model or struct -> its :data:`REPEATING` fields -> their type (the struct's field: its JSON text).
TEXTS: dict[type, dict[str, Any]] = {}

#: Record struct with a :data:`REPEATING` field -> its columns' maker (:data:`COLUMNS`).
COLUMNS_OF: dict[type, Callable[[list, Sequence], Any]] = {}

#: Record struct with a :data:`REPEATING` field -> its model.
MODEL_OF: dict[type, type[BaseModel]] = {}

#: Params struct -> its fields of integers without an upper bound (counts): the strict decoder reads
#: every digit of one, where orjson (the lax way) reads one beyond 64 bits as a float.
UNBOUNDED: dict[type, list[str]] = {}

#: Params model -> how many members its widest :class:`Untaggable` field has (absent: none).
CHOICES: dict[type, int] = {}


def defstruct(name: str, fields: list[tuple], **options: Any) -> type[msgspec.Struct]:
    struct = msgspec.defstruct(name, fields, gc=False, **options)
    FIELDS[struct] = fields
    return struct


def params_structs(model: type[m.Params]) -> list[type[msgspec.Struct]]:
    """The named-param structs of ``model`` to try in order (msgspec tells none of them apart by a
    tag): one per member of its untaggable union (if any). Positional params are named before they
    reach them."""
    struct_of(model)  # notes the model's choices
    return [struct_of(model, choice=choice) for choice in range(CHOICES.get(model, 1))]
