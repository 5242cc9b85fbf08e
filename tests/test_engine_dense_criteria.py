"""The what-if criteria on few nodes (``core.whatif.square_sums_and_maxima`` on replaced
matrices, in pieces or whole) against the running sums used on many nodes and against a
one-row-at-a-time computation, to the bit; TOPSIS's error order."""

from __future__ import annotations

import math
import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge import core
from crs_bridge.core import SchedulingError
from crs_bridge.core.topsis import topsis_scores
from crs_bridge.core.whatif import square_sums_and_maxima
from tests import columns

#: Loads as the engine makes them: fractions, some equal (identical nodes), zero, tiny, above 1.
LOADS = st.sampled_from([0.0, 0.25, 0.5, 1.0 / 3.0, 1.5, 5e-324]) | st.floats(0.0, 4.0)


@st.composite
def replacements(draw):
    """Per-node values and rows that change nodes a and b (sometimes the same node to the same
    value, as a start's alternative does), for two kinds of load."""
    n = draw(st.integers(2, 9))
    rows = draw(st.integers(0, 40))
    node = st.integers(0, n - 1)
    a = [draw(node) for _ in range(rows)]
    b = [draw(node) for _ in range(rows)]
    columns = []
    for _ in range(2):
        values = draw(st.lists(LOADS, min_size=n, max_size=n))
        va, vb = (draw(st.lists(LOADS, min_size=rows, max_size=rows)) for _ in range(2))
        vb = [x if node_a == node_b else y for node_a, node_b, x, y in zip(a, b, va, vb)]
        columns.append((values, va, vb))
    return a, b, columns


def one_row_at_a_time(a: list[int], b: list[int], values: list[float], va: list[float], vb: list[float]):
    """Per row: the values with va then vb in place, their squares summed from 0.0 left to right,
    and their maximum."""
    sums, maxima = [], []
    for i in range(len(a)):
        changed = list(values)
        changed[a[i]] = va[i]
        changed[b[i]] = vb[i]
        total = 0.0
        for value in changed:
            total += value * value
        sums.append(total)
        maxima.append(max(changed))
    return sums, maxima


def bits(values) -> list[int]:
    return [struct.unpack("<q", struct.pack("<d", float(v)))[0] for v in values]


@given(replacements(), st.sampled_from([1, 7, core.whatif.DENSE_CELLS]), st.booleans())
def test_square_sums_and_maxima_match_one_row_at_a_time(case, dense_cells, running):
    a, b, columns = case
    arrays = [tuple(np.array(x, dtype=np.float64) for x in column) for column in columns]
    # DENSE_NODES 0 and a cell at a time: the running sums of many nodes (on 3 nodes at least:
    # the maximum's rule needs them).
    running = running and len(columns[0][0]) >= 3
    dense_nodes = 0 if running else core.whatif.DENSE_NODES
    with (
        mock.patch.object(core.whatif, "DENSE_CELLS", 1 if running else dense_cells),
        mock.patch.object(core.whatif, "DENSE_NODES", dense_nodes),
    ):
        got = square_sums_and_maxima(np.array(a, dtype=np.int64), np.array(b, dtype=np.int64), arrays)
    for (sums, maxima), column in zip(got, columns):
        expected_sums, expected_maxima = one_row_at_a_time(a, b, *column)
        assert bits(sums) == bits(expected_sums)
        assert bits(maxima) == bits(expected_maxima)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_topsis_names_the_first_criterion_with_an_invalid_value_whatever_its_row():
    # Criterion 2 fails in row 0, criterion 1 only in row 2: upstream checks criterion by criterion.
    matrix = np.array([[1.0, 2.0, math.nan], [1.0, 2.0, 1.0], [1.0, math.inf, 1.0]])
    with pytest.raises(SchedulingError, match="^criterion 1 got invalid value NaN$"):
        topsis_scores(matrix, np.array([0.2, 0.3, 0.5]))


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_an_empty_batch_on_no_nodes_has_empty_criteria(mode):
    """A scheduler without nodes expands no candidates: its criteria are no rows, and TOPSIS
    orders none (as the running sums gave them), no error of a maximum over nothing."""
    from crs_bridge.core.scheduler import topsis_criteria, topsis_order
    from crs_bridge.core.whatif import what_if

    w = what_if(core.new_scheduler(mode).candidate_batch(columns([])))
    assert topsis_criteria(w).shape == (0, 4)
    assert topsis_order(w).tolist() == []
