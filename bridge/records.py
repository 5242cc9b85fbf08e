"""The records of the wire schema (the nested objects of params: stats, nodes, resources, a
cluster snapshot, candidates) and their scalar types, as pydantic v2 models.

Conventions:

* Units: cpu values are cores (numbers), memory values are bytes (integers; integral floats such
  as ``4.0`` are accepted as the integer they hold). Key names are the binding's own, kebab-case
  where upstream's are (``current-node``), so a Perl hash passes through unchanged.
* Strict types: a number given as a string, or a bool given as a number, is refused, except
  ``running`` (see :data:`Running`), which follows Perl truthiness as upstream's binding does.
* :class:`Record` (nested objects) ignores unknown keys as upstream's binding does.
* Bounds are those of :mod:`core.limits` (finite, no overflow), so values that pass these models
  also pass the engine's own checks.
"""

# No ``from __future__ import annotations`` here (see bridge/models.py).
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
)

from ..core.limits import MAX_BYTES, MAX_CORES

# -- scalar types ---------------------------------------------------------------------------


def _integral_float_to_int(value: Any) -> Any:
    # JSON encoders (Perl's among them) may write 4294967296 as 4294967296.0; keep the integer.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _perl_truth(value: Any) -> Any:
    # Upstream's binding decodes a bool from any numeric scalar or undef by Perl truthiness
    # (binding.md 6.2); strings stay refused, as upstream refuses them.
    if value is None:
        return False
    if type(value) in (int, float):
        return value != 0
    return value


# Constraints go left of a BeforeValidator: to its right, pydantic applies them as a separate
# step and publishes them as non-standard keys ("ge") instead of JSON Schema's ("minimum").

#: A non-empty name (node name, sid).
Name = Annotated[str, StringConstraints(min_length=1)]

#: Cores (cpu usage or limit): a finite number in [0, 2**53] (-0.0 is 0.0 to the engine:
#: :func:`bridge.wire.unsigned`).
Cores = Annotated[float, Field(ge=0, le=MAX_CORES, allow_inf_nan=False)]

#: A node's core count: an integer in [1, 2**53].
NodeCores = Annotated[int, Field(gt=0, le=int(MAX_CORES)), BeforeValidator(_integral_float_to_int)]

#: Bytes: an integer in [0, 2**62 - 1].
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES), BeforeValidator(_integral_float_to_int)]

#: A node's memory size: an integer number of bytes in [1, 2**62 - 1].
NodeBytes = Annotated[int, Field(gt=0, le=MAX_BYTES), BeforeValidator(_integral_float_to_int)]

#: A threshold or margin: a finite fraction >= 0 (0.3 = 30 %; not a percentage).
Fraction = Annotated[float, Field(ge=0, allow_inf_nan=False)]

#: A count (``limit``): a non-negative integer of any size (nothing is allocated for it).
Count = Annotated[int, Field(ge=0), BeforeValidator(_integral_float_to_int)]

#: Whether a resource runs (true) or is starting (false). JSON booleans; numbers and null are
#: also accepted with Perl truthiness (0 and null are false), as upstream's binding accepts them.
Running = Annotated[
    bool,
    BeforeValidator(_perl_truth),
    WithJsonSchema(
        {
            "anyOf": [{"type": "boolean"}, {"type": "number"}, {"type": "null"}],
            "description": "true = running (started), false = starting; numbers and null by Perl truthiness",
        }
    ),
]

#: An opaque scheduler handle, as returned by ``scheduler.new``.
Handle = Annotated[str, StringConstraints(min_length=1), Field(description="a scheduler handle from scheduler.new")]

Mode = Literal["static", "dynamic"]
Formula = Literal["normalized", "raw"]
Method = Literal["bruteforce", "topsis"]

#: Names pydantic puts into error locations for tagged unions; not fields, left out of ``loc``.
UNION_TAGS = frozenset({"static", "dynamic", "compact", "expanded"})


# -- records --------------------------------------------------------------------------------


class Record(BaseModel):
    """A nested object: unknown keys are ignored, as upstream's binding ignores them."""

    model_config = ConfigDict(strict=True, extra="ignore", defer_build=True)


class StaticStats(Record):
    """A static resource's configured limits: ``maxcpu`` cores (0 = no CPU limit, i.e. the whole
    node) and ``maxmem`` bytes. Static mode also takes them as the resource's running usage."""

    maxcpu: Cores
    maxmem: Bytes


class DynamicStats(Record):
    """A dynamic resource's measured usage (``cpu`` cores, ``mem`` bytes) and limits
    (``maxcpu`` cores, 0 = no CPU limit; ``maxmem`` bytes)."""

    cpu: Cores
    maxcpu: Cores
    mem: Bytes
    maxmem: Bytes


class DynamicNodeStats(Record):
    """A dynamic node's measured usage (``cpu`` cores, ``mem`` bytes) and capacity (``maxcpu``
    cores > 0, ``maxmem`` bytes > 0)."""

    cpu: Cores
    maxcpu: NodeCores
    mem: Bytes
    maxmem: NodeBytes


