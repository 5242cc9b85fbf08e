"""Explanations of a migration choice: what the scorer picks, the runner-up, the numbers behind
each, and, when nothing should move, why.

Every number comes from the scorers' own functions on the same view and candidate batch
(:mod:`core.scheduler`, :mod:`core.whatif`, :mod:`core.topsis`), so an explanation agrees with
``score_best_balancing_migration_candidates[_topsis]`` to the last bit. All loads and
imbalances are fractions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .candidates import CandidateBatch, Migration, ScoredMigration
from .errors import InvalidInputError
from .imbalance import DEFAULT_FORMULA, Formula
from .modes import Candidates, Scheduler
from .scheduler import (
    Method,
    calculate_node_imbalance,
    check_limit,
    check_method,
    score_bruteforce,
    scored_migrations,
    scored_rows,
    topsis_criteria,
    topsis_rows,
)
from .topsis import WEIGHTS, TopsisSolution, topsis_solve
from .usage import NodeView
from .verdicts import MARGIN_NOT_REACHED, MIGRATE, NO_CANDIDATES, NO_IMPROVEMENT, THRESHOLD_REACHED
from .whatif import WhatIf, what_if

#: TOPSIS criteria in matrix column order (see :func:`core.topsis.load_criteria`).
TOPSIS_CRITERIA = ("average-cpu", "highest-cpu", "average-memory", "highest-memory")


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node's cpu load, memory load and load (their mean), as fractions of its capacity."""

    name: str
    cpu: float
    mem: float
    load: float


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """Every node's load in node order, and the node imbalance (untruncated, the scheduler's formula)."""

    nodes: tuple[NodeLoad, ...]
    imbalance: float


def cluster_load(view: NodeView, formula: Formula) -> ClusterLoad:
    """The loads of ``view`` and their imbalance, exactly as :func:`calculate_node_imbalance` sees them."""
    loads = zip(view.names, view.cpu_loads().tolist(), view.mem_loads().tolist(), view.loads().tolist())
    return ClusterLoad(tuple(NodeLoad(*node) for node in loads), calculate_node_imbalance(view, formula))


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node's load before and after a migration (``before.name == after.name``)."""

    before: NodeLoad
    after: NodeLoad


@dataclass(frozen=True, slots=True)
class TopsisRow:
    """A candidate's TOPSIS numbers: its criteria (raw: 1 + RMS or 1 + max of the what-if loads,
    in :data:`TOPSIS_CRITERIA` order) and normalised (column divided by its L2 norm over all
    candidates), its weighted distances to the ideal best and worst, and its score in [0, 1]."""

    criteria: tuple[float, ...]
    normalised: tuple[float, ...]
    to_best: float
    to_worst: float
    score: float


@dataclass(frozen=True, slots=True)
class TopsisIdeal:
    """The TOPSIS reference points over all candidates: normalised weights, ideal best and worst
    (per criterion, :data:`TOPSIS_CRITERIA` order; every criterion is minimised)."""

    weights: tuple[float, ...]
    best: tuple[float, ...]
    worst: tuple[float, ...]

    @property
    def criteria(self) -> tuple[str, ...]:
        """The criteria's names, in the order of the other fields' values."""
        return TOPSIS_CRITERIA


