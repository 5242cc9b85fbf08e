"""Scoring on a :class:`NodeView`: node imbalance, best balancing migrations (bruteforce and
TOPSIS) and nodes to start a resource on.

Speed (product decision 6): a migration changes two node loads, so bruteforce bounds every
candidate's imbalance in O(1) after O(N) preparation, then recomputes by the arithmetic rule of
:mod:`core` only the candidates that can still reach the top ``limit`` (ties at the cut
included). TOPSIS needs the criteria of all candidates; their sums over nodes are formed by that
rule too, vectorised over candidates.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .candidates import CandidateBatch, ScoredMigration
from .errors import InvalidInputError
from .imbalance import DEFAULT_FORMULA, Formula, imbalance_bounds, imbalance_from_sums, node_imbalance, truncate
from .stats import ResourceStats
from .topsis import load_criteria, topsis_rank, topsis_scores
from .usage import NodeView
from .whatif import WhatIf, exact_load_sums, square_sums_and_maxima, what_if

Method = Literal["bruteforce", "topsis"]
METHODS: tuple[Method, ...] = ("bruteforce", "topsis")

#: Exact imbalances of all candidates cost some 15 + 2n NumPy calls and work on the candidates x
#: nodes cells (:func:`core.whatif.exact_load_sums`); bounding first some 70 calls and work per
#: candidate. Measured (a whole bruteforce call) on 2 to 64 nodes: the exact computation of all
#: costs less up to 32 nodes and this many cells (900 candidates on 4 nodes: 30 us against 85;
#: 8000 on 4: 0.36 ms against 0.59; 1000 on 32: 0.12 ms both), bounding first beyond (4000 on
#: 16: 0.23 ms against 0.22; 500 on 64: 0.12 against 0.10).
_EXACT_ALL_CELLS = 1 << 15
_EXACT_ALL_NODES = 32

#: Below this many candidates, a selection with a threshold checks every one exactly (in input
#: order, stopping at the first within it) rather than bounding first.
_SELECT_EXACT_ALL_BELOW = 64

#: Candidates bounded at a time. Temporaries of this size stay in cache and in malloc's heap;
#: whole-batch ones are mmapped and page-faulted afresh on every call (half the time at 100k).
_BOUND_BLOCK = 16384

#: No candidate rows, and no imbalances.
_NO_ROWS = (np.empty(0, dtype=np.int64), np.empty(0))

#: Up to this many candidates, exact imbalances are computed one candidate at a time, in Python:
#: some 0.3 us per node each, against a fixed 15 us and more of :func:`core.whatif.exact_load_sums`
#: (they cost the same at 10 to 15 candidates, on 3 and on 1024 nodes alike).
_ONE_AT_A_TIME_UP_TO = 12


def check_limit(limit: object) -> int:
    """Return ``limit`` if it is a non-negative integer (any size: it is never allocated for)."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        if isinstance(limit, float) and limit.is_integer() and limit >= 0:
            return int(limit)
        raise InvalidInputError("limit", f"must be a non-negative integer, got {limit!r}")
    if limit < 0:
        raise InvalidInputError("limit", f"must be a non-negative integer, got {limit}")
    return limit


def check_method(method: str) -> Method:
    if method not in METHODS:
        raise InvalidInputError("method", f"must be 'bruteforce' or 'topsis', got {method!r}")
    return method  # type: ignore[return-value]


def calculate_node_imbalance(view: NodeView, formula: Formula = DEFAULT_FORMULA) -> float:
    """Imbalance of the view's node loads (see :func:`core.imbalance.node_imbalance`)."""
    return node_imbalance(view.loads().tolist(), formula)


#: ``rows`` that stand for every row of a batch, in order: its columns are then used as they are,
#: not gathered afresh (four copies of every column: 4 of a 900-candidate scoring's 70 us).
ALL_ROWS = slice(None)


def exact_imbalances(w: WhatIf, rows: np.ndarray | slice, formula: Formula) -> np.ndarray:
    """Truncated what-if imbalance of candidate ``rows`` (or :data:`ALL_ROWS`), exactly as
    one-at-a-time computation."""
    loads = w.batch.view.loads()
    if (len(w.batch) if rows is ALL_ROWS else len(rows)) <= _ONE_AT_A_TIME_UP_TO:
        return truncate(np.array(_imbalances_one_at_a_time(loads, w, rows, formula)))
    total, squares = exact_load_sums(loads, w, rows)
    return truncate(imbalance_from_sums(total, squares, len(loads), formula))