class StaticNode(Record):
    """A node of a static snapshot: capacity only. ``cpu`` and ``mem`` may be given but are
    ignored (static nodes start at 0 usage; their services add to it)."""

    name: Name
    maxcpu: NodeCores
    maxmem: NodeBytes
    cpu: Cores = 0.0
    mem: Bytes = 0


class DynamicNode(Record):
    """A node of a dynamic snapshot: measured usage and capacity."""

    name: Name
    maxcpu: NodeCores
    maxmem: NodeBytes
    cpu: Cores
    mem: Bytes


class StaticService(Record):
    """A static service as ``add_service`` takes it; moving from ``current-node`` to
    ``target-node`` when the target is set (it then loads both nodes)."""

    stats: StaticStats
    running: Running
    current_node: Name = Field(alias="current-node")
    target_node: Name | None = Field(default=None, alias="target-node")


class DynamicResource(Record):
    """A dynamic resource as ``add_resource`` takes it; moving when ``target-node`` is set."""

    stats: DynamicStats
    running: Running
    current_node: Name = Field(alias="current-node")
    target_node: Name | None = Field(default=None, alias="target-node")


class StaticSnapshotResource(StaticService):
    """A service of a static snapshot: its sid and what ``add_service`` takes."""

    sid: Name


class DynamicSnapshotResource(DynamicResource):
    """A resource of a dynamic snapshot: its sid and what ``add_resource`` takes."""

    sid: Name


#: Entries of a long list validated at a time (see :func:`InParts`).
_PART = 1000


def _in_parts(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # pydantic reports every bad entry of a list, at some 1 KB of memory per error: refusing a
    # million empty objects took gigabytes. Part by part, validation stops at the first part
    # with an error and reports that part's errors.
    if type(value) is not list or len(value) <= _PART:
        return handler(value)
    validated = []
    for start in range(0, len(value), _PART):
        try:
            validated += handler(value[start : start + _PART])
        except ValidationError:
            handler(value[: start + _PART])  # raises the same errors, indexed as in the whole list
            raise
    return validated


def InParts(item: Any) -> Any:  # noqa: N802 (a type)
    """``list[item]``, validated :data:`_PART` entries at a time: a long list's errors are those
    of its first part with an error (a list's entries are checked one by one, so a valid list
    gives the same result, and the errors reported are the first ones, in order)."""
    return Annotated[list[item], WrapValidator(_in_parts)]


class StaticUsage(Record):
    """A full static cluster snapshot; the order of ``nodes`` is the node order."""

    mode: Literal["static"]
    nodes: InParts(StaticNode)
    resources: InParts(StaticSnapshotResource) = []


class DynamicUsage(Record):
    """A full dynamic cluster snapshot; the order of ``nodes`` is the node order."""

    mode: Literal["dynamic"]
    nodes: InParts(DynamicNode)
    resources: InParts(DynamicSnapshotResource) = []


#: A cluster snapshot, static or dynamic by its ``mode``.
Usage = Annotated[StaticUsage | DynamicUsage, Field(discriminator="mode")]


class CompactCandidate(Record):
    """A bundle as the HA manager builds it: ``leader`` sid, the bundle's ``resources`` (leader
    included) and the allowed target ``nodes``; one candidate per target, in ``nodes`` order.
    Any string, even an empty one: the engine reports an unknown name in upstream's order (an
    unknown leader anywhere in the list before an unknown target)."""

    leader: str
    nodes: InParts(str)
    resources: InParts(str)


class Candidate(Record):
    """An already expanded candidate: move ``sid`` with ``stats`` (only ``cpu`` and ``mem`` move)."""

    sid: Name
    source_node: Name = Field(alias="source-node")
    target_node: Name = Field(alias="target-node")
    stats: DynamicStats


def candidate_form(value: Any) -> str:
    """Which form a candidates list is: ``expanded`` if its first element is a :class:`Candidate`
    or an object with ``sid`` and no ``leader``, else ``compact`` (an empty list too). Decided by
    the first element only: validating 100k entries against both forms would double the cost,
    and a mixed list is an error either way."""
    if isinstance(value, list) and value:
        first = value[0]
        if isinstance(first, Candidate) or (isinstance(first, dict) and "leader" not in first and "sid" in first):
            return "expanded"
    return "compact"


class _PublishAsAnyOf:
    """Publish a union's JSON schema as ``anyOf``: an empty list is valid in both forms, which
    ``oneOf`` would reject."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: GetJsonSchemaHandler) -> dict:
        schema = handler(core_schema)
        if "oneOf" in schema:
            schema["anyOf"] = schema.pop("oneOf")
        return schema


#: Candidates: a list of :class:`CompactCandidate` or a list of :class:`Candidate`.
Candidates = Annotated[
    Annotated[InParts(CompactCandidate), Tag("compact")] | Annotated[InParts(Candidate), Tag("expanded")],
    Discriminator(candidate_form),
    _PublishAsAnyOf(),
]

#: Stats of a resource to start: :class:`StaticStats` for a static cluster, :class:`DynamicStats`
#: for a dynamic one (tried in that order of completeness: dynamic first).
StartStats = Annotated[DynamicStats | StaticStats, Field(union_mode="left_to_right")]
