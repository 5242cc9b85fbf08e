"""Node imbalance: the coefficient of variation (CV) of per-node loads.

Two formulas (product decision 2): ``raw`` (crate 2.0.0, the default: libpve-rs-perl 0.13.0 and
pve-ha-manager 5.2.0 are built with it, and HA's threshold 0.3 was tuned for it) is the CV itself,
in [0, sqrt(n - 1)]; ``normalized`` (crate 2.1.0) divides the CV by sqrt(n - 1) so the value
lies in [0, 1] and is 0 below two nodes.

Values follow the arithmetic rule of :mod:`core` (``math.md`` §5.2); :func:`imbalance_bounds` is
the one fast formula, a filter only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

Formula = Literal["normalized", "raw"]
FORMULAS: tuple[Formula, ...] = ("normalized", "raw")
#: The released stack's formula, the default wherever none is named.
DEFAULT_FORMULA: Formula = "raw"

_TRUNCATION = 1e15  # 10 ** f64::DIGITS, exact in binary64


def check_formula(formula: str) -> Formula:
    """Return ``formula`` if it is a known imbalance formula, else raise InvalidInputError."""
    if formula not in FORMULAS:
        from .errors import InvalidInputError

        raise InvalidInputError("imbalance", f"must be 'normalized' or 'raw', got {formula!r}")
    return formula  # type: ignore[return-value]


def node_imbalance(loads: Sequence[float], formula: Formula = DEFAULT_FORMULA) -> float:
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
    # As node_imbalance: a zero (or underflowed) mean is 0.0, left out of the division (no
    # errstate to enter, no np.where after it: 3 of some 10 NumPy calls on a small cluster).
    cv = np.divide(np.sqrt(squares / n), mean, out=np.zeros(len(mean)), where=mean != 0.0)
    if formula == "normalized":
        cv = cv / math.sqrt(n - 1)
    return cv


def imbalance_bounds(
    base_loads: np.ndarray, src: np.ndarray, new_src: np.ndarray, tgt: np.ndarray, new_tgt: np.ndarray, formula: Formula
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on the exact imbalance after each what-if, in O(1) per candidate.

    Candidate i changes the load of node ``src[i]`` to ``new_src[i]`` and of ``tgt[i]`` to
    ``new_tgt[i]`` (src != tgt). The exact value (left-to-right sums over the new loads) lies
    within the bounds: they cover the rounding of both computations. Where a bound cannot be
    trusted (the deviations cancel to nothing, or loads so small that squared deviations fall
    below the normal floats and lose more than any relative margin covers) it widens to [0, inf].
    """
    n = len(base_loads)
    if formula == "normalized" and n < 2 or n == 0:
        zeros = np.zeros(len(src))
        return zeros, zeros
    total0 = float(np.sum(base_loads))
    mean0 = total0 / n
    dev0 = base_loads - mean0
    sq0 = float(np.dot(dev0, dev0))
    total = total0 + (new_src - base_loads[src]) + (new_tgt - base_loads[tgt])
    shift = total / n - mean0
    ds_old, dt_old, ds_new, dt_new = dev0[src], dev0[tgt], new_src - mean0, new_tgt - mean0
    terms = (ds_old * ds_old, dt_old * dt_old, ds_new * ds_new, dt_new * dt_new, n * (shift * shift))
    squares = sq0 - terms[0] - terms[1] + terms[2] + terms[3] - terms[4]
    # One rounding margin for all rows is 40 fewer passes over them than a margin per row, and
    # is nearly as tight unless some row's total is close to cancelling (then the rows' own).
    base_sum = float(np.sum(np.abs(base_loads)))
    margins = _shared_margins(n, mean0, dev0, sq0, base_sum, new_src, new_tgt, total, squares)
    if margins is None:
        margins = _row_margins(n, mean0, sq0, base_sum, new_src, new_tgt, total, squares, shift, terms)
    err, rel, unsafe = margins
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lo = _finish(np.maximum(squares - err, 0.0), total, n, formula) * (1 - rel)
        hi = _finish(squares + err, total, n, formula) * (1 + rel)
    if unsafe is None:
        return lo, hi
    unsafe |= ~(np.isfinite(lo) & np.isfinite(hi))
    return np.where(unsafe, 0.0, np.maximum(lo, 0.0)), np.where(unsafe, np.inf, hi)


