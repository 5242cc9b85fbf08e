"""Node imbalance: the coefficient of variation (CV) of per-node loads.

Two formulas (product decision 2): ``normalized`` (crate 2.1.0, the default) divides the CV by
sqrt(n - 1) so the value lies in [0, 1] and is 0 below two nodes; ``raw`` (crate 2.0.0) is the
CV itself, in [0, sqrt(n - 1)].

Every sum runs left to right in node order and squares are products, exactly as ``math.md``
§5.2/§5.8 prescribe, so values match the reference to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

Formula = Literal["normalized", "raw"]
FORMULAS: tuple[Formula, ...] = ("normalized", "raw")

_TRUNCATION = 1e15  # 10 ** f64::DIGITS, exact in binary64


def check_formula(formula: str) -> Formula:
    """Return ``formula`` if it is a known imbalance formula, else raise InvalidInputError."""
    if formula not in FORMULAS:
        from .errors import InvalidInputError

        raise InvalidInputError("imbalance", f"must be 'normalized' or 'raw', got {formula!r}")
    return formula  # type: ignore[return-value]


def node_imbalance(loads: Sequence[float], formula: Formula = "normalized") -> float:
    """Imbalance of ``loads`` (fractions, node order).

    Edge cases: fewer than two nodes give 0.0 with ``normalized``; a zero load sum, or a mean
    load that underflows to 0 (loads of a few subnormals), gives 0.0 with both formulas.
    """
    n = len(loads)
    if formula == "normalized" and n < 2:
        return 0.0
    total = 0.0
    for load in loads:
        total += float(load)
    if total == 0.0:
        return 0.0
    mean = total / n
    # A mean that underflows to 0 would give 0/0: upstream answers NaN, we answer what a
    # cluster with no measurable load is, balanced (product decision 4: never NaN).
    if mean == 0.0:
        return 0.0
    squares = 0.0
    for load in loads:
        d = float(load) - mean
        squares += d * d
    cv = math.sqrt(squares / n) / mean
    return cv / math.sqrt(n - 1) if formula == "normalized" else cv


def truncate(value: float | np.ndarray) -> float | np.ndarray:
    """Cut an imbalance to 15 significant decimals (``trunc(1e15 x) / 1e15``) so that values
    equal in their significant digits compare equal. NaN and infinities pass unchanged."""
    return np.trunc(value * _TRUNCATION) / _TRUNCATION


def imbalance_from_sums(total: np.ndarray, squares: np.ndarray, n: int, formula: Formula) -> np.ndarray:
    """Finish the imbalance from the left-to-right ``total`` of loads and ``squares`` of deviations
    (both per candidate), with the same operations as :func:`node_imbalance`."""
    if formula == "normalized" and n < 2:
        return np.zeros_like(total)
    mean = total / n
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.sqrt(squares / n) / mean
    if formula == "normalized":
        cv = cv / math.sqrt(n - 1)
    return np.where(mean == 0.0, 0.0, cv)  # as node_imbalance: a zero (or underflowed) mean is 0.0


def imbalance_bounds(
    base_loads: np.ndarray, src: np.ndarray, new_src: np.ndarray, tgt: np.ndarray, new_tgt: np.ndarray, formula: Formula
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on the exact imbalance after each what-if, in O(1) per candidate.

    Candidate i changes the load of node ``src[i]`` to ``new_src[i]`` and of ``tgt[i]`` to
    ``new_tgt[i]`` (src != tgt). The exact value (left-to-right sums over the new loads) lies
    within the bounds: they cover the rounding of both computations. Where a bound cannot be
    trusted (e.g. the deviations cancel to nothing) it widens to [0, inf].
    """
    n = len(base_loads)
    if formula == "normalized" and n < 2 or n == 0:
        zeros = np.zeros(len(src))
        return zeros, zeros
    u = 2.0**-53
    total0 = float(np.sum(base_loads))
    mean0 = total0 / n
    dev0 = base_loads - mean0
    sq0 = float(np.dot(dev0, dev0))
    old_s, old_t = base_loads[src], base_loads[tgt]
    total = total0 + (new_src - old_s) + (new_tgt - old_t)
    mean = total / n
    ds_old, dt_old = dev0[src], dev0[tgt]
    ds_new, dt_new = new_src - mean0, new_tgt - mean0
    shift = mean - mean0
    terms = (ds_old * ds_old, dt_old * dt_old, ds_new * ds_new, dt_new * dt_new, n * (shift * shift))
    squares = sq0 - terms[0] - terms[1] + terms[2] + terms[3] - terms[4]
    magnitude = sq0 + terms[0] + terms[1] + terms[2] + terms[3] + terms[4]
    # Rounding of this formula, of the reference's sums (n terms each) and of the reference's
    # mean (which enters the squares quadratically); generous constants, the bounds only filter.
    load_sum = np.abs(total) + np.sum(np.abs(base_loads)) + np.abs(new_src) + np.abs(new_tgt)
    mean_err = 4 * (n + 4) * u * load_sum / n
    err = 4 * (n + 64) * u * magnitude + 4 * (n + 8) * u * np.abs(squares) + 4 * n * mean_err * mean_err
    rel = 8 * (n + 8) * u + 4 * (n + 4) * u * load_sum / np.maximum(np.abs(total), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lo = _finish(np.maximum(squares - err, 0.0), total, n, formula) * (1 - rel)
        hi = _finish(squares + err, total, n, formula) * (1 + rel)
    unsafe = ~(np.isfinite(lo) & np.isfinite(hi)) | (total <= load_sum * 8 * (n + 4) * u)
    lo = np.where(unsafe, 0.0, np.maximum(lo, 0.0))
    hi = np.where(unsafe, np.inf, hi)
    return lo, hi


def _finish(squares: np.ndarray, total: np.ndarray, n: int, formula: Formula) -> np.ndarray:
    cv = np.sqrt(squares / n) / (total / n)
    return cv / math.sqrt(n - 1) if formula == "normalized" else cv
