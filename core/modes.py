"""Scheduler objects with the binding's method surface: :class:`StaticScheduler` mirrors
``PVE::RS::ResourceScheduling::Static``, :class:`DynamicScheduler` mirrors ``::Dynamic``.

Each holds one :class:`Usage` and an imbalance formula; queries aggregate the usage into a view
as upstream does, once per state (:meth:`Usage.view` keeps it until the next change).
"""

from __future__ import annotations

from collections.abc import Sequence

from .candidates import (
    CandidateBatch,
    CandidateColumns,
    CompactColumns,
    ScoredMigration,
    batch_from_columns,
    expand_compact,
)
from .imbalance import DEFAULT_FORMULA, Formula, check_formula
from .scheduler import (
    Method,
    calculate_node_imbalance,
    score_migrations,
    score_nodes_to_start,
    select_best_migration,
)
from .stats import NodeStats, ResourceStats
from .usage import Aggregation, NodeView, Resource, Usage

#: Candidates as the engine takes them: expanded ones as :class:`CandidateColumns`, compact ones
#: (bundles) as :class:`CompactColumns`; lists of candidate objects become columns through
#: :meth:`CandidateColumns.of` and :meth:`CompactColumns.of`.
Candidates = CandidateColumns | CompactColumns


def _checked(stats: NodeStats | ResourceStats, where: str):
    """``stats`` re-validated (README decision 4): typed stats can be built without ``checked``,
    and a zero capacity or a NaN must not reach the usage or a score. (:class:`Usage` takes stats
    as they are: a caller that checked them already may add them there.)
    """
    return type(stats).checked(stats.cpu, stats.maxcpu, stats.mem, stats.maxmem, where=where)


def _checked_resource(resource: Resource, where: str) -> Resource:
    return Resource(_checked(resource.stats, where), resource.running, resource.current, resource.target)


class Scheduler:
    """Common part of both modes: nodes, imbalance and migration scoring."""

    mode: str
    #: Aggregation for imbalance and migration scoring, and for start scoring.
    balance_view: Aggregation
    start_view: Aggregation

    def __init__(self, formula: Formula = DEFAULT_FORMULA) -> None:
        self.formula = check_formula(formula)
        self.usage = Usage()

    def remove_node(self, nodename: str) -> None:
        """Remove a node (no-op when unknown); see :meth:`Usage.remove_node`."""
        self.usage.remove_node(nodename)

    def list_nodes(self) -> list[str]:
        """Node names in insertion order."""
        return self.usage.node_names()

    def contains_node(self, nodename: str) -> bool:
        return self.usage.contains_node(nodename)

    def view(self, aggregation: Aggregation | None = None) -> NodeView:
        return self.usage.view(aggregation or self.balance_view)

    def calculate_node_imbalance(self) -> float:
        """Imbalance of the current node loads (fraction; formula of this scheduler)."""
        return calculate_node_imbalance(self.view(), self.formula)

    def add_resources(self, rows: Sequence[tuple[str, Resource]]) -> None:
        """Add ``(sid, resource)`` rows in order, as :meth:`_add_resource` one by one would (a
        snapshot's resources, say); stats checked as :func:`_checked` checks them."""
        self.usage.add_resources([(sid, _checked_resource(res, "resource.stats")) for sid, res in rows])

    def candidate_batch(self, candidates: Candidates) -> CandidateBatch:
        """The candidates over the balancing view: bundles expanded (:func:`expand_compact`),
        expanded ones checked (:func:`batch_from_columns`). TypeError for any other form."""
        if isinstance(candidates, CompactColumns):
            return expand_compact(self.usage, self.view(), candidates)
        if isinstance(candidates, CandidateColumns):
            return batch_from_columns(self.view(), candidates)
        raise TypeError(
            f"candidates must be CandidateColumns or CompactColumns (a list becomes them through their of()), "
            f"got {type(candidates).__name__}"
        )

    def score_best_balancing_migration_candidates(self, candidates: Candidates, limit: int) -> list[ScoredMigration]:
        """Bruteforce: the ``limit`` migrations leaving the lowest imbalance, best first."""
        return score_migrations(self.candidate_batch(candidates), limit, "bruteforce", self.formula)

    def score_best_balancing_migration_candidates_topsis(
        self, candidates: Candidates, limit: int
    ) -> list[ScoredMigration]:
        """TOPSIS: the first ``limit`` migrations in TOPSIS rank order."""
        return score_migrations(self.candidate_batch(candidates), limit, "topsis", self.formula)

    def select_best_balancing_migration(
        self, candidates: Candidates, imbalance_threshold: float | None = None, method: Method = "bruteforce"
    ) -> ScoredMigration | None:
        """Extra (product decision 5): see :func:`core.scheduler.select_best_migration`."""
        return select_best_migration(self.candidate_batch(candidates), method, self.formula, imbalance_threshold)

    def select_best_balancing_migration_topsis(self, candidates: Candidates) -> ScoredMigration | None:
        """Extra: the TOPSIS-best migration, or None."""
        return self.select_best_balancing_migration(candidates, None, "topsis")

    def _add_resource(self, sid: str, stats: ResourceStats, running: bool, current: str, target: str | None) -> None:
        self.usage.add_resource(sid, Resource(stats, bool(running), current, target))

    def _start_scores(self, stats: ResourceStats) -> list[tuple[str, float]]:
        return score_nodes_to_start(self.view(self.start_view), _checked(stats, "stats"))


