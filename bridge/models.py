"""The wire schema: pydantic v2 models for every method's params and result.

This module is the single source of the JSON-RPC contract's shapes (spec ``rpc.md``): the
method surface validates params with these models and ``rpc.discover`` generates its OpenRPC
document from them, so the two cannot drift.

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

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    Tag,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from core.limits import MAX_BYTES, MAX_CORES

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


def _no_negative_zero(value: float) -> float:
    return value + 0.0


# Constraints go left of a BeforeValidator: to its right, pydantic applies them as a separate
# step and publishes them as non-standard keys ("ge") instead of JSON Schema's ("minimum").

#: A non-empty name (node name, sid).
Name = Annotated[str, StringConstraints(min_length=1)]

#: Cores (cpu usage or limit): a finite number in [0, 2**53].
Cores = Annotated[
    float,
    Field(ge=0, le=MAX_CORES, allow_inf_nan=False),
    AfterValidator(_no_negative_zero),
]

#: A node's core count: an integer in [1, 2**53].
NodeCores = Annotated[int, Field(gt=0, le=int(MAX_CORES)), BeforeValidator(_integral_float_to_int)]

#: Bytes: an integer in [0, 2**62 - 1].
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES), BeforeValidator(_integral_float_to_int)]

#: A node's memory size: an integer number of bytes in [1, 2**62 - 1].
NodeBytes = Annotated[int, Field(gt=0, le=MAX_BYTES), BeforeValidator(_integral_float_to_int)]

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


class StaticUsage(Record):
    """A full static cluster snapshot; the order of ``nodes`` is the node order."""

    mode: Literal["static"]
    nodes: list[StaticNode]
    resources: list[StaticSnapshotResource] = []


class DynamicUsage(Record):
    """A full dynamic cluster snapshot; the order of ``nodes`` is the node order."""

    mode: Literal["dynamic"]
    nodes: list[DynamicNode]
    resources: list[DynamicSnapshotResource] = []


#: A cluster snapshot, static or dynamic by its ``mode``.
Usage = Annotated[StaticUsage | DynamicUsage, Field(discriminator="mode")]


class CompactCandidate(Record):
    """A bundle as the HA manager builds it: ``leader`` sid, the bundle's ``resources`` (leader
    included) and the allowed target ``nodes``; one candidate per target, in ``nodes`` order."""

    leader: Name
    nodes: list[Name]
    resources: list[Name]


class Candidate(Record):
    """An already expanded candidate: move ``sid`` with ``stats`` (only ``cpu`` and ``mem`` move)."""

    sid: Name
    source_node: Name = Field(alias="source-node")
    target_node: Name = Field(alias="target-node")
    stats: DynamicStats


def _candidate_form(value: Any) -> str:
    # Decide the list's form by its first element only: validating 100k entries against both
    # forms would double the cost, and a mixed list is an error either way.
    if isinstance(value, list) and value and isinstance(value[0], dict):
        first = value[0]
        if "leader" not in first and "sid" in first:
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
    Annotated[list[CompactCandidate], Tag("compact")] | Annotated[list[Candidate], Tag("expanded")],
    Discriminator(_candidate_form),
    _PublishAsAnyOf(),
]

#: Stats of a resource to start: :class:`StaticStats` for a static cluster, :class:`DynamicStats`
#: for a dynamic one (tried in that order of completeness: dynamic first).
StartStats = Annotated[DynamicStats | StaticStats, Field(union_mode="left_to_right")]


# -- params ---------------------------------------------------------------------------------


class Params(BaseModel):
    """A method's params: unknown names are refused. Field order is the positional order."""

    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)


class NoParams(Params):
    """No params (``[]``, ``{}`` or none)."""


class ClusterParams(Params):
    """Either a snapshot (``usage``) or a live scheduler (``scheduler``), exactly one."""

    usage: Usage | None = Field(default=None, description="the whole cluster; give this or 'scheduler'")
    scheduler: Handle | None = Field(default=None, description="work on this scheduler's state; give this or 'usage'")

    @model_validator(mode="after")
    def _exactly_one_cluster(self) -> ClusterParams:
        if (self.usage is None) == (self.scheduler is None):
            raise PydanticCustomError("cluster", "give exactly one of 'usage' and 'scheduler'")
        return self


_IMBALANCE = Field(
    default=None,
    description="imbalance formula: 'normalized' (crate 2.1.0) or 'raw' (crate 2.0.0); "
    "default: 'normalized' with 'usage', the scheduler's own with 'scheduler'",
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
    imbalance_threshold: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
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
    imbalance: Formula = "normalized"


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
    imbalance_threshold: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


class SelectTopsisParams(SchedulerParams):
    """Extra ``select_best_balancing_migration_topsis``."""

    candidates: Candidates


class StartServiceParams(SchedulerParams):
    """Static ``score_nodes_to_start_service``."""

    service_stats: StaticStats


class StartResourceParams(SchedulerParams):
    """Dynamic ``score_nodes_to_start_resource``."""

    resource_stats: DynamicStats


# -- results --------------------------------------------------------------------------------


class Result(BaseModel):
    """A result shape (results are built as plain JSON values; these models give their schema)."""


class Migration(Result):
    """Move ``sid`` from ``source-node`` to ``target-node``."""

    sid: str
    source_node: str = Field(alias="source-node")
    target_node: str = Field(alias="target-node")


class ScoredMigration(Result):
    """A migration and the node imbalance it would leave (truncated to 15 decimals)."""

    migration: Migration
    imbalance: float


#: ``[node name, score]``: score in [0, 1], higher is better.
StartScore = tuple[str, float]


class SchedulerHandle(Result):
    """The handle of a new scheduler."""

    scheduler: str


class Upstream(Result):
    """The upstream releases whose semantics crs-bridge follows."""

    crate: list[str] = Field(description="proxmox-resource-scheduling versions (2.0.0 raw, 2.1.0 normalized)")
    libpve_rs_perl: str = Field(alias="libpve-rs-perl")
    pve_ha_manager: str = Field(alias="pve-ha-manager")


class Limits(Result):
    """Limits the server enforces."""

    max_message_bytes: int = Field(description="larger messages are answered with -32600")
    max_bytes: int = Field(description="largest byte count accepted (mem, maxmem)")
    max_cores: float = Field(description="largest core count accepted (cpu, maxcpu)")
    max_error_details: int = Field(description="at most this many entries in an error's data.errors")


class BridgeInfo(Result):
    """What ``bridge.info`` returns."""

    name: str
    version: str
    upstream: Upstream
    imbalance_formulas: dict[str, str] = Field(description="formula name -> what it computes")
    default_imbalance: str
    migration_methods: list[str]
    framings: dict[str, str] = Field(description="framing name -> how a message is delimited")
    limits: Limits
    schedulers: int = Field(description="live scheduler handles")
