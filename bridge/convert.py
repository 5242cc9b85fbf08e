"""Validated wire models -> engine (core) values, and engine values -> JSON results.

Everything here runs after :mod:`bridge.models` accepted the params, so every number is within
:mod:`core.limits` and stats are built directly (the engine re-validates what a scheduler
stores, and checks what only it can: unknown nodes, duplicates, ...).
A snapshot is built into a fresh scheduler local to the call, so a failure leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import (
    CandidateColumns,
    CompactCandidate,
    CompactColumns,
    InvalidInputError,
    Migration,
    MigrationCandidate,
    NodeStats,
    Resource,
    ResourceStats,
    Scheduler,
    ScoredMigration,
    new_scheduler,
)
from ..core.imbalance import Formula
from . import models as m
from .fastpath import SnapshotRows


def static_stats(stats: m.StaticStats) -> ResourceStats:
    """Static stats: the configured ``maxcpu``/``maxmem`` are also the running usage."""
    return ResourceStats(stats.maxcpu, stats.maxcpu, stats.maxmem, stats.maxmem)


def dynamic_stats(stats: m.DynamicStats) -> ResourceStats:
    """Dynamic stats: measured usage and limits, field by field."""
    return ResourceStats(stats.cpu, stats.maxcpu, stats.mem, stats.maxmem)


def start_stats(stats: m.DynamicStats | m.StaticStats, mode: str) -> ResourceStats:
    """Stats of a resource to start on a ``mode`` cluster. Static takes ``maxcpu``/``maxmem`` of
    either shape; dynamic needs :class:`~bridge.models.DynamicStats` (InvalidInputError otherwise)."""
    if mode == "static":
        return static_stats(stats)
    if not isinstance(stats, m.DynamicStats):
        raise InvalidInputError("stats", "a dynamic cluster needs DynamicStats {cpu, maxcpu, mem, maxmem}")
    return dynamic_stats(stats)


def node_stats(stats: m.DynamicNodeStats | m.DynamicNode) -> NodeStats:
    """A dynamic node's measured stats."""
    return NodeStats(stats.cpu, stats.maxcpu, stats.mem, stats.maxmem)


def build_scheduler(usage: m.StaticUsage | m.DynamicUsage | SnapshotRows, formula: Formula) -> Scheduler:
    """A fresh scheduler holding the snapshot ``usage`` (validated by the models, or by the bulk
    checks of :func:`bridge.fastpath.usage_rows`): nodes, then resources, in list order.

    Duplicate node names are refused (InvalidInputError naming the entry: product decision 4);
    resource errors are upstream's (SchedulingError), as if added one by one.
    """
    rows = usage if isinstance(usage, SnapshotRows) else snapshot_rows(usage)
    _check_unique_names([name for name, _ in rows.nodes])
    scheduler = new_scheduler(rows.mode, formula)
    # Every value was checked against core.limits: the engine takes the stats as they are
    # (trusted) and checks only what needs its state (a third of the cost of a big snapshot).
    for name, stats in rows.nodes:
        if rows.mode == "static":
            scheduler.add_node(name, stats.maxcpu, stats.maxmem, trusted=True)
        else:
            scheduler.add_node(name, stats, trusted=True)
    scheduler.add_resources(rows.resources, trusted=True)
    return scheduler


def snapshot_rows(usage: m.StaticUsage | m.DynamicUsage) -> SnapshotRows:
    """A validated snapshot as engine values."""
    if usage.mode == "static":
        nodes = [(node.name, NodeStats(0.0, node.maxcpu, 0, node.maxmem)) for node in usage.nodes]
        stats_of = static_stats
    else:
        nodes = [(node.name, node_stats(node)) for node in usage.nodes]
        stats_of = dynamic_stats
    resources = [
        (res.sid, Resource(stats_of(res.stats), res.running, res.current_node, res.target_node))
        for res in usage.resources
    ]
    return SnapshotRows(usage.mode, nodes, resources)


def _check_unique_names(names: Sequence[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise InvalidInputError(f"usage.nodes[{i}].name", f"duplicate node name '{name}'")
        seen.add(name)


def candidates_to_core(
    candidates: Sequence[m.CompactCandidate] | Sequence[m.Candidate] | CandidateColumns | CompactColumns,
) -> list[CompactCandidate] | list[MigrationCandidate] | CandidateColumns | CompactColumns:
    """Convert a whole validated candidate list at once (one form per list).

    This is the single seam between wire and engine candidates. Candidates that passed
    :mod:`bridge.fastpath` arrive as :class:`core.CandidateColumns` or :class:`core.CompactColumns`
    and go to the engine as they are. Expanded candidates' stats are not re-checked: the models
    enforce the engine's bounds.
    """
    if isinstance(candidates, (CandidateColumns, CompactColumns)):
        return candidates
    if not candidates:
        return []
    if isinstance(candidates[0], m.CompactCandidate):
        return [CompactCandidate(c.leader, tuple(c.resources), tuple(c.nodes)) for c in candidates]
    return [
        MigrationCandidate(
            Migration(c.sid, c.source_node, c.target_node),
            ResourceStats(c.stats.cpu, c.stats.maxcpu, c.stats.mem, c.stats.maxmem),
        )
        for c in candidates
    ]


def scored_list(scored: Sequence[ScoredMigration]) -> list[dict]:
    """``[ScoredMigration]`` as JSON values."""
    return [s.to_wire() for s in scored]


def scored_or_none(scored: ScoredMigration | None) -> dict | None:
    """A ScoredMigration as a JSON value, or None."""
    return None if scored is None else scored.to_wire()


def start_scores(scores: Sequence[tuple[str, float]]) -> list[list]:
    """``[[name, score], ...]`` in node order."""
    return [[name, score] for name, score in scores]
