"""TOPSIS: rank alternatives by their relative closeness to the ideal solution.

Used with four criteria, all minimised, built by :func:`load_criteria`: root mean square and
maximum of the cpu loads and of the memory loads, each shifted by 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from .errors import SchedulingError

#: Criteria (average cpu, highest cpu, average memory, highest memory) with upstream's raw
#: weights; the sign says "minimise", the magnitude is normalised to sum 1.
RAW_WEIGHTS = (-1.0, -2.0, -5.0, -10.0)
WEIGHTS = np.array([abs(w) for w in RAW_WEIGHTS]) / sum(abs(w) for w in RAW_WEIGHTS)


def rust_float(value: float) -> str:
    """Format a float as Rust's ``Display`` does (``NaN``, ``inf``, never an exponent), so error
    texts read as upstream's."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def load_criteria(sum_sq_cpu, max_cpu, sum_sq_mem, max_mem, n: int) -> np.ndarray:
    """The (rows x 4) criteria matrix from per-row sums of squared loads and maximum loads.

    ``1 + sqrt(sum / n)`` for the averages, ``1 + max`` for the highest loads (the maximum is
    taken with 0.0, as upstream starts its running maximum there); arguments are float64 arrays.
    Stored column by column (Fortran order), as :func:`topsis_solve` reads it.
    """
    return np.stack(
        (
            1.0 + np.sqrt(sum_sq_cpu / n),
            1.0 + np.maximum(max_cpu, 0.0),
            1.0 + np.sqrt(sum_sq_mem / n),
            1.0 + np.maximum(max_mem, 0.0),
        )
    ).T


@dataclass(frozen=True, slots=True)
class TopsisSolution:
    """Every intermediate of a TOPSIS scoring, for explanations.

    ``normalised`` (rows x criteria): each column divided by its L2 norm; ``best``/``worst`` (per
    criterion): the ideal solutions, column minimum/maximum (every criterion is minimised);
    ``to_best``/``to_worst`` (per row): weighted Euclidean distances to them; ``scores`` (per
    row): ``to_worst / (to_worst + to_best)``, 0.0 where both are 0. No rows: all empty except
    ``best``/``worst``, which are zeros (unused).
    """

    normalised: np.ndarray
    best: np.ndarray
    worst: np.ndarray
    to_best: np.ndarray
    to_worst: np.ndarray
    scores: np.ndarray


def topsis_scores(matrix: np.ndarray, weights: np.ndarray = WEIGHTS) -> np.ndarray:
    """Closeness score in [0, 1] of each row (higher is better), every criterion minimised.

    Columns are divided by their L2 norm (a zero column stays as is); a row identical to all
    others, or a single row, scores 0.0. Errors as upstream: ``criterion <j> got invalid value
    <v>`` for a non-finite normalised entry, ``invalid score <s>`` for a non-finite score.
    """
    return topsis_solve(matrix, weights).scores


def topsis_solve(matrix: np.ndarray, weights: np.ndarray = WEIGHTS) -> TopsisSolution:
    """:func:`topsis_scores` with all its intermediates (same values, same errors)."""
    rows, columns = matrix.shape
    # Every step below reads or writes one criterion for all rows: contiguous columns make
    # them some 3x faster than the strided columns of a row-major matrix.
    matrix = np.asfortranarray(matrix)
    if rows == 0:
        empty = np.zeros(0)
        return TopsisSolution(matrix.copy(), np.zeros(columns), np.zeros(columns), empty, empty, empty)
    # Each criterion's sum of squares left to right (cumsum adds in order; np.sum does not promise
    # to), on its contiguous column (a cumsum along the matrix's rows costs twice as much on many
    # rows); a zero norm leaves its column as it is (x / 1.0 is x). The rest on all criteria at
    # once: a small batch's scoring is mostly the NumPy calls' fixed costs.
    norms = np.sqrt([np.cumsum(column * column)[-1] for column in matrix.T])
    normalised = matrix / np.where(norms != 0.0, norms, 1.0)
    bad = ~np.isfinite(normalised)
    if bad.any():
        j, row = divmod(int(np.argmax(bad.T)), rows)  # the first in criterion order, as upstream checks
        raise SchedulingError(f"criterion {j} got invalid value {rust_float(normalised[row, j])}")
    best, worst = normalised.min(axis=0), normalised.max(axis=0)
    to_best, to_worst = _distance(normalised, best, weights), _distance(normalised, worst, weights)
    both = to_worst + to_best
    scores = np.divide(to_worst, both, out=np.zeros(rows), where=both != 0.0)
    bad = ~np.isfinite(scores)
    if bad.any():
        raise SchedulingError(f"invalid score {rust_float(scores[np.argmax(bad)])}")
    return TopsisSolution(normalised, best, worst, to_best, to_worst, scores)


def _distance(normalised: np.ndarray, ideal: np.ndarray, weights: np.ndarray) -> np.ndarray:
    # Criterion by criterion, on contiguous columns: on many rows a third of the time of the
    # same steps on the whole matrix, and as fast on few.
    total = np.zeros(normalised.shape[0])
    for j in range(normalised.shape[1]):
        d = weights[j] * (normalised[:, j] - ideal[j])
        total += d * d
    return np.sqrt(total)


def topsis_rank(scores: np.ndarray) -> np.ndarray:
    """Row indices by score, best first; ties keep input order."""
    return np.argsort(-scores, kind="stable")
