"""The wire schema: pydantic v2 models for every method's params and result.

This module is the single source of the JSON-RPC contract's params shapes (spec ``rpc.md``; the
results' are in :mod:`bridge.results`): the strict decoder of :mod:`bridge.wire` is generated from
these models, they validate (and word the errors
of) whatever that decoder refuses, and ``rpc.discover`` generates its OpenRPC document from them,
so none of the three can drift from the others.

Conventions:

* Units: cpu values are cores (numbers), memory values are bytes (integers; integral floats such
  as ``4.0`` are accepted as the integer they hold). Key names are the binding's own, kebab-case
  where upstream's are (``current-node``), so a Perl hash passes through unchanged.
* Strict types: a number given as a string, or a bool given as a number, is refused, except
  ``running`` (see :data:`Running`), which follows Perl truthiness as upstream's binding does.
* :class:`Record` (nested objects) ignores unknown keys as upstream's binding does;
  :class:`Params` (a method's params) refuses unknown names, so a misspelt option cannot pass
  silently.
* Bounds are those of :mod:`core.limits` (finite, no overflow), so values that pass these models
  also pass the engine's own checks.
"""

# No ``from __future__ import annotations`` here: pydantic would then compile and evaluate every
# annotation string when each model class is created (1.4% of a server start's instructions).
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    Strict,
    StringConstraints,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..core.imbalance import DEFAULT_FORMULA
from ..core.limits import MAX_BYTES, MAX_CORES
from ..core.verdicts import HA_MARGIN, HA_THRESHOLD, PLAN_MAX_STEPS

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


# -- params ---------------------------------------------------------------------------------


class Params(BaseModel):
    """A method's params: unknown names are refused. Field order is the positional order."""

    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)


def wire_names(model: type[BaseModel]) -> tuple[str, ...]:
    """The names of ``model``'s fields on the wire (their aliases, if any), in field order."""
    return tuple(info.alias or name for name, info in model.model_fields.items())


class NoParams(Params):
    """No params (``[]``, ``{}`` or none)."""


class ClusterParams(Params):
    """Either a snapshot (``usage``) or a live scheduler (``scheduler``), exactly one."""

    #: Of these fields exactly one is given (not null).
    exactly_one: ClassVar[tuple[str, ...]] = ("usage", "scheduler")

    usage: Usage | None = Field(default=None, description="the whole cluster; give this or 'scheduler'")
    scheduler: Handle | None = Field(default=None, description="work on this scheduler's state; give this or 'usage'")

    @model_validator(mode="after")
    def _exactly_one_cluster(self) -> "ClusterParams":
        if sum(getattr(self, name) is not None for name in self.exactly_one) != 1:
            raise PydanticCustomError("cluster", "give exactly one of 'usage' and 'scheduler'")
        return self


_IMBALANCE = Field(
    default=None,
    description="imbalance formula: 'normalized' (crate 2.1.0) or 'raw' (crate 2.0.0); "
    f"default: '{DEFAULT_FORMULA}' with 'usage', the scheduler's own with 'scheduler'",
)


class ScoreMigrationsParams(ClusterParams):
    """Params of ``score_best_balancing_migrations``."""

    candidates: Candidates
    limit: Count = Field(description="return at most this many, best first")
    method: Method = "bruteforce"
    imbalance: Formula | None = _IMBALANCE


class SelectMigrationParams(ClusterParams):
    """Params of ``select_best_balancing_migration``."""

    candidates: Candidates
    method: Method = "bruteforce"
    imbalance: Formula | None = _IMBALANCE
    imbalance_threshold: Fraction | None = Field(
        default=None,
        description="bruteforce only: the first candidate (input order) at or under this imbalance wins; "
        "null or none at or under it: the best",
    )


class ImbalanceParams(ClusterParams):
    """Params of ``calculate_node_imbalance``."""

    imbalance: Formula | None = _IMBALANCE


class StartScoreParams(ClusterParams):
    """Params of ``score_nodes_to_start_resource``."""

    stats: StartStats = Field(description="StaticStats for a static cluster, DynamicStats for a dynamic one")


class NewSchedulerParams(Params):
    """Params of ``scheduler.new``."""

    mode: Mode
    imbalance: Formula = DEFAULT_FORMULA
    scheduler: Handle | None = Field(
        default=None,
        description="the handle to register the new scheduler under, chosen by the client (refused while"
        " a live scheduler has it), so that the client can send its next requests without waiting"
        " for this answer; not given: the server picks one (s1, s2, ...)",
    )


