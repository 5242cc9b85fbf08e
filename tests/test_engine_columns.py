"""Candidate columns in the engine: the bulk checks of expanded candidates against a batch built
one candidate at a time, with and without the candidates' limits."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.core import (
    CandidateBatch,
    CandidateColumns,
    InvalidInputError,
    Migration,
    MigrationCandidate,
    NodeStats,
    ResourceStats,
)
from crs_bridge.core.candidates import batch_from_columns
from crs_bridge.core.limits import MAX_BYTES
from crs_bridge.core.usage import NodeView


def bits(values) -> list:
    """Floats by their bit patterns (tells -0.0 from 0.0), ints as they are."""
    return [struct.pack("<d", v) if isinstance(v, float) else v for v in values]


VIEW = NodeView.from_stats(["a", "b", "c"], [NodeStats(1.0, 4, 2**30, 2**34)] * 3)
NODES = st.sampled_from(["a", "b", "c", "zz", ""])
CORE_CORES = st.one_of(
    st.floats(0.0, 64.0), st.sampled_from([-0.0, 3, 2**53 + 1, 2**60, -1.0, float("nan"), float("inf"), True, "1"])
)
CORE_BYTES = st.one_of(
    st.integers(0, 2**40), st.sampled_from([4.0, MAX_BYTES, MAX_BYTES + 1, 2**64, -1, 2.5, False, "5", None])
)


def row_by_row(view: NodeView, candidates: list[MigrationCandidate]) -> CandidateBatch:
    """The batch one candidate at a time by the single-value checks, stopping at the first failing
    one: its unknown source, its unknown or same target, then its stats in field order."""
    index = view.index()
    src, tgt, cpu, mem = [], [], [], []
    for i, cand in enumerate(candidates):
        mig = cand.migration
        s, t = index.get(mig.source_node), index.get(mig.target_node)
        if s is None:
            raise InvalidInputError(f"candidates[{i}].source-node", f"source node '{mig.source_node}' does not exist")
        if t is None or t == s:
            problem = "does not exist" if t is None else "is the source node"
            raise InvalidInputError(f"candidates[{i}].target-node", f"target node '{mig.target_node}' {problem}")
        given = cand.stats
        stats = ResourceStats.checked(given.cpu, given.maxcpu, given.mem, given.maxmem, f"candidates[{i}].stats")
        src.append(s)
        tgt.append(t)
        cpu.append(stats.cpu)
        mem.append(stats.mem)
    sids = [cand.migration.sid for cand in candidates]
    return CandidateBatch(
        view,
        sids,
        np.arange(len(sids)),
        np.array(src, dtype=np.int64),
        np.array(tgt, dtype=np.int64),
        np.array(cpu, dtype=np.float64),
        np.array(mem, dtype=np.int64),
    )


def outcome(build):
    """The batch's columns, or the error (type, field, problem / text) building it raised."""
    try:
        batch = build()
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return ("error", type(exc), getattr(exc, "field", None), getattr(exc, "problem", str(exc)))
    return (
        "batch",
        [batch.sids[i] for i in batch.sid_index.tolist()],  # each row's sid, however they are numbered
        batch.src.tolist(),
        batch.tgt.tolist(),
        bits(batch.cpu.tolist()),
        batch.mem.tolist(),
        [a.dtype for a in (batch.sid_index, batch.src, batch.tgt, batch.cpu, batch.mem)],
    )


ROWS = st.lists(
    st.tuples(st.sampled_from(["vm:1", "vm:2", "vm:3"]), NODES, NODES, CORE_CORES, CORE_CORES, CORE_BYTES, CORE_BYTES),
    max_size=12,
)


@given(ROWS)
def test_bulk_checked_candidates_equal_row_by_row(rows):
    candidates = [
        MigrationCandidate(Migration(sid, s, t), ResourceStats(cpu, maxcpu, mem, maxmem))
        for sid, s, t, cpu, maxcpu, mem, maxmem in rows
    ]
    assert outcome(lambda: batch_from_columns(VIEW, CandidateColumns.of(candidates))) == outcome(
        lambda: row_by_row(VIEW, candidates)
    )


@given(ROWS, st.booleans())
def test_columns_equal_candidates_with_valid_limits(rows, as_arrays):
    """Columns without maxcpu/maxmem (as the wire gives them); with valid ones the two must agree
    on everything else."""
    candidates = [
        MigrationCandidate(Migration(sid, s, t), ResourceStats(cpu, 1.0, mem, 2**20))
        for sid, s, t, cpu, _, mem, _ in rows
    ]
    sids, sources, targets = ([r[i] for r in rows] for i in range(3))
    cpu, mem = [r[3] for r in rows], [r[5] for r in rows]
    if as_arrays and set(map(type, cpu)) <= {float} and set(map(type, mem)) <= {int} and max(mem, default=0) < 2**63:
        cpu, mem = np.array(cpu, dtype=np.float64), np.array(mem, dtype=np.int64)
    expected = outcome(lambda: row_by_row(VIEW, candidates))
    assert outcome(lambda: batch_from_columns(VIEW, CandidateColumns(sids, sources, targets, cpu, mem))) == expected


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="length"):
        batch_from_columns(VIEW, CandidateColumns(["vm:1"], ["a"], ["b"], [1.0], []))


def test_unsigned_bytes_beyond_int64_are_named_not_wrapped():
    mem = np.array([5, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(Exception) as caught:
        batch_from_columns(VIEW, CandidateColumns(["vm:1", "vm:2"], ["a", "a"], ["b", "c"], np.array([1.0, 1.0]), mem))
    assert getattr(caught.value, "field", None) == "candidates[1].stats.mem"


def test_limits_of_a_different_length_are_refused():
    with pytest.raises(ValueError, match="length"):
        batch_from_columns(VIEW, CandidateColumns(["vm:1"], ["a"], ["b"], [1.0], [5], maxcpu=[1.0], maxmem=[]))


def test_a_list_is_no_form_the_engine_takes():
    from crs_bridge.core import new_scheduler

    with pytest.raises(TypeError, match="CandidateColumns or CompactColumns"):
        new_scheduler("static").candidate_batch([])
