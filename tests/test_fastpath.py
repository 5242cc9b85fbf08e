"""The bulk paths agree with the one-at-a-time paths they stand in for.

* :func:`bridge.fastpath.expanded_columns` against the pydantic models (the wire schema): it may
  only accept what the models accept, with the values they produce; whatever it turns down goes
  to the models, so a call's errors (locations and messages) are the models' own.
* :func:`core.candidates.batch_from_columns` and the bulk-checked
  :func:`core.candidates.batch_from_candidates` against the row-by-row construction: the same
  batch, or the same first error.

The expected side is always the slow path, never a hard-coded result.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from crs_bridge.bridge import convert, fastpath
from crs_bridge.bridge import models as m
from crs_bridge.bridge.errors import ParamsError
from crs_bridge.bridge.methods import Bridge
from crs_bridge.core import CandidateColumns, Migration, MigrationCandidate, NodeStats, ResourceStats
from crs_bridge.core.candidates import _batch_row_by_row, batch_from_candidates, batch_from_columns
from crs_bridge.core.limits import MAX_BYTES, MAX_CORES
from crs_bridge.core.usage import NodeView

STATS = {"cpu": 0.5, "maxcpu": 2.0, "mem": 3 * 2**30, "maxmem": 4 * 2**30}


def candidate(sid="vm:1", source="n1", target="n2", **stats) -> dict:
    return {"sid": sid, "source-node": source, "target-node": target, "stats": {**STATS, **stats}}


def pydantic_candidates(candidates: list) -> list:
    """The models' validation of ``candidates`` as a call's param (raises ValidationError)."""
    params = m.ScoreCandidatesParams.model_validate({"scheduler": "s1", "candidates": candidates, "limit": 1})
    return params.candidates


def columns_of(validated: list) -> tuple:
    """(sids, sources, targets, cpu, mem) of model-validated expanded candidates, as the slow path
    hands them to the engine."""
    core = convert.candidates_to_core(validated)
    migrations = [c.migration for c in core]
    return (
        [x.sid for x in migrations],
        [x.source_node for x in migrations],
        [x.target_node for x in migrations],
        [c.stats.cpu for c in core],
        [c.stats.mem for c in core],
    )


def bits(values) -> list:
    """Floats by their bit patterns (tells -0.0 from 0.0), ints as they are."""
    return [struct.pack("<d", v) if isinstance(v, float) else v for v in values]


def same_columns(fast: CandidateColumns, slow: tuple) -> bool:
    sids, sources, targets, cpu, mem = slow
    return (
        list(fast.sids) == sids
        and list(fast.sources) == sources
        and list(fast.targets) == targets
        and fast.cpu.dtype == np.float64
        and bits(fast.cpu.tolist()) == bits(cpu)
        and fast.mem.dtype == np.int64
        and fast.mem.tolist() == mem
        and all(type(v) is int for v in mem)
    )


def check_agreement(candidates: list) -> CandidateColumns | None:
    """The fast path accepts only what the models accept, with the same values; returns its columns."""
    fast = fastpath.expanded_columns(candidates)
    try:
        slow = pydantic_candidates(candidates)
    except ValidationError:
        assert fast is None
        return None
    if fast is not None:
        assert same_columns(fast, columns_of(slow))
    return fast


# -- the fast path against the models ---------------------------------------------------------

# Values of every kind a JSON decoder (or a Python caller) can hand over, valid and not.
NAMES = st.sampled_from(["n1", "n2", "vm:1", "vm:2", "ü-ñode", "", 1, None, True, ["n1"], {"a": 1}])
CORES = st.sampled_from(
    [0.0, -0.0, 0.5, 1.0, 4, 0, 2**53, 2**53 + 1, float(MAX_CORES), 2**60, 2**1100, 1e300, -1.0, -1]
    + [float("nan"), float("inf"), True, False, "1.5", None, [1.0]]
)
BYTES = st.sampled_from(
    [0, 5, 2**30, MAX_BYTES, MAX_BYTES + 1, 2**64, -1, 4.0, -0.0, 2.0**40, 3.5, 1e300, float("inf")]
    + [float("nan"), True, False, "5", None, [5]]
)
PLAIN_CORES = st.one_of(st.floats(0.0, 1e6), st.integers(0, 2**53))
PLAIN_BYTES = st.integers(0, MAX_BYTES)


@st.composite
def stats_records(draw, cores=CORES, byte_counts=BYTES):
    record = {"cpu": draw(cores), "maxcpu": draw(cores), "mem": draw(byte_counts), "maxmem": draw(byte_counts)}
    for key in draw(st.sets(st.sampled_from(list(record)), max_size=1)):
        del record[key]  # sometimes a key is missing
    if draw(st.booleans()):
        record["extra"] = draw(st.sampled_from([1, "x", None]))  # unknown keys are ignored
    return record


@st.composite
def candidate_records(draw, names=NAMES, stats=None):
    record = {
        "sid": draw(names),
        "source-node": draw(names),
        "target-node": draw(names),
        "stats": draw(stats if stats is not None else stats_records()),
    }
    for key in draw(st.sets(st.sampled_from(list(record)), max_size=1)):
        del record[key]
    return record


@given(st.lists(candidate_records(), min_size=1, max_size=6))
def test_fast_path_accepts_only_what_the_models_accept(candidates):
    check_agreement(candidates)


@given(st.lists(candidate_records(), min_size=1, max_size=4), st.integers(0, 3), st.sampled_from([None, 7, "x", []]))
def test_non_records_are_left_to_the_models(candidates, at, other):
    """A candidate or stats that is not an object, or a list whose first entry looks compact."""
    at = at % len(candidates)
    check_agreement([*candidates[:at], other, *candidates[at + 1 :]])
    check_agreement([{**c, "stats": other} if i == at else c for i, c in enumerate(candidates)])
    check_agreement([{**candidates[0], "leader": "vm:1"}, *candidates[1:]])


@given(
    st.lists(
        candidate_records(NAMES.filter(lambda n: isinstance(n, str) and n), stats_records(PLAIN_CORES, PLAIN_BYTES))
    )
)
def test_plain_valid_candidates_take_the_fast_path(candidates):
    """Valid input of the usual kinds is accepted in bulk (the models are not the fallback then)."""
    complete = [c for c in candidates if len(c) == 4 and {"cpu", "maxcpu", "mem", "maxmem"} <= c["stats"].keys()]
    if complete:
        assert check_agreement(complete) is not None


def test_integral_floats_and_negative_zero_are_normalised_as_the_models_do():
    given_values = [candidate(cpu=-0.0, mem=4.0, maxmem=2.0**40), candidate(cpu=3, maxcpu=4, mem=-0.0)]
    fast = check_agreement(given_values)
    assert fast is not None and fast.mem.tolist() == [4, 0] and bits(fast.cpu.tolist()) == bits([0.0, 3.0])


# -- a call's errors are the models' own ------------------------------------------------------


def call_errors(params: dict) -> list[tuple[str, str]]:
    """Errors of validating ``params`` for score_best_balancing_migrations on the server's path."""
    bridge = Bridge()
    spec = bridge.methods["score_best_balancing_migrations"]
    with pytest.raises(ParamsError) as caught:
        bridge._validate(spec, m.ScoreMigrationsParams, params)
    return caught.value.errors


