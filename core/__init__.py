"""crs-bridge's scheduling engine: a re-implementation of Proxmox VE's cluster resource
scheduler (crate ``proxmox-resource-scheduling`` 2.0.0 / 2.1.0).

Layers: :mod:`~core.stats` (node and resource stats) -> :mod:`~core.usage` (the cluster model
and its aggregated views) -> :mod:`~core.candidates` / :mod:`~core.whatif` -> :mod:`~core.scheduler`
(imbalance, bruteforce, TOPSIS, start scoring), with the math in :mod:`~core.imbalance` and
:mod:`~core.topsis`. :mod:`~core.modes` offers the binding's method surface per mode.
"""

from .candidates import (
    CandidateBatch,
    CandidateColumns,
    CompactCandidate,
    CompactColumns,
    Migration,
    MigrationCandidate,
    ScoredMigration,
)
from .errors import InvalidInputError, SchedulingError
from .explain import Explanation, explain_migrations
from .imbalance import FORMULAS, Formula, node_imbalance
from .modes import DynamicScheduler, Scheduler, StaticScheduler, new_scheduler
from .planner import PlanStep, RebalancePlan, plan_rebalance
from .scheduler import METHODS, Method
from .stats import NodeStats, ResourceStats
from .usage import Aggregation, NodeView, Resource, Usage

__all__ = [
    "FORMULAS",
    "METHODS",
    "Aggregation",
    "CandidateBatch",
    "CandidateColumns",
    "CompactCandidate",
    "CompactColumns",
    "DynamicScheduler",
    "Explanation",
    "Formula",
    "InvalidInputError",
    "Method",
    "Migration",
    "MigrationCandidate",
    "NodeStats",
    "NodeView",
    "PlanStep",
    "RebalancePlan",
    "Resource",
    "ResourceStats",
    "SchedulingError",
    "ScoredMigration",
    "Scheduler",
    "StaticScheduler",
    "Usage",
    "explain_migrations",
    "new_scheduler",
    "node_imbalance",
    "plan_rebalance",
]
