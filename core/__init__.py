"""crs-bridge's scheduling engine: a re-implementation of Proxmox VE's cluster resource
scheduler (crate ``proxmox-resource-scheduling`` 2.0.0 / 2.1.0).

Layers: :mod:`~core.stats` (node and resource stats) -> :mod:`~core.usage` (the cluster model
and its aggregated views) -> :mod:`~core.candidates` / :mod:`~core.whatif` -> :mod:`~core.scheduler`
(imbalance, bruteforce, TOPSIS, start scoring), with the math in :mod:`~core.imbalance` and
:mod:`~core.topsis`. :mod:`~core.modes` offers the binding's method surface per mode.

The arithmetic rule (spec README decision 3), stated here once for every module of the engine:
every value is computed as the crate computes it for the nodes in insertion order, with the same
operations in the same order, so the answer has the same bits. Sums run left to right over the
nodes from 0.0 (never ``sum()``, ``math.fsum`` or ``np.sum``, whose order is not promised), squares
are products ``d * d``, maxima are running maxima from 0.0. There is no tolerance: two values an
ulp apart are different, and only bit-equal values tie. Ties are broken as the crate breaks them:
bruteforce by (sid, source node, target node) after truncation, TOPSIS candidates and start scores
by input order. Where upstream's binding has no single answer (it keeps nodes in a hash map, so it
sums in a random order), the engine gives the crate's answer for insertion order, every run. A
fast formula (:func:`~core.imbalance.imbalance_bounds`) may only filter candidates: every value
that is returned or decides a result is recomputed by this rule.
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
