"""The wire schema of every method's params: pydantic v2 models (their records and scalar types
are in :mod:`bridge.records`, the results' in :mod:`bridge.results`).

These models are the single source of the JSON-RPC contract's params shapes (spec ``rpc.md``): the
strict structs of :mod:`bridge.structs` are generated from them, they validate (and word the
errors of) whatever those structs refuse (:mod:`bridge.wire`), and ``rpc.discover`` generates its
OpenRPC document from them, so none of the three can drift from the others. :class:`Params` (a
method's params) refuses unknown names, so a misspelt option cannot pass silently. Field order is
the positional order.
"""

# No ``from __future__ import annotations`` here: pydantic would then compile and evaluate every
# annotation string when each model class is created (1.4% of a server start's instructions).
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Strict, Tag, model_validator
from pydantic_core import PydanticCustomError

from ..core.imbalance import DEFAULT_FORMULA
from ..core.verdicts import HA_MARGIN, HA_THRESHOLD, PLAN_MAX_STEPS
from .records import (
    Candidates,
    CompactCandidate,
    Count,
    DynamicNodeStats,
    DynamicResource,
    DynamicStats,
    Formula,
    Fraction,
    Handle,
    InParts,
    Method,
    Mode,
    Name,
    NodeBytes,
    NodeCores,
    StartStats,
    StaticService,
    StaticStats,
    Usage,
    _integral_float_to_int,
)

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