@dataclass(frozen=True, slots=True)
class MigrationDetail:
    """One scored candidate: the migration, the scorer's (truncated) what-if imbalance, the load
    of its source and target node before and after, and its TOPSIS numbers (TOPSIS only).

    ``index`` is the candidate's position in the expanded candidate list (bundle, then target order).
    """

    index: int
    migration: Migration
    imbalance: float
    source: NodeChange
    target: NodeChange
    topsis: TopsisRow | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a scoring call chooses what it chooses, or why nothing should move.

    ``chosen``: what the scorer returns with ``limit`` (best first); ``runner_up``: the next one.
    ``best_imbalance``: the lowest truncated what-if imbalance of any candidate (for TOPSIS it may
    belong to another candidate than the chosen one). ``relative``: (current - chosen[0]) /
    current, None without candidates or at imbalance 0. ``reason``: :data:`MIGRATE` or why not
    (:data:`THRESHOLD_REACHED`, :data:`NO_CANDIDATES`, :data:`NO_IMPROVEMENT`,
    :data:`MARGIN_NOT_REACHED`, checked in that order); ``message``: the same as a sentence.
    """

    method: Method
    formula: Formula
    limit: int
    threshold: float | None
    margin: float | None
    current: ClusterLoad
    candidate_count: int
    chosen: tuple[MigrationDetail, ...]
    runner_up: MigrationDetail | None
    best_imbalance: float | None
    relative: float | None
    reason: str
    message: str
    topsis: TopsisIdeal | None = None

    @property
    def would_migrate(self) -> bool:
        """True when the first chosen migration passes every check given."""
        return self.reason == MIGRATE


def check_fraction(field: str, value: object) -> float | None:
    """Return ``value`` as a float if it is a finite number >= 0 (a threshold or margin), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(field, f"must be a finite number >= 0, got {value!r}")
    return float(value)


def explain_migrations(
    scheduler: Scheduler,
    candidates: Candidates,
    method: Method = "bruteforce",
    limit: int = 1,
    threshold: float | None = None,
    margin: float | None = None,
) -> Explanation:
    """Explain ``scheduler``'s scoring of ``candidates`` (columns of bundles or of expanded ones, see
    :data:`core.modes.Candidates`) with ``method`` and ``limit``; see :func:`explain_batch`. The
    scheduler is not changed."""
    return explain_batch(scheduler.candidate_batch(candidates), method, scheduler.formula, limit, threshold, margin)


def explain_batch(
    batch: CandidateBatch,
    method: Method = "bruteforce",
    formula: Formula = DEFAULT_FORMULA,
    limit: int = 1,
    threshold: float | None = None,
    margin: float | None = None,
) -> Explanation:
    """Explain the scoring of ``batch`` (over ``batch.view``) with ``method`` and ``limit`` (>= 1).

    ``threshold`` and ``margin`` (fractions, optional) add the HA manager's checks: nothing moves
    when the imbalance is already <= ``threshold``, or when the first choice lowers it by less
    than ``margin`` relative to the current imbalance. Scorer errors propagate unchanged.
    """
    method, limit = check_method(method), check_limit(limit)
    if limit < 1:
        raise InvalidInputError("limit", "must be at least 1 to explain a choice")
    threshold, margin = check_fraction("threshold", threshold), check_fraction("margin", margin)
    current = cluster_load(batch.view, formula)
    topsis = _topsis_scoring(batch) if method == "topsis" and len(batch) else None
    if topsis is None:
        rows, imbalances = scored_rows(batch, limit + 1, method, formula)
    else:  # the scorer's ranking on the scoring the details show, not a second scoring
        rows, imbalances = topsis_rows(topsis.what_if, topsis.solution.scores, limit + 1, formula)
    scored = scored_migrations(batch, rows, imbalances)
    details, ideal = _details(batch, rows.tolist(), scored, current, topsis)
    best = None
    if scored:
        best = scored[0].imbalance if method == "bruteforce" else score_bruteforce(batch, 1, formula)[0].imbalance
    relative = _relative(current.imbalance, scored[0].imbalance) if scored else None
    reason = _reason(current.imbalance, best, relative, threshold, margin)
    top = details[0] if details else None
    return Explanation(
        method=method,
        formula=formula,
        limit=limit,
        threshold=threshold,
        margin=margin,
        current=current,
        candidate_count=len(batch),
        chosen=tuple(details[:limit]),
        runner_up=details[limit] if len(details) > limit else None,
        best_imbalance=best,
        relative=relative,
        reason=reason,
        message=_message(reason, current.imbalance, top, best, relative, threshold, margin),
        topsis=ideal,
    )


def _relative(imbalance: float, target: float) -> float | None:
    # As the HA manager's load_balance; undefined for a perfectly balanced (or empty) cluster.
    return (imbalance - target) / imbalance if imbalance != 0.0 else None