def model_errors(params: dict) -> list[tuple[str, str]]:
    """Errors of validating ``params`` with the models alone."""
    with pytest.raises(ValidationError) as caught:
        m.ScoreMigrationsParams.model_validate(params)
    return ParamsError.from_validation(caught.value).errors


USAGE = {"mode": "dynamic", "nodes": [{"name": "n1", "maxcpu": 4, "maxmem": 2**34, "cpu": 1.0, "mem": 2**30}]}
BAD_VALUES = [
    ({"stats": {**STATS, "cpu": -1.0}}, "stats.cpu"),
    ({"stats": {**STATS, "cpu": "0.5"}}, "stats.cpu"),
    ({"stats": {**STATS, "maxcpu": True}}, "stats.maxcpu"),
    ({"stats": {**STATS, "mem": 1.5}}, "stats.mem"),
    ({"stats": {**STATS, "maxmem": MAX_BYTES + 1}}, "stats.maxmem"),
    ({"stats": {k: v for k, v in STATS.items() if k != "mem"}}, "stats.mem"),
    ({"stats": [1, 2]}, "stats"),
    ({"sid": ""}, "sid"),
    ({"source-node": 7}, "source-node"),
    ({"target-node": None}, "target-node"),
]


BIG = [candidate(target=f"n{2 + i % 5}") for i in range(12_346)]


