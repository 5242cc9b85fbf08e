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
from .imbalance import DEFAULT_FORMULA, FORMULAS, Formula, node_imbalance
from .modes import DynamicScheduler, Scheduler, StaticScheduler, new_scheduler
from .scheduler import METHODS, Method
from .stats import NodeStats, ResourceStats
from .usage import Aggregation, NodeView, Resource, Usage

#: Names loaded on first use: explanations and plans are rarely asked for, and their modules
#: (a dozen dataclasses) would add ~15 ms to every server start.
_LAZY = {
    "Explanation": "explain",
    "explain_migrations": "explain",
    "PlanStep": "planner",
    "RebalancePlan": "planner",
    "plan_rebalance": "planner",
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'core' has no attribute '{name}'")
    import importlib

    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)


__all__ = [
    "DEFAULT_FORMULA",
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