def _reason(
    imbalance: float, best: float | None, relative: float | None, threshold: float | None, margin: float | None
) -> str:
    if threshold is not None and imbalance <= threshold:
        return THRESHOLD_REACHED
    if best is None:
        return NO_CANDIDATES
    if best >= imbalance:
        return NO_IMPROVEMENT
    if margin is not None and relative < margin:
        return MARGIN_NOT_REACHED
    return MIGRATE


def _message(
    reason: str,
    imbalance: float,
    top: MigrationDetail | None,
    best: float | None,
    relative: float | None,
    threshold: float | None,
    margin: float | None,
) -> str:
    if reason == THRESHOLD_REACHED:
        return f"The imbalance {imbalance:.4f} is at or under the threshold {threshold:.4f}; nothing needs to move."
    if reason == NO_CANDIDATES:
        return "There is no migration candidate: no bundle has an allowed target node."
    if reason == NO_IMPROVEMENT:
        return f"No migration would lower the imbalance {imbalance:.4f}: the best candidate would leave {best:.4f}."
    m = top.migration
    move = f"{m.sid} from {m.source_node} to {m.target_node}"
    # TOPSIS may choose a move that raises the imbalance, hence the signed change.
    change = f"takes the imbalance from {imbalance:.4f} to {top.imbalance:.4f} ({-relative:+.1%})"
    if reason == MARGIN_NOT_REACHED:
        return f"The chosen migration, {move}, {change}: less of a gain than the margin of {margin:.1%}."
    return f"Migrate {move}: it {change}."


@dataclass(frozen=True, slots=True)
class _TopsisScoring:
    """A batch's TOPSIS scoring with its intermediates: the what-ifs, the criteria (rows x 4) and
    the solution, computed once for both the ranking and the details."""

    what_if: WhatIf
    criteria: np.ndarray
    solution: TopsisSolution


def _topsis_scoring(batch: CandidateBatch) -> _TopsisScoring:
    """The TOPSIS scoring of ``batch`` (at least one candidate), as :func:`core.scheduler.score_topsis` does it."""
    w = what_if(batch)
    criteria = topsis_criteria(w)
    return _TopsisScoring(w, criteria, topsis_solve(criteria))


def _details(
    batch: CandidateBatch,
    rows: list[int],
    scored: list[ScoredMigration],
    current: ClusterLoad,
    topsis: _TopsisScoring | None,
) -> tuple[list[MigrationDetail], TopsisIdeal | None]:
    """The detail of each scored migration; ``rows``: the batch row the scorer ranked for each;
    ``topsis``: the scoring behind them under TOPSIS, None under bruteforce."""
    if not scored:
        return [], None
    if topsis is None:
        w, criteria, solution = what_if(batch), None, None
    else:
        w, criteria, solution = topsis.what_if, topsis.criteria, topsis.solution
    details = [_detail(w, row, s, current, criteria, solution) for row, s in zip(rows, scored)]
    ideal = None
    if solution is not None:
        ideal = TopsisIdeal(tuple(WEIGHTS.tolist()), tuple(solution.best.tolist()), tuple(solution.worst.tolist()))
    return details, ideal


def _detail(
    w: WhatIf,
    row: int,
    scored: ScoredMigration,
    current: ClusterLoad,
    criteria: np.ndarray | None,
    solution: TopsisSolution | None,
) -> MigrationDetail:
    batch = w.batch
    src, tgt = int(batch.src[row]), int(batch.tgt[row])
    source_after = NodeLoad(batch.view.names[src], float(w.cpu_src[row]), float(w.mem_src[row]), float(w.load_src[row]))
    target_after = NodeLoad(batch.view.names[tgt], float(w.cpu_tgt[row]), float(w.mem_tgt[row]), float(w.load_tgt[row]))
    topsis = None
    if solution is not None:
        topsis = TopsisRow(
            criteria=tuple(criteria[row].tolist()),
            normalised=tuple(solution.normalised[row].tolist()),
            to_best=float(solution.to_best[row]),
            to_worst=float(solution.to_worst[row]),
            score=float(solution.scores[row]),
        )
    return MigrationDetail(
        index=row,
        migration=scored.migration,
        imbalance=scored.imbalance,
        source=NodeChange(current.nodes[src], source_after),
        target=NodeChange(current.nodes[tgt], target_after),
        topsis=topsis,
    )
