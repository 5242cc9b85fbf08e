"""What-if migrations, vectorised over candidates.

A migration changes exactly two nodes: the source loses the candidate's running usage (clamped
at 0) and the target gains it. :class:`WhatIf` holds those two new node states per candidate;
the per-candidate sums over all nodes are formed here too, by the arithmetic rule of :mod:`core`
(the two changed terms in their places), so they equal a one-candidate-at-a-time computation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .candidates import CandidateBatch


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Per candidate, the new cpu/mem/overall load of its source (``*_src``) and target (``*_tgt``)."""

    batch: CandidateBatch
    cpu_src: np.ndarray
    cpu_tgt: np.ndarray
    mem_src: np.ndarray
    mem_tgt: np.ndarray

    @property
    def load_src(self) -> np.ndarray:
        return (self.cpu_src + self.mem_src) / 2.0

    @property
    def load_tgt(self) -> np.ndarray:
        return (self.cpu_tgt + self.mem_tgt) / 2.0

    def subset(self, rows: np.ndarray) -> WhatIf:
        """The same what-ifs restricted to ``rows`` (the batch is kept whole; use ``rows`` to index it)."""
        return WhatIf(self.batch, self.cpu_src[rows], self.cpu_tgt[rows], self.mem_src[rows], self.mem_tgt[rows])


def what_if(batch: CandidateBatch) -> WhatIf:
    """Source and target loads after each candidate's migration (fractions)."""
    # In place where possible: every fresh candidate-sized array costs page faults.
    view, src, tgt = batch.view, batch.src, batch.tgt
    cpu_src = view.cpu[src]
    cpu_src -= batch.cpu
    np.maximum(cpu_src, 0.0, out=cpu_src)
    cpu_src /= view.maxcpu[src]
    cpu_tgt = view.cpu[tgt]
    cpu_tgt += batch.cpu
    cpu_tgt /= view.maxcpu[tgt]
    mem_src = view.mem[src]
    mem_src -= batch.mem
    np.maximum(mem_src, 0, out=mem_src)
    mem_tgt = view.mem[tgt]
    mem_tgt += batch.mem
    return WhatIf(batch, cpu_src, cpu_tgt, mem_src / view.maxmem[src], mem_tgt / view.maxmem[tgt])


Term = Callable[[int], "float | np.ndarray"]


#: Rows grouped by node: entry j holds the rows whose node is j (see :func:`rows_by_node`).
NodeRows = list[np.ndarray]


def replaced_sums(
    n: int,
    term: Term,
    a: np.ndarray,
    term_a: np.ndarray,
    b: np.ndarray,
    term_b: np.ndarray,
    groups: tuple[NodeRows, NodeRows] | None = None,
) -> np.ndarray:
    """Left-to-right sums over nodes 0..n-1, one per row: row i adds ``term(j)`` for every node j,
    except ``term_a[i]`` at node ``a[i]`` and ``term_b[i]`` at node ``b[i]`` (use -1 for none).

    ``term(j)`` is a scalar or a per-row array. ``groups``: ``rows_by_node`` of ``a`` and of
    ``b``, when the caller has them. Cost: n vector additions plus O(rows) fix-ups.
    """
    rows = len(a)
    acc = np.zeros(rows)
    by_a, by_b = groups or (rows_by_node(a, n), rows_by_node(b, n))
    for j in range(n):
        ia, ib = by_a[j], by_b[j]
        fixed_a = acc[ia] + term_a[ia]
        fixed_b = acc[ib] + term_b[ib]
        acc += term(j)
        acc[ia] = fixed_a
        acc[ib] = fixed_b
    return acc


def rows_by_node(nodes: np.ndarray, n: int) -> NodeRows:
    """The rows of ``nodes`` (node indices, -1 for none) grouped by node 0..n-1, in row order."""
    # On 16-bit keys NumPy's stable sort is a radix sort, some 40x faster than on int64 keys.
    keys = nodes.astype(np.int16) if n < 2**15 else nodes
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(nodes[order], np.arange(n + 1))
    return [order[bounds[j] : bounds[j + 1]] for j in range(n)]