def _imbalances_one_at_a_time(loads: np.ndarray, w: WhatIf, rows: np.ndarray, formula: Formula) -> list[float]:
    """:func:`core.imbalance.node_imbalance` of each row's loads after its move (not truncated)."""
    base, moved = loads.tolist(), w.subset(rows)
    src, tgt = w.batch.src[rows].tolist(), w.batch.tgt[rows].tolist()
    values = []
    for a, new_a, b, new_b in zip(src, moved.load_src.tolist(), tgt, moved.load_tgt.tolist()):
        changed = base.copy()
        changed[a], changed[b] = new_a, new_b
        values.append(node_imbalance(changed, formula))
    return values


def _ordered(batch: CandidateBatch, rows: np.ndarray, imbalances: np.ndarray) -> np.ndarray:
    """Positions into ``rows`` sorted by (imbalance, sid, source, target)."""
    sid, src, tgt = batch.sort_keys(rows)
    return np.lexsort((tgt, src, sid, imbalances))


def scored_migrations(batch: CandidateBatch, rows: np.ndarray, imbalances: np.ndarray) -> list[ScoredMigration]:
    """The migrations of batch ``rows`` with their ``imbalances`` (as :func:`scored_rows` gives them)."""
    return [ScoredMigration(batch.migration(int(r)), float(v)) for r, v in zip(rows, imbalances)]


def _contenders(w: WhatIf, k: int, formula: Formula) -> np.ndarray:
    """Rows that can still be among the ``k`` best, in row order: every row whose lower bound is
    not above the k-th smallest upper bound (bounds truncated, as the values they bound will be)."""
    count = len(w.batch)
    if count <= 2 * k or _exact_all_cheaper(count, len(w.batch.view)):
        return np.arange(count)
    smallest_hi = np.empty(0)  # the k smallest upper bounds so far; the k-th is the cut
    kept_rows, kept_lo = [], []
    for start, lo, hi in _block_bounds(w, formula):
        smallest_hi = np.concatenate((smallest_hi, hi))
        if len(smallest_hi) > k:
            smallest_hi = np.partition(smallest_hi, k - 1)[:k]
        # The cut only falls as blocks come: rows above it now stay above the final one.
        cut = smallest_hi.max() if len(smallest_hi) >= k else np.inf
        rows = np.flatnonzero(lo <= cut)
        kept_rows.append(rows + start)
        kept_lo.append(lo[rows])
    rows, lo = np.concatenate(kept_rows), np.concatenate(kept_lo)
    return rows[lo <= smallest_hi.max()]


def _exact_all_cheaper(count: int, n: int) -> bool:
    """Whether exact imbalances of all ``count`` candidates on ``n`` nodes cost less than bounding
    them first (see :data:`_EXACT_ALL_CELLS`)."""
    return n <= _EXACT_ALL_NODES and count * n <= _EXACT_ALL_CELLS


def _block_bounds(w: WhatIf, formula: Formula):
    """Yield (first row, lo, hi): the truncated :func:`core.imbalance.imbalance_bounds` of the
    candidates, a block of rows at a time."""
    batch = w.batch
    loads = batch.view.loads()
    for start in range(0, len(batch), _BOUND_BLOCK):
        block = slice(start, start + _BOUND_BLOCK)
        part = w.subset(block)
        lo, hi = imbalance_bounds(loads, batch.src[block], part.load_src, batch.tgt[block], part.load_tgt, formula)
        yield start, truncate(lo), truncate(hi)


def score_bruteforce(batch: CandidateBatch, limit: int, formula: Formula = DEFAULT_FORMULA) -> list[ScoredMigration]:
    """The ``limit`` candidates leaving the lowest imbalance, best first.

    Ties in the truncated imbalance go by (sid, source node, target node). ``limit`` 0 gives
    [], a ``limit`` beyond the count gives all.
    """
    return scored_migrations(batch, *_bruteforce_rows(batch, limit, formula))