class StaticScheduler(Scheduler):
    """Static mode: nodes by capacity only; every resource counts at its configured limits."""

    mode = "static"
    balance_view = Aggregation.STARTED
    start_view = Aggregation.STARTED

    def add_node(self, nodename: str, maxcpu: int, maxmem: int) -> None:
        """Add a node with ``maxcpu`` cores and ``maxmem`` bytes and no base usage."""
        self.usage.add_node(nodename, _checked(NodeStats(0.0, maxcpu, 0, maxmem), "node"))

    def add_service(
        self,
        sid: str,
        stats: ResourceStats,
        running: bool,
        current: str,
        target: str | None = None,
    ) -> None:
        """Add a service (``stats`` from :meth:`ResourceStats.static`); moving when ``target`` is set."""
        self._add_resource(sid, _checked(stats, "service.stats"), running, current, target)

    def add_service_usage_to_node(self, nodename: str, sid: str, stats: ResourceStats) -> None:
        """Legacy add; see :meth:`Usage.add_resource_usage_to_node`."""
        self.usage.add_resource_usage_to_node(nodename, sid, _checked(stats, "service_stats"))

    def remove_service_usage(self, sid: str) -> None:
        self.usage.remove_resource(sid)

    def score_nodes_to_start_service(self, stats: ResourceStats) -> list[tuple[str, float]]:
        """``[(node, score)]`` in node order for starting a service with static ``stats``."""
        return self._start_scores(stats)


class DynamicScheduler(Scheduler):
    """Dynamic mode: nodes carry measured usage; resources only matter for start scoring."""

    mode = "dynamic"
    balance_view = Aggregation.IDENTITY
    start_view = Aggregation.STARTING_AS_STARTED

    def add_node(self, nodename: str, stats: NodeStats) -> None:
        """Add a node with measured ``stats`` (cores and bytes in use, capacities)."""
        self.usage.add_node(nodename, _checked(stats, "stats"))

    def add_resource(
        self,
        sid: str,
        stats: ResourceStats,
        running: bool,
        current: str,
        target: str | None = None,
    ) -> None:
        """Add a resource with measured ``stats``; moving when ``target`` is set."""
        self._add_resource(sid, _checked(stats, "resource.stats"), running, current, target)

    def remove_resource(self, sid: str) -> None:
        self.usage.remove_resource(sid)

    def score_nodes_to_start_resource(self, stats: ResourceStats) -> list[tuple[str, float]]:
        """``[(node, score)]`` in node order for starting a resource with dynamic ``stats``."""
        return self._start_scores(stats)


def new_scheduler(mode: str, formula: Formula = DEFAULT_FORMULA) -> Scheduler:
    """A fresh scheduler for ``mode`` 'static' or 'dynamic'."""
    from .errors import InvalidInputError

    classes = {"static": StaticScheduler, "dynamic": DynamicScheduler}
    if mode not in classes:
        raise InvalidInputError("mode", f"must be 'static' or 'dynamic', got {mode!r}")
    return classes[mode](formula)