class SchedulerParams(Params):
    """Params of a ``scheduler.*`` method: the handle first, then the binding's parameters."""

    scheduler: Handle


class StaticAddNodeParams(SchedulerParams):
    """Static ``add_node``: ``maxcpu`` cores and ``maxmem`` bytes."""

    nodename: Name
    maxcpu: NodeCores
    maxmem: NodeBytes


class DynamicAddNodeParams(SchedulerParams):
    """Dynamic ``add_node``: measured node ``stats``."""

    nodename: Name
    stats: DynamicNodeStats


class NodeNameParams(SchedulerParams):
    """``remove_node`` / ``contains_node``: any name (an unknown one is no error)."""

    nodename: str


class AddServiceParams(SchedulerParams):
    """Static ``add_service``."""

    sid: Name
    service: StaticService


class AddResourceParams(SchedulerParams):
    """Dynamic ``add_resource``."""

    sid: Name
    resource: DynamicResource


class AddServiceUsageParams(SchedulerParams):
    """Static legacy ``add_service_usage_to_node``."""

    nodename: Name
    sid: Name
    service_stats: StaticStats


class SidParams(SchedulerParams):
    """``remove_service_usage`` / ``remove_resource``: any sid (an unknown one is no error)."""

    sid: str


class ScoreCandidatesParams(SchedulerParams):
    """``score_best_balancing_migration_candidates[_topsis]``."""

    candidates: Candidates
    limit: Count


class SelectCandidatesParams(SchedulerParams):
    """Extra ``select_best_balancing_migration`` (bruteforce)."""

    candidates: Candidates
    imbalance_threshold: Fraction | None = None


class SelectTopsisParams(SchedulerParams):
    """Extra ``select_best_balancing_migration_topsis``."""

    candidates: Candidates


class StageCandidatesParams(SchedulerParams):
    """Extra ``stage_candidates``: candidates sent in parts, scored by ``score_staged_candidates``."""

    candidates: Candidates
    append: bool = Field(default=False, description="add to the candidates staged so far; false: stage afresh")


class ScoreStagedParams(SchedulerParams):
    """Extra ``score_staged_candidates``: score the staged candidates as one list."""

    count: Count = Field(
        description="entries staged (of the candidates lists, in all) as the caller counts them; "
        "another count is an error, so that a lost or stale staging cannot pass for the caller's"
    )
    limit: Count = Field(description="return at most this many, best first")
    method: Method = "bruteforce"


class StartServiceParams(SchedulerParams):
    """Static ``score_nodes_to_start_service``."""

    service_stats: StaticStats


class StartResourceParams(SchedulerParams):
    """Dynamic ``score_nodes_to_start_resource``."""

    resource_stats: DynamicStats


# -- bulk mutations (scheduler.apply) -------------------------------------------------------

#: The mutations ``scheduler.apply`` takes per mode: method -> the params model of its single
#: call. A mutation's arguments are validated by the very field types of that model, so an entry
#: accepts exactly what the single call accepts.
MUTATIONS: dict[str, dict[str, type[SchedulerParams]]] = {
    "static": {
        "add_node": StaticAddNodeParams,
        "remove_node": NodeNameParams,
        "add_service": AddServiceParams,
        "add_service_usage_to_node": AddServiceUsageParams,
        "remove_service_usage": SidParams,
    },
    "dynamic": {
        "add_node": DynamicAddNodeParams,
        "remove_node": NodeNameParams,
        "add_resource": AddResourceParams,
        "remove_resource": SidParams,
    },
}

#: Union tag of a mutation entry (``"<mode> <method>"``) -> wire names of its arguments, in
#: positional order; error locations name the argument instead of its position in the entry.
MUTATION_ARGS: dict[str, tuple[str, ...]] = {
    f"{mode} {method}": wire_names(model)[1:]  # after the handle
    for mode, methods in MUTATIONS.items()
    for method, model in methods.items()
}


def _mutation_entry(mode: str, method: str, model: type[SchedulerParams]) -> Any:
    # [method, args...]: a tuple of the method's name and the single call's field types (with
    # their constraints), tagged for the union. Lax only about being a list rather than a tuple.
    fields = [f for name, f in model.model_fields.items() if name != "scheduler"]
    args = [Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation for f in fields]
    entry = Annotated[tuple[(Literal[method], *args)], Strict(False)]
    return Annotated[entry, Tag(f"{mode} {method}")]


