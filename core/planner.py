"""The rebalance planner: a dry run of the HA manager's ``load_balance`` repeated until it stops.

Each step scores the candidates on the planned state exactly as one HA round would (the same
scorers with limit 1, through :func:`core.explain.explain_batch`), checks threshold and margin
as ``ha-manager.md`` §7.4 does, and applies the chosen move to a model of the cluster of its
own; the scheduler passed in is never changed. Loads and imbalances are fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .candidates import CompactCandidate, CompactColumns, Migration, bundles_usage, expand_compact
from .errors import InvalidInputError
from .explain import ClusterLoad, check_fraction, cluster_load, explain_batch
from .imbalance import Formula
from .modes import Scheduler
from .scheduler import Method, calculate_node_imbalance, check_method
from .stats import NodeStats, ResourceStats, add_running, remove_running
from .usage import Resource, Usage
from .verdicts import HA_MARGIN, HA_THRESHOLD, MAX_STEPS, NO_IMPROVEMENT, PLAN_MAX_STEPS


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One planned move: the bundle led by ``migration.sid`` (all its ``resources``) goes from
    ``migration.source_node`` to ``migration.target_node``.

    ``expected_imbalance``: the scorer's truncated what-if value (what the HA manager logs);
    ``imbalance_before``/``imbalance_after``: the planned state's imbalance around the move.
    In dynamic mode ``imbalance_after`` truncates to ``expected_imbalance``; in static mode
    they can differ (the move recounts the bundle from scratch, e.g. maxcpu 0 = the whole node).
    """

    migration: Migration
    resources: tuple[str, ...]
    expected_imbalance: float
    imbalance_before: float
    imbalance_after: float


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """The moves in order, why the plan stopped (``stop_reason`` in :data:`STOP_REASONS`, and
    ``stop_message`` as a sentence), and every node's load before and after the whole plan."""

    method: Method
    formula: Formula
    threshold: float
    margin: float
    max_steps: int | None
    allow_repeat: bool
    steps: tuple[PlanStep, ...]
    stop_reason: str
    stop_message: str
    before: ClusterLoad
    after: ClusterLoad


def plan_rebalance(
    scheduler: Scheduler,
    candidates: CompactColumns,
    method: Method = "bruteforce",
    threshold: float = HA_THRESHOLD,
    margin: float = HA_MARGIN,
    max_steps: int | None = PLAN_MAX_STEPS,
    allow_repeat: bool = False,
) -> RebalancePlan:
    """Plan rebalancing moves on a copy of ``scheduler``'s cluster until one HA check says stop.
    ``candidates``: bundles as columns (:meth:`CompactColumns.of` makes them of a list).

    Per step: stop when the imbalance is <= ``threshold``, after ``max_steps`` moves (None: no
    limit), when no candidate is left, when no move lowers the imbalance (predicted, or once
    applied), or when the best move's relative improvement is below ``margin``. Without
    ``allow_repeat`` a bundle whose resources already moved is not moved again; with it, a
    moved bundle may go anywhere its ``nodes`` allow except where it is. Every step strictly
    lowers the imbalance, so the plan ends even without a step limit.

    Static: a move re-adds the bundle's resources on the target (same stats and running state).
    Dynamic: the measured node stats shift by the bundle's cpu and mem (source clamped at 0, as
    the what-if assumes) and the resources' placement changes. Errors: those of the scorers, and
    InvalidInputError for bad options or non-compact candidates.
    """
    method = check_method(method)
    threshold, margin = _required_fraction("threshold", threshold), _required_fraction("margin", margin)
    max_steps = _check_max_steps(max_steps)
    if not isinstance(candidates, CompactColumns):
        problem = "the planner needs compact candidates (bundles with their target nodes, as CompactColumns)"
        raise InvalidInputError("candidates", problem)
    all_bundles = candidates.bundles()
    aggregation, formula = scheduler.balance_view, scheduler.formula
    usage = _copy(scheduler.usage)
    moved: set[str] = set()
    steps: list[PlanStep] = []
    before = cluster_load(usage.view(aggregation), formula)
    while True:
        view = usage.view(aggregation)
        imbalance = calculate_node_imbalance(view, formula)
        if len(steps) == max_steps and imbalance > threshold:
            reason, message = MAX_STEPS, f"Stopped after the step limit of {max_steps} moves."
            break
        bundles = _open_bundles(usage, all_bundles, moved, allow_repeat)
        batch = expand_compact(usage, view, CompactColumns.of(bundles))
        why = explain_batch(batch, method, formula, 1, threshold, margin)
        if not why.would_migrate:
            reason, message = why.reason, why.message
            break
        choice = why.chosen[0]
        bundle = _bundle_of_row(bundles, choice.index)
        planned = _moved(usage, bundle, choice.migration.target_node, scheduler.mode == "dynamic")
        after = calculate_node_imbalance(planned.view(aggregation), formula)
        if not after < imbalance:
            reason, message = NO_IMPROVEMENT, _not_lower_message(choice.migration, imbalance, after)
            break
        resources = tuple(dict.fromkeys(bundle.resources))
        steps.append(PlanStep(choice.migration, resources, choice.imbalance, imbalance, after))
        moved.update(resources)
        usage = planned
    after_plan = cluster_load(usage.view(aggregation), formula)
    options = (method, formula, threshold, margin, max_steps, allow_repeat)
    return RebalancePlan(*options, tuple(steps), reason, message, before, after_plan)