#: Cells (candidates x nodes) of a what-if matrix (:func:`replaced`: the loads of
#: :func:`exact_load_sums`, the criteria of :func:`square_sums_and_maxima`) filled at a time: 2 MiB
#: of float64, so that many candidates on many nodes are summed in pieces of about the caches' size.
DENSE_CELLS = 1 << 18
#: Beyond this many nodes, a matrix of more than :data:`DENSE_CELLS` costs more than running sums:
#: its pieces' NumPy calls add up (20,000 candidates on 1024 nodes: 78 ms against 22; on 256: 10.4
#: against 6.6; 50,000 on 64: 6.7 against 5.6), where up to here it costs less (100,000 on 16
#: nodes: 3.7 ms against 7.7; on 3: 1.6 against 3.9).
DENSE_NODES = 32


def exact_load_sums(loads: np.ndarray, w: WhatIf, rows: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
    """For candidate ``rows`` (an index array, or a slice of the batch): the left-to-right sum of
    node loads after the move, and the left-to-right sum of squared deviations from their mean
    (the two sums of the imbalance).

    Formed on a (nodes x rows) matrix of the new loads, a node's row added at a time: 2 NumPy
    calls per node and some 15 in all, against some 40 per node fixing up the two changed terms
    of running sums (900 candidates on 4 nodes: 30 us against 67; 10 on 1024 nodes: 0.65 ms
    against 4). Rows are taken :data:`DENSE_CELLS` cells at a time, on up to :data:`DENSE_NODES`
    nodes; beyond, more cells than that are summed as running sums. No rows give empty sums.
    """
    n, batch = len(loads), w.batch
    a, b = batch.src[rows], batch.tgt[rows]
    la, lb = w.load_src[rows], w.load_tgt[rows]
    if _running(n, len(a)):
        return _running_load_sums(loads, a, la, b, lb)
    return _in_pieces(_dense_load_sums, loads, (a, la, b, lb))


def _dense_step(n: int) -> int:
    """Rows of a (``n`` nodes x rows) matrix filled at a time (:data:`DENSE_CELLS`)."""
    return max(1, DENSE_CELLS // max(n, 1))


def _running(n: int, rows: int) -> bool:
    """Whether sums over ``n`` nodes for ``rows`` rows are running sums, not a matrix's (see
    :data:`DENSE_NODES`): on many nodes, for more rows than one matrix of :data:`DENSE_CELLS`."""
    return n > DENSE_NODES and rows > _dense_step(n)


def _in_pieces(dense: Callable[..., tuple], values: np.ndarray, columns: tuple[np.ndarray, ...]) -> tuple:
    """``dense(values, *columns)`` (per-node ``values``, per-row ``columns``), its rows computed
    :func:`_dense_step` rows at a time and joined."""
    step = _dense_step(len(values))
    if len(columns[0]) <= step:
        return dense(values, *columns)
    parts = [dense(values, *(x[i : i + step] for x in columns)) for i in range(0, len(columns[0]), step)]
    return tuple(np.concatenate(part) for part in zip(*parts))


def _running_load_sums(
    loads: np.ndarray, a: np.ndarray, la: np.ndarray, b: np.ndarray, lb: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exact_load_sums` as running sums over the nodes, the two changed terms fixed up."""
    n = len(loads)
    groups = rows_by_node(a, n), rows_by_node(b, n)
    total = replaced_sums(n, loads.__getitem__, a, la, b, lb, groups)
    mean = total / n
    da, db = la - mean, lb - mean

    def deviation_squared(j: int) -> np.ndarray:
        d = loads[j] - mean
        return d * d

    return total, replaced_sums(n, deviation_squared, a, da * da, b, db * db, groups)


def replaced(values: np.ndarray, a: np.ndarray, va: np.ndarray, b: np.ndarray, vb: np.ndarray) -> np.ndarray:
    """The (nodes x rows) matrix whose column i is the per-node ``values`` with ``va[i]`` at node
    ``a[i]`` and then ``vb[i]`` at node ``b[i]`` (``vb[i]`` where they are the same node)."""
    n, rows = len(values), len(a)
    matrix = np.empty((n, rows))
    matrix[:] = values[:, None]
    cells, at = matrix.reshape(-1), np.arange(rows)
    cells[a * rows + at] = va
    cells[b * rows + at] = vb
    return matrix


def column_sums(matrix: np.ndarray) -> np.ndarray:
    """Per column, the sum of its entries from 0.0, top to bottom: node after node, left to right
    (math.md), not np.sum, whose order NumPy does not promise."""
    total = np.zeros(matrix.shape[1])
    for row in matrix:
        total += row
    return total


def _dense_load_sums(
    loads: np.ndarray, a: np.ndarray, la: np.ndarray, b: np.ndarray, lb: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exact_load_sums` of rows that move nodes ``a``/``b`` to loads ``la``/``lb``."""
    new = replaced(loads, a, la, b, lb)  # new[j, i]: node j's load after row i's move
    total = column_sums(new)
    new -= total / len(loads)
    new *= new
    return total, column_sums(new)


def square_sums_and_maxima(
    a: np.ndarray, b: np.ndarray, columns: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each ``(values, va, vb)`` of ``columns`` (per-node values, and per row the values of
    nodes ``a`` and ``b``: two nodes, or one node given one value): per row, the left-to-right
    sum of the squares of the values with ``va``/``vb`` in place at ``a``/``b``, and their
    maximum (exact: max does not round). On up to :data:`DENSE_NODES` nodes formed on
    :func:`replaced` matrices, some 10 NumPy calls per column (900 rows on 4 nodes, cpu and
    memory: 29 us, against 77 as running sums, with their 40 calls and 2 sorts), as
    :func:`exact_load_sums` chooses."""
    n = len(columns[0][0]) if columns else 0
    if not _running(n, len(a)):
        return [_in_pieces(_dense_squares, values, (a, va, b, vb)) for values, va, vb in columns]
    groups = rows_by_node(a, n), rows_by_node(b, n)
    return [
        (exact_square_sums(values, a, va, b, vb, groups), _max_with_two_replaced(values, a, va, b, vb))
        for values, va, vb in columns
    ]


def _dense_squares(
    values: np.ndarray, a: np.ndarray, va: np.ndarray, b: np.ndarray, vb: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    new = replaced(values, a, va, b, vb)
    maxima = new.max(axis=0) if len(values) else np.zeros(0)  # no nodes, so no rows (max of nothing raises)
    new *= new
    return column_sums(new), maxima


def _max_with_two_replaced(
    values: np.ndarray, a: np.ndarray, va: np.ndarray, b: np.ndarray, vb: np.ndarray
) -> np.ndarray:
    """Per row, the maximum of ``values`` with positions a/b replaced by va/vb, on at least 3
    nodes (exact: max does not round). Only the three largest base values can be the maximum of
    the others."""
    top = np.argsort(-values, kind="stable")[:3]
    others = np.zeros(len(a))
    found = np.zeros(len(a), dtype=bool)
    for idx in top:
        usable = ~found & (a != idx) & (b != idx)
        others[usable] = values[idx]
        found |= usable
    return np.maximum(np.maximum(others, va), vb)


def exact_square_sums(
    values: np.ndarray,
    a: np.ndarray,
    va: np.ndarray,
    b: np.ndarray,
    vb: np.ndarray,
    groups: tuple[NodeRows, NodeRows] | None = None,
) -> np.ndarray:
    """Left-to-right sums of squares of ``values`` with ``va``/``vb`` in place at ``a``/``b``
    (``groups``: see :func:`replaced_sums`)."""
    squares = values * values
    return replaced_sums(len(values), squares.__getitem__, a, va * va, b, vb * vb, groups)