def _mutation_union(mode: str) -> Any:
    methods = MUTATIONS[mode]
    expected = ", ".join(methods)

    def tag(entry: Any) -> str | None:  # a list as decoded, a tuple as validated (to serialize it)
        if type(entry) in (list, tuple) and entry and type(entry[0]) is str:
            return f"{mode} {entry[0]}"
        return None

    entries = tuple(_mutation_entry(mode, method, model) for method, model in methods.items())
    return Annotated[
        Union[entries],  # noqa: UP007 (a union built from a tuple of types)
        Discriminator(
            tag,
            custom_error_type="mutation",
            custom_error_message=f"a mutation must be [method, args...] with method one of {expected} "
            f"(the {mode} scheduler's); args in the binding's order",
        ),
    ]


StaticMutation = _mutation_union("static")
DynamicMutation = _mutation_union("dynamic")

_MUTATIONS_DESCRIPTION = (
    "applied in order, all or nothing; each entry is [method, args...] with the args of "
    "scheduler.<method> after the handle, in the binding's order"
)


class StaticApplyParams(SchedulerParams):
    """``scheduler.apply`` on a static scheduler: ``add_node``, ``remove_node``, ``add_service``,
    ``add_service_usage_to_node``, ``remove_service_usage``."""

    mutations: InParts(StaticMutation) = Field(description=_MUTATIONS_DESCRIPTION)


class DynamicApplyParams(SchedulerParams):
    """``scheduler.apply`` on a dynamic scheduler: ``add_node``, ``remove_node``, ``add_resource``,
    ``remove_resource``."""

    mutations: InParts(DynamicMutation) = Field(description=_MUTATIONS_DESCRIPTION)


# -- rebalance plan and explanations -----------------------------------

#: How many choices to explain: an integer >= 1.
ExplainLimit = Annotated[int, Field(ge=1), BeforeValidator(_integral_float_to_int)]

_THRESHOLD = "stop (move nothing) when the imbalance is at or under this fraction"
_MARGIN = "stop when the best move lowers the imbalance by less than this fraction of it (relative)"
_MAX_STEPS = "plan at most this many moves; null: no limit (every move strictly lowers the imbalance)"
_ALLOW_REPEAT = "let a bundle that already moved move again (never back to where it is)"
_PLAN_CANDIDATES = "compact candidates (bundles with their target nodes), as the HA manager builds them"


class PlanParams(ClusterParams):
    """Params of ``plan_rebalance``: a dry run of the HA manager's rebalancing, round after round."""

    candidates: InParts(CompactCandidate) = Field(description=_PLAN_CANDIDATES)
    method: Method = "bruteforce"
    imbalance: Formula | None = _IMBALANCE
    threshold: Fraction = Field(default=HA_THRESHOLD, description=_THRESHOLD)
    margin: Fraction = Field(default=HA_MARGIN, description=_MARGIN)
    max_steps: Count | None = Field(default=PLAN_MAX_STEPS, description=_MAX_STEPS)
    allow_repeat: bool = Field(default=False, description=_ALLOW_REPEAT)


class SchedulerPlanParams(SchedulerParams):
    """``scheduler.plan_rebalance``: :class:`PlanParams` on a live scheduler (its own formula);
    positional ``[handle, candidates, method, threshold, margin, max_steps, allow_repeat]``."""

    candidates: InParts(CompactCandidate) = Field(description=_PLAN_CANDIDATES)
    method: Method = "bruteforce"
    threshold: Fraction = Field(default=HA_THRESHOLD, description=_THRESHOLD)
    margin: Fraction = Field(default=HA_MARGIN, description=_MARGIN)
    max_steps: Count | None = Field(default=PLAN_MAX_STEPS, description=_MAX_STEPS)
    allow_repeat: bool = Field(default=False, description=_ALLOW_REPEAT)


class ExplainParams(ClusterParams):
    """Params of ``explain_migrations``: those of ``score_best_balancing_migrations`` (``limit``
    defaults to 1, the HA manager's) plus the HA manager's optional checks."""

    candidates: Candidates
    limit: ExplainLimit = Field(default=1, description="explain the first this many choices (and the next one)")
    method: Method = "bruteforce"
    imbalance: Formula | None = _IMBALANCE
    threshold: Fraction | None = Field(default=None, description=f"{_THRESHOLD}; null: no such check")
    margin: Fraction | None = Field(default=None, description=f"{_MARGIN}; null: no such check")