def _bruteforce_rows(batch: CandidateBatch, limit: int, formula: Formula) -> tuple[np.ndarray, np.ndarray]:
    """The rows :func:`score_bruteforce` returns, best first, and their truncated imbalances."""
    k = min(check_limit(limit), len(batch))
    if k == 0:
        return _NO_ROWS
    w = what_if(batch)
    rows = _contenders(w, k, formula)
    # Contenders are in row order, each once: as many as the batch has are all of them.
    values = exact_imbalances(w, ALL_ROWS if len(rows) == len(batch) else rows, formula)
    best = _best(batch, rows, values, k)
    return rows[best], values[best]


def _best(batch: CandidateBatch, rows: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Positions into ``rows`` of the ``k`` best, best first (:func:`_ordered`'s order).

    Only rows at or under the k-th smallest value can be among them: their sort keys are ranked
    alone, and a single one needs no ranking (the HA manager asks for one; ranking a 3 x 30
    round's 60 candidates took 26 of its scoring's 180 us, 14 this way)."""
    within = np.arange(len(rows))
    if k < len(rows):
        ties = (values <= np.partition(values, k - 1)[k - 1]).nonzero()[0]  # np.flatnonzero's 3 wrappers cost 1 us
        within = ties if len(ties) >= k else within  # (fewer only if values held NaN)
    if len(within) == 1:
        return within
    return within[_ordered(batch, rows[within], values[within])][:k]


def topsis_order(w: WhatIf) -> np.ndarray:
    """All candidate rows ranked by TOPSIS over the what-if cpu and memory loads, best first."""
    return topsis_rank(topsis_scores(topsis_criteria(w)))


def topsis_criteria(w: WhatIf) -> np.ndarray:
    """The (candidates x 4) TOPSIS criteria matrix of the what-ifs, in batch row order (see
    :func:`core.topsis.load_criteria`)."""
    batch = w.batch
    view = batch.view
    cpu, mem = square_sums_and_maxima(
        batch.src, batch.tgt, [(view.cpu_loads(), w.cpu_src, w.cpu_tgt), (view.mem_loads(), w.mem_src, w.mem_tgt)]
    )
    return load_criteria(*cpu, *mem, len(view))


def score_topsis(batch: CandidateBatch, limit: int, formula: Formula = DEFAULT_FORMULA) -> list[ScoredMigration]:
    """The first ``limit`` candidates in TOPSIS rank order, each with its truncated what-if
    imbalance (not re-sorted by it). Ties in score keep expansion order."""
    return scored_migrations(batch, *_topsis_rows(batch, limit, formula))


def _topsis_rows(batch: CandidateBatch, limit: int, formula: Formula) -> tuple[np.ndarray, np.ndarray]:
    """The rows :func:`score_topsis` returns, in rank order, and their truncated imbalances."""
    k = min(check_limit(limit), len(batch))
    if k == 0:
        return _NO_ROWS
    w = what_if(batch)
    return topsis_rows(w, topsis_scores(topsis_criteria(w)), k, formula)


def topsis_rows(w: WhatIf, scores: np.ndarray, limit: int, formula: Formula) -> tuple[np.ndarray, np.ndarray]:
    """:func:`score_topsis`'s rows and truncated imbalances from the what-ifs ``w`` of a batch of at
    least one candidate and their TOPSIS ``scores`` (for a caller that keeps the scoring's
    intermediates); ``limit`` >= 1, beyond the count gives all."""
    rows = _best_first(scores, min(limit, len(w.batch)))
    return rows, exact_imbalances(w, rows, formula)


def _best_first(scores: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` rows of :func:`topsis_rank` (descending, ties in row order) without sorting
    every row: only rows scoring at least the k-th best score can be among them."""
    if 2 * k >= len(scores):
        return topsis_rank(scores)[:k]
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]
    rows = np.flatnonzero(scores >= kth)
    return rows[topsis_rank(scores[rows])][:k]


def score_migrations(
    batch: CandidateBatch, limit: int, method: Method = "bruteforce", formula: Formula = DEFAULT_FORMULA
) -> list[ScoredMigration]:
    """Dispatch to :func:`score_bruteforce` or :func:`score_topsis`."""
    return scored_migrations(batch, *scored_rows(batch, limit, method, formula))


def scored_rows(
    batch: CandidateBatch, limit: int, method: Method = "bruteforce", formula: Formula = DEFAULT_FORMULA
) -> tuple[np.ndarray, np.ndarray]:
    """The batch rows behind :func:`score_migrations`'s answer, in its order, and their truncated
    imbalances. The row, not the migration, identifies a candidate: two bundles with the same
    leader give the same migration but can move different resources."""
    rows = _topsis_rows if check_method(method) == "topsis" else _bruteforce_rows
    return rows(batch, limit, formula)


def select_best_migration(
    batch: CandidateBatch,
    method: Method = "bruteforce",
    formula: Formula = DEFAULT_FORMULA,
    imbalance_threshold: float | None = None,
) -> ScoredMigration | None:
    """One migration, or None without candidates (product decision 5).

    With ``imbalance_threshold`` (bruteforce only): the first candidate in input order whose
    truncated imbalance is <= the threshold; if there is none, the best. Without: the best.
    """
    if imbalance_threshold is not None:
        threshold = _check_threshold(imbalance_threshold)
        if check_method(method) != "bruteforce":
            raise InvalidInputError("imbalance_threshold", "applies to method 'bruteforce' only")
        first = _first_within(batch, threshold, formula)
        if first is not None:
            return first
    best = score_migrations(batch, 1, method, formula)
    return best[0] if best else None


def _check_threshold(threshold: object) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0.0:
        raise InvalidInputError("imbalance_threshold", f"must be a number >= 0 or null, got {threshold!r}")
    if threshold == float("inf"):
        raise InvalidInputError("imbalance_threshold", "must be finite")
    return float(threshold)


def _first_within(batch: CandidateBatch, threshold: float, formula: Formula) -> ScoredMigration | None:
    """First candidate (input order) whose exact truncated imbalance is <= ``threshold``."""
    if len(batch) == 0:
        return None
    w = what_if(batch)
    if len(batch) <= _SELECT_EXACT_ALL_BELOW:
        maybe = np.arange(len(batch))
    else:
        maybe = np.concatenate([start + np.flatnonzero(lo <= threshold) for start, lo, _ in _block_bounds(w, formula)])
    # Check the possible rows in input order, a block at a time: usually the first one holds.
    for start in range(0, len(maybe), 256):
        rows = maybe[start : start + 256]
        values = exact_imbalances(w, rows, formula)
        hits = np.flatnonzero(values <= threshold)
        if len(hits):
            row = int(rows[hits[0]])
            return ScoredMigration(batch.migration(row), float(values[hits[0]]))
    return None


def score_nodes_to_start(view: NodeView, stats: ResourceStats) -> list[tuple[str, float]]:
    """Score every node for starting a resource with ``stats`` there, in node order, in [0, 1],
    higher is better. One node scores 0.0; identical alternatives all score 0.0.

    Alternative X adds the resource at its limits to node X only (``maxcpu`` 0.0 counts as X's
    full core count); TOPSIS ranks the alternatives by the resulting cpu and memory loads.
    """
    n = len(view)
    if n == 0:
        return []
    added_cpu = np.where(stats.maxcpu == 0.0, view.maxcpu, stats.maxcpu)
    new_cpu = (view.cpu + added_cpu) / view.maxcpu
    new_mem = (view.mem + stats.maxmem).astype(np.float64) / view.maxmem
    x = np.arange(n)  # alternative x changes node x alone: its a and b
    columns = [(view.cpu_loads(), new_cpu, new_cpu), (view.mem_loads(), new_mem, new_mem)]
    cpu, mem = square_sums_and_maxima(x, x, columns)
    matrix = load_criteria(*cpu, *mem, n)
    scores = topsis_scores(matrix)
    return list(zip(view.names, map(float, scores)))


__all__ = [
    "METHODS",
    "Method",
    "calculate_node_imbalance",
    "check_limit",
    "check_method",
    "score_bruteforce",
    "score_migrations",
    "score_nodes_to_start",
    "score_topsis",
    "select_best_migration",
    "topsis_criteria",
    "topsis_order",
]
