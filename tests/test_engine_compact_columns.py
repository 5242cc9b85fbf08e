"""Bundles as columns in the engine: target lists given as lists or numbered by their text
(:class:`core.candidates.RepeatedLists`) expand alike, and as the bundles one at a time do.
(Expansion against the reference model, errors included: test_engine_properties.)"""

from __future__ import annotations

import contextlib
import struct

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.core import (
    CompactCandidate,
    CompactColumns,
    InvalidInputError,
    NodeStats,
    ResourceStats,
    SchedulingError,
    new_scheduler,
)
from crs_bridge.core.candidates import RepeatedLists, concat_batches, expand_compact, numbered
from crs_bridge.core.limits import MAX_BYTES

# -- expansion of columns ----------------------------------------------------------------------

NODE_NAMES = ["n1", "n2", "n3"]
SIDS = ["vm:1", "vm:2", "vm:3", "vm:4", "vm:5"]


@st.composite
def clusters(draw):
    """A dynamic or static scheduler with some of SIDS placed (stationary or moving)."""
    mode = draw(st.sampled_from(["static", "dynamic"]))
    scheduler = new_scheduler(mode)
    for name in NODE_NAMES:
        if mode == "static":
            scheduler.add_node(name, 8, 64 << 30)
        else:
            scheduler.add_node(name, NodeStats.checked(draw(st.floats(0, 8)), 8, 1 << 30, 64 << 30))
    for sid in draw(st.lists(st.sampled_from(SIDS), unique=True)):
        cpu = draw(st.sampled_from([0.0, 0.1, 0.7, 1.0, 3.25]))
        mem = draw(st.sampled_from([0, 1, 1 << 30, MAX_BYTES // 4]))
        stats = ResourceStats.checked(cpu, 4.0, mem, MAX_BYTES // 4)
        current = draw(st.sampled_from(NODE_NAMES))
        target = draw(st.sampled_from([None, None, *NODE_NAMES]))
        add = scheduler.add_service if mode == "static" else scheduler.add_resource
        with contextlib.suppress(SchedulingError, InvalidInputError):  # same nodes, too much memory
            add(sid, stats, draw(st.booleans()), current, target)
    return scheduler


@st.composite
def bundle_columns(draw):
    """Bundles over SIDS (and an unknown sid), valid and not, as columns."""
    sid = st.sampled_from([*SIDS, "vm:x"])
    leaders, resources, nodes = [], [], []
    for _ in range(draw(st.integers(0, 5))):
        leader = draw(sid)
        members = draw(st.lists(sid, max_size=3))
        if draw(st.integers(0, 3)):
            members = [leader, *members]  # mostly the leader is a member, sometimes twice
        leaders.append(leader)
        resources.append(members)
        nodes.append(draw(st.lists(st.sampled_from([*NODE_NAMES, "n9"]), max_size=3)))
    return CompactColumns(leaders, resources, nodes)


def outcome(build):
    """A batch's columns (floats by their bits), or the error it raised (type and message)."""
    try:
        batch = build()
    except (SchedulingError, InvalidInputError) as exc:
        return type(exc), str(exc)
    cpu = [struct.pack("<d", v) for v in batch.cpu.tolist()]
    arrays = (batch.sid_index, batch.src, batch.tgt, batch.mem)
    assert all(a.dtype == np.int64 for a in arrays) and batch.cpu.dtype == np.float64
    return batch.sids, [a.tolist() for a in arrays], cpu, batch.view.names


@st.composite
def bundle_columns_with_shared_targets(draw):
    """Bundles as an HA round sends them: many, drawing their target lists from a few (all as
    long, or not; an unknown or the source node among them sometimes)."""
    lengths = st.integers(0, 3) if draw(st.booleans()) else st.just(draw(st.integers(0, 3)))
    target = st.sampled_from([*NODE_NAMES, *NODE_NAMES, "n9"])  # an unknown node now and then
    pool = draw(st.lists(lengths.flatmap(lambda n: st.lists(target, min_size=n, max_size=n)), min_size=1, max_size=3))
    sid = st.sampled_from([*SIDS, "vm:x"])
    leaders, resources, nodes = [], [], []
    for _ in range(draw(st.integers(0, 20))):
        leader = draw(sid)
        leaders.append(leader)
        resources.append([leader, *draw(st.lists(sid, max_size=1))] if draw(st.integers(0, 5)) else [leader])
        nodes.append(list(draw(st.sampled_from(pool))))  # equal lists, not the same list
    return CompactColumns(leaders, resources, nodes)


def numbered_by_text(columns: CompactColumns) -> CompactColumns:
    """The columns with their target lists as :class:`RepeatedLists` numbered by JSON text, as
    a decoder may hand them over."""
    numbers: dict[bytes, int] = {}
    rows = [numbers.setdefault(orjson.dumps(names), len(numbers)) for names in columns.nodes]
    lists = [tuple(orjson.loads(text)) for text in numbers]
    return CompactColumns(columns.leaders, columns.resources, RepeatedLists(np.array(rows, dtype=np.int64), lists))


@given(clusters(), st.one_of(bundle_columns(), bundle_columns_with_shared_targets()))
def test_columns_expand_alike_and_as_their_bundles_one_at_a_time(scheduler, columns):
    """Any bundles, and bundles as an HA round sends them (target lists shared by many), their
    target lists as lists or keyed by their text: the same batch or error; a valid batch has the
    rows of the bundles expanded one at a time, one after the other."""
    view = scheduler.view()
    expanded = outcome(lambda: expand_compact(scheduler.usage, view, columns))
    assert outcome(lambda: expand_compact(scheduler.usage, view, numbered_by_text(columns))) == expanded
    if type(expanded[0]) is list and len(columns):  # valid: a batch's sids
        alone = [expand_compact(scheduler.usage, view, CompactColumns.of([bundle])) for bundle in columns.bundles()]
        assert outcome(lambda: concat_batches(alone)) == expanded


@given(st.lists(st.sampled_from([b"[]", b'["a"]', b'["a","b"]', ("a",), ("b", "a"), "x"]), max_size=30))
def test_numbered_keys_read_back_as_the_keys(keys):
    numbers, distinct = numbered(keys)
    assert numbers.dtype == np.int64 and [distinct[n] for n in numbers.tolist()] == keys
    assert distinct == list(dict.fromkeys(keys))  # each once, in the order they first appear


def test_repeated_lists_read_as_the_lists_they_stand_for():
    lists = [["n1", "n2"], ["n3"], ["n1", "n2"], []]
    repeated = numbered_by_text(CompactColumns(["a"] * 4, [["a"]] * 4, lists)).nodes
    assert len(repeated) == 4
    assert list(repeated) == [tuple(names) for names in lists]
    assert [repeated[i] for i in range(4)] == list(repeated) and repeated[-1] == ()
    assert repeated[1:3] == [("n3",), ("n1", "n2")]
    assert repeated.lengths().tolist() == [2, 1, 2, 0]


def test_bundles_as_columns_read_back_as_the_bundles():
    bundles = [CompactCandidate("vm:1", ("vm:1", "vm:2"), ("n2", "n3")), CompactCandidate("vm:3", ("vm:3",), ())]
    columns = CompactColumns.of(bundles)
    assert len(columns) == 2 and columns.bundles() == bundles
    assert len(CompactColumns.of([])) == 0
