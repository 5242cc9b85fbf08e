"""The result shapes: pydantic models that write the engine's values in the wire's names.

Each model is the one declaration of a result's wire shape: ``rpc.discover`` publishes its schema
(serialization mode), and :func:`bridge.wire.as_wire` serializes the engine's value through it,
reading the engine's attributes (``validation_alias``: the engine's name where it differs) and
writing the wire's (``alias``: kebab-case where upstream's are). Only the wire side knows those
names; the engine returns its own dataclasses.
"""

# No ``from __future__ import annotations`` here (see bridge/models.py).
from typing import Any, Literal, get_args

from pydantic import AliasPath, BaseModel, ConfigDict, Field

from ..core.verdicts import EXPLAIN_REASONS, STOP_REASONS
from .limits import LIMITS
from .records import Formula, Method


def _absent(value: object) -> bool:
    """Whether an optional part is left out of the answer (TOPSIS numbers under bruteforce)."""
    return value is None


#: Why a plan stopped (``stop-reason``).
StopReason = Literal[STOP_REASONS]
#: Why an explanation's choice would move (``migrate``) or not.
ExplainReason = Literal[EXPLAIN_REASONS]


class Result(BaseModel):
    """A result shape: read from an engine value's attributes, written with the wire's names."""

    # Built on first use: building at import would delay every server's start.
    model_config = ConfigDict(defer_build=True, from_attributes=True)


class Migration(Result):
    """Move ``sid`` from ``source-node`` to ``target-node``."""

    sid: str
    source_node: str = Field(alias="source-node", validation_alias="source_node")
    target_node: str = Field(alias="target-node", validation_alias="target_node")


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

    max_message_bytes: int = Field(description=LIMITS["max_message_bytes"])
    max_nodes: int = Field(description=LIMITS["max_nodes"])
    max_resources: int = Field(description=LIMITS["max_resources"])
    max_candidates: int = Field(description=LIMITS["max_candidates"])
    max_json_depth: int = Field(description=LIMITS["max_json_depth"])
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


class Loads(Result):
    """A node's cpu load, memory load and load (their mean): fractions of its capacity (> 1 when
    overcommitted)."""

    cpu_load: float = Field(alias="cpu-load", validation_alias="cpu")
    mem_load: float = Field(alias="mem-load", validation_alias="mem")
    load: float


class NodeLoad(Result):
    """One node's loads."""

    node: str = Field(validation_alias="name")
    cpu_load: float = Field(alias="cpu-load", validation_alias="cpu")
    mem_load: float = Field(alias="mem-load", validation_alias="mem")
    load: float


class ClusterLoad(Result):
    """Every node's loads in node order, and the node imbalance (untruncated)."""

    imbalance: float
    nodes: list[NodeLoad]


class PlanStep(Result):
    """One planned move: the bundle led by ``sid`` (all of ``resources``) from ``source-node`` to
    ``target-node``. ``expected-imbalance`` is the scorer's (truncated) value, as a single-move
    method returns it; ``imbalance-before``/``-after`` are the planned state's around the move."""

    sid: str = Field(validation_alias=AliasPath("migration", "sid"))
    source_node: str = Field(alias="source-node", validation_alias=AliasPath("migration", "source_node"))
    target_node: str = Field(alias="target-node", validation_alias=AliasPath("migration", "target_node"))
    resources: list[str]
    expected_imbalance: float = Field(alias="expected-imbalance", validation_alias="expected_imbalance")
    imbalance_before: float = Field(alias="imbalance-before", validation_alias="imbalance_before")
    imbalance_after: float = Field(alias="imbalance-after", validation_alias="imbalance_after")


class RebalancePlan(Result):
    """The moves in order, why the plan stopped, and every node's load before and after it."""

    method: Method
    imbalance_formula: Formula = Field(alias="imbalance-formula", validation_alias="formula")
    threshold: float
    margin: float
    max_steps: int | None = Field(alias="max-steps", validation_alias="max_steps")
    allow_repeat: bool = Field(alias="allow-repeat", validation_alias="allow_repeat")
    steps: list[PlanStep]
    stop_reason: StopReason = Field(alias="stop-reason", validation_alias="stop_reason")
    stop_message: str = Field(
        alias="stop-message", validation_alias="stop_message", description="the stop reason as a sentence"
    )
    before: ClusterLoad
    after: ClusterLoad


class NodeChange(Result):
    """A node's loads before and after a migration."""

    node: str = Field(validation_alias=AliasPath("before", "name"))
    before: Loads
    after: Loads


class TopsisRow(Result):
    """A candidate's TOPSIS numbers: raw and normalised criteria (in the order of
    ``topsis.criteria``), weighted distances to the ideal best and worst, score in [0, 1]."""

    criteria: list[float]
    normalised: list[float]
    distance_to_best: float = Field(alias="distance-to-best", validation_alias="to_best")
    distance_to_worst: float = Field(alias="distance-to-worst", validation_alias="to_worst")
    score: float


class TopsisIdeal(Result):
    """The TOPSIS reference points: criteria names, weights, ideal best and worst values."""

    criteria: list[str]
    weights: list[float]
    ideal_best: list[float] = Field(alias="ideal-best", validation_alias="best")
    ideal_worst: list[float] = Field(alias="ideal-worst", validation_alias="worst")


class MigrationDetail(Result):
    """One scored candidate: what the scorer returns for it (``migration``, ``imbalance``), its
    position in the expanded candidate list, its source and target loads before and after, and
    (TOPSIS only) its TOPSIS numbers."""

    candidate_index: int = Field(alias="candidate-index", validation_alias="index")
    migration: Migration
    imbalance: float
    source: NodeChange
    target: NodeChange
    topsis: TopsisRow | None = Field(default=None, description="TOPSIS only", exclude_if=_absent)


class Explanation(Result):
    """Why the scorer chooses what it chooses, or why nothing should move (``reason`` != 'migrate')."""

    method: Method
    imbalance_formula: Formula = Field(alias="imbalance-formula", validation_alias="formula")
    limit: int
    threshold: float | None
    margin: float | None
    current: ClusterLoad
    candidate_count: int = Field(alias="candidate-count", validation_alias="candidate_count")
    chosen: list[MigrationDetail] = Field(description="what the scorer returns with limit, best first")
    runner_up: MigrationDetail | None = Field(
        alias="runner-up", validation_alias="runner_up", description="the next one after chosen"
    )
    best_imbalance: float | None = Field(
        alias="best-imbalance",
        validation_alias="best_imbalance",
        description="lowest imbalance any candidate leaves (TOPSIS may choose another)",
    )
    relative_improvement: float | None = Field(
        alias="relative-improvement",
        validation_alias="relative",
        description="(current - chosen[0]) / current; null without candidates",
    )
    reason: ExplainReason
    message: str = Field(description="the reason as a sentence")
    topsis: TopsisIdeal | None = Field(default=None, description="TOPSIS only", exclude_if=_absent)


#: The result models whose values are the engine's (its dataclasses, read by attribute); the other
#: results are answers the bridge writes itself as JSON values (``bridge.info``, a new handle).
ENGINE_VALUES = (ScoredMigration, RebalancePlan, Explanation)


def from_engine(result: Any) -> bool:
    """Whether a method's result type ``result`` holds an engine value (a model of
    :data:`ENGINE_VALUES`, also in a list or as an option)."""
    return result in ENGINE_VALUES or any(map(from_engine, get_args(result)))