def _required_fraction(field: str, value: object) -> float:
    if value is None:
        raise InvalidInputError(field, "must be a finite number >= 0, got None")
    return check_fraction(field, value)


def _check_max_steps(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError("max_steps", f"must be a non-negative integer or null, got {value!r}")
    return value


def _not_lower_message(migration: Migration, imbalance: float, after: float) -> str:
    return (
        f"Moving {migration.sid} from {migration.source_node} to {migration.target_node} was expected to lower the "
        f"imbalance {imbalance:.4f}, but once applied it leaves {after:.4f}."
    )


def _open_bundles(
    usage: Usage, candidates: Sequence[CompactCandidate], moved: set[str], allow_repeat: bool
) -> list[CompactCandidate]:
    """The bundles still allowed to move. A bundle that moved is dropped, or with ``allow_repeat``
    loses its new current node from its targets, unless its members are now on different nodes
    (another bundle moved some of them), which HA's candidate generation skips
    (``ha-manager.md`` 7.3); the others go to the scorer as given, so their validation errors are
    the scorer's."""
    open_bundles = []
    for bundle in candidates:
        if moved.isdisjoint(bundle.resources):
            open_bundles.append(bundle)
        elif allow_repeat:
            places = {getattr(usage.resource(sid), "current", None) for sid in bundle.resources}
            if len(places) > 1:
                continue
            here = usage.resource(bundle.leader).current
            targets = tuple(name for name in bundle.nodes if name != here)
            open_bundles.append(CompactCandidate(bundle.leader, tuple(bundle.resources), targets))
    return open_bundles


def _bundle_of_row(bundles: list[CompactCandidate], row: int) -> CompactCandidate:
    """The bundle behind expanded candidate ``row`` (expansion goes bundle by bundle, one row per target)."""
    for bundle in bundles:
        if row < len(bundle.nodes):
            return bundle
        row -= len(bundle.nodes)
    raise IndexError(row)


def _moved(usage: Usage, bundle: CompactCandidate, target: str, dynamic: bool) -> Usage:
    """A new usage with ``bundle`` moved to ``target``; ``usage`` is left as it is."""
    node_stats = {}
    if dynamic:
        (source,), (cpu,), (mem,) = bundles_usage(usage, [bundle.leader], [bundle.resources])
        stats = ResourceStats(cpu, 0.0, mem, 0)  # only the running usage moves (remove_running, add_running)
        node_stats = {
            source: remove_running(usage.node_stats(source), stats),
            target: add_running(usage.node_stats(target), stats),
        }
    return _copy(usage, node_stats, tuple(dict.fromkeys(bundle.resources)), target)


def _copy(usage: Usage, node_stats: dict[str, NodeStats] | None = None, moving=(), target: str | None = None) -> Usage:
    """Rebuild ``usage`` through its public methods, with some nodes' base stats replaced and the
    ``moving`` sids re-added, in that order, as stationary on ``target``.

    Re-adding last is what remove + add does on a scheduler, so each node sums its resources in
    the same order as the scheduler would (Usage keeps each node's resources in the order of the
    resource table, which is what this replays).
    """
    node_stats = node_stats or {}
    copy = Usage()
    for name in usage.node_names():
        copy.add_node(name, node_stats.get(name, usage.node_stats(name)))
    resources = usage.resources()
    for sid, resource in resources.items():
        if sid not in moving:
            copy.add_resource(sid, resource)
    for sid in moving:
        resource = resources[sid]
        copy.add_resource(sid, Resource(resource.stats, resource.running, target))
    return copy
