"""Validated wire models -> engine (core) values, and engine values -> JSON results.

Everything here runs after :mod:`bridge.models` accepted the params, so every number is within
:mod:`core.limits` and stats are built directly (the engine re-validates what a scheduler
stores, and checks what only it can: unknown nodes, duplicates, ...).
A snapshot is built into a fresh scheduler local to the call, so a failure leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from core import (
    CandidateColumns,
    CompactCandidate,
    CompactColumns,
    InvalidInputError,
    Migration,
    MigrationCandidate,
    NodeStats,
    ResourceStats,
    Scheduler,
    ScoredMigration,
    new_scheduler,
)
from core.imbalance import Formula

from . import models as m


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


def build_scheduler(usage: m.StaticUsage | m.DynamicUsage, formula: Formula) -> Scheduler:
    """A fresh scheduler holding the snapshot ``usage``: nodes, then resources, in list order.

    Duplicate node names are refused (InvalidInputError naming the entry: product decision 4);
    resource errors are upstream's (SchedulingError), as if added one by one.
    """
    _check_unique_names(usage.nodes)
    scheduler = new_scheduler(usage.mode, formula)
    # The models checked every value against core.limits: the engine takes the stats as they are
    # (trusted) and checks only what needs its state (a third of the cost of a big snapshot).
    if usage.mode == "static":
        for node in usage.nodes:
            scheduler.add_node(node.name, node.maxcpu, node.maxmem, trusted=True)
        for res in usage.resources:
            stats = static_stats(res.stats)
            scheduler.add_service(res.sid, stats, res.running, res.current_node, res.target_node, trusted=True)
    else:
        for node in usage.nodes:
            scheduler.add_node(node.name, node_stats(node), trusted=True)
        for res in usage.resources:
            stats = dynamic_stats(res.stats)
            scheduler.add_resource(res.sid, stats, res.running, res.current_node, res.target_node, trusted=True)
    return scheduler


def _check_unique_names(nodes: Sequence[m.StaticNode | m.DynamicNode]) -> None:
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        if node.name in seen:
            raise InvalidInputError(f"usage.nodes[{i}].name", f"duplicate node name '{node.name}'")
        seen.add(node.name)


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