@pytest.mark.parametrize(("change", "field"), BAD_VALUES)
def test_a_bad_value_deep_in_a_big_list_is_named_as_the_models_name_it(change, field):
    candidates = list(BIG)
    candidates[12_345] = {**candidates[12_345], **change}
    params = {"usage": USAGE, "candidates": candidates, "limit": 1}
    errors = call_errors(params)
    assert errors == model_errors(params)
    assert errors[0][0] == f"candidates[12345].{field}"


def test_errors_elsewhere_in_the_params_are_unchanged_by_the_fast_path():
    params = {"usage": {**USAGE, "mode": "hybrid"}, "candidates": [candidate()], "limit": -1, "method": "best"}
    assert call_errors(params) == model_errors(params)
    assert {loc for loc, _ in call_errors(params)} >= {"limit", "method"}


def test_a_valid_call_validates_to_the_models_values_except_the_bulk_forms():
    params = {"usage": USAGE, "candidates": [candidate(), candidate(sid="vm:2", cpu=1)], "limit": 3}
    bridge = Bridge()
    spec = bridge.methods["score_best_balancing_migrations"]
    fast = bridge._validate(spec, m.ScoreMigrationsParams, params)
    slow = m.ScoreMigrationsParams.model_validate(params)
    assert isinstance(fast.candidates, CandidateColumns)
    assert same_columns(fast.candidates, columns_of(slow.candidates))
    assert fast.usage == convert.snapshot_rows(slow.usage)
    assert fast.model_dump(exclude={"candidates", "usage"}) == slow.model_dump(exclude={"candidates", "usage"})


def test_only_fields_of_the_candidates_type_take_the_fast_path():
    assert fastpath.takes_candidates(m.ScoreMigrationsParams)
    assert fastpath.takes_candidates(m.ScoreCandidatesParams)
    assert not fastpath.takes_candidates(m.NodeNameParams)


# -- core: columns and bulk checks against the row-by-row batch -----------------------------------

VIEW = NodeView.from_stats(["a", "b", "c"], [NodeStats(1.0, 4, 2**30, 2**34)] * 3)
NODES = st.sampled_from(["a", "b", "c", "zz", ""])
CORE_CORES = st.one_of(
    st.floats(0.0, 64.0), st.sampled_from([-0.0, 3, 2**53 + 1, 2**60, -1.0, float("nan"), float("inf"), True, "1"])
)
CORE_BYTES = st.one_of(
    st.integers(0, 2**40), st.sampled_from([4.0, MAX_BYTES, MAX_BYTES + 1, 2**64, -1, 2.5, False, "5", None])
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
    assert outcome(lambda: batch_from_candidates(VIEW, candidates)) == outcome(
        lambda: _batch_row_by_row(VIEW, candidates)
    )


@given(ROWS, st.booleans())
def test_columns_equal_candidates_with_valid_limits(rows, as_arrays):
    """Columns carry no maxcpu/maxmem; with valid ones the two must agree on everything else."""
    candidates = [
        MigrationCandidate(Migration(sid, s, t), ResourceStats(cpu, 1.0, mem, 2**20))
        for sid, s, t, cpu, _, mem, _ in rows
    ]
    sids, sources, targets = ([r[i] for r in rows] for i in range(3))
    cpu, mem = [r[3] for r in rows], [r[5] for r in rows]
    if as_arrays and set(map(type, cpu)) <= {float} and set(map(type, mem)) <= {int} and max(mem, default=0) < 2**63:
        cpu, mem = np.array(cpu, dtype=np.float64), np.array(mem, dtype=np.int64)
    expected = outcome(lambda: _batch_row_by_row(VIEW, candidates))
    assert outcome(lambda: batch_from_columns(VIEW, sids, sources, targets, cpu, mem)) == expected


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="length"):
        batch_from_columns(VIEW, ["vm:1"], ["a"], ["b"], [1.0], [])


def test_unsigned_bytes_beyond_int64_are_named_not_wrapped():
    mem = np.array([5, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(Exception) as caught:
        batch_from_columns(VIEW, ["vm:1", "vm:2"], ["a", "a"], ["b", "c"], np.array([1.0, 1.0]), mem)
    assert getattr(caught.value, "field", None) == "candidates[1].stats.mem"