#: The unit roundoff of binary64.
_U = 2.0**-53
#: The smallest mean load (base or after a move) whose bounds are trusted. Two floats near a mean
#: of at least this differ by 0 or by more than 1e-147, so every squared deviation in either
#: computation is 0 or a normal float, whose rounding the relative margins cover; below it a
#: square can be subnormal and lose most of its digits (0.0 and 1e-160 with a mean of 2.5e-161).
_SMALLEST_MEAN = 1e-130


def _row_margins(n: int, mean0: float, sq0: float, base_sum: float, new_src, new_tgt, total, squares, shift, terms):
    """Per row: the margins of :func:`_margins`, and whether the row's bounds cannot be trusted
    (``unsafe``). ``base_sum``: the sum of the base loads' magnitudes."""
    magnitude = sq0 + terms[0] + terms[1] + terms[2] + terms[3] + terms[4]
    load_sum = np.abs(total) + base_sum + np.abs(new_src) + np.abs(new_tgt)
    err, rel = _margins(n, magnitude, load_sum, np.abs(squares), np.abs(total), np.abs(shift))
    unsafe = _cancels(n, total, load_sum) | (total / n < _SMALLEST_MEAN) | (mean0 < _SMALLEST_MEAN)
    return err, rel, unsafe


def _shared_margins(n: int, mean0: float, dev0, sq0: float, base_sum: float, new_src, new_tgt, total, squares):
    """:func:`_row_margins` with each per-row quantity replaced by its largest value over the
    rows (the smallest total), so at least as wide, :func:`_margins` growing with each: one
    ``err`` and one ``rel`` for all rows, none unsafe; None when some row is unsafe or shared
    margins would be loose (a total close to cancelling)."""
    if len(total) == 0:
        return None
    src_lo, src_hi, tgt_lo, tgt_hi = new_src.min(), new_src.max(), new_tgt.min(), new_tgt.max()
    total_lo, total_hi = total.min(), total.max()
    # Each term is the same rounded operation as a row's on the extreme input, and rounding is
    # monotonic, so it is at least the row's.
    dev = max(-dev0.min(), dev0.max())
    ds_new, dt_new = max(mean0 - src_lo, src_hi - mean0), max(mean0 - tgt_lo, tgt_hi - mean0)
    shift = max(mean0 - total_lo / n, total_hi / n - mean0)
    magnitude = sq0 + dev * dev + dev * dev + ds_new * ds_new + dt_new * dt_new + n * (shift * shift)
    load_sum = max(-total_lo, total_hi) + base_sum + max(-src_lo, src_hi) + max(-tgt_lo, tgt_hi)
    err, rel = _margins(n, magnitude, load_sum, np.abs(squares).max(), total_lo, shift)
    # Every row is then safe, and its bounds finite: its mean and the base mean are large enough
    # (_SMALLEST_MEAN), and the deviations are not far above it (rel).
    loose = not (math.isfinite(err) and rel < 1e-9)
    if loose or _cancels(n, total_lo, load_sum) or min(total_lo / n, mean0) < _SMALLEST_MEAN:
        return None
    return float(err), float(rel), None


def _margins(n: int, magnitude, load_sum, squares_size, total_size, shift_size):
    """The rounding margin ``err`` of the squared deviations (``squares_size`` in size) and the
    relative margin ``rel`` of the result; they cover the rounding of the update formula, of the
    reference's sums (n terms each), of the reference's mean (which enters the squares
    quadratically) and of the update's mean shift (``shift_size`` in size, which enters them as
    ``n * shift**2``: an error e of the shift moves that by ``2 n |shift| e``, first order, which
    outgrows the relative margins when the shift is small next to the mean). Generous constants:
    the bounds only filter. Both grow with ``magnitude``, ``load_sum``, ``squares_size`` and
    ``shift_size`` and shrink with ``total_size`` (arrays or numbers)."""
    mean_err = 4 * (n + 4) * _U * load_sum / n
    err = (
        4 * (n + 64) * _U * magnitude + 4 * (n + 8) * _U * squares_size + 4 * n * (shift_size + 2 * mean_err) * mean_err
    )
    rel = 8 * (n + 8) * _U + 4 * (n + 4) * _U * load_sum / np.maximum(total_size, 1e-300)
    return err, rel


def _cancels(n: int, total, load_sum):
    """Whether a total of loads is within rounding of 0 (its relative error unbounded)."""
    return total <= load_sum * 8 * (n + 4) * _U


def _finish(squares: np.ndarray, total: np.ndarray, n: int, formula: Formula) -> np.ndarray:
    cv = np.sqrt(squares / n) / (total / n)
    return cv / math.sqrt(n - 1) if formula == "normalized" else cv
