"""A usage's views are aggregated once per state: every change is seen by the next view, and no
caller can change a view another caller gets.

The expected side is a usage built afresh, to the same state, whose view was never cached.
"""

from __future__ import annotations

import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import crs_bridge.core.usage as usage_module
from crs_bridge.core import Aggregation, NodeStats, ResourceStats, SchedulingError, Usage
from crs_bridge.core.limits import MAX_BYTES, MAX_CORES
from crs_bridge.core.usage import NodeView, Resource
from tests import reference as ref

GiB = 1024**3


def columns(usage: Usage, aggregation: Aggregation) -> tuple:
    view = usage.view(aggregation)
    bits = [struct.pack("<d", x) for x in view.cpu.tolist()]
    loads = [struct.pack("<d", x) for x in view.load.tolist()]
    return view.names, bits, view.mem.tolist(), view.maxcpu.tolist(), view.maxmem.tolist(), loads


def resource(cpu: float, running: bool, current: str, target: str | None = None) -> Resource:
    return Resource(ResourceStats.checked(cpu, 2 * cpu, GiB, 2 * GiB), running, current, target)


#: Each change with its effect on a usage: the cached views must follow every one.
CHANGES = [
    ("add a node", lambda u: u.add_node("c", NodeStats.checked(0.5, 8, GiB, 16 * GiB))),
    ("add a resource", lambda u: u.add_resource("vm:3", resource(1.5, True, "a"))),
    ("add a starting resource", lambda u: u.add_resource("vm:4", resource(0.25, False, "b"))),
    ("add a moving resource", lambda u: u.add_resource("vm:5", resource(3.0, True, "a", "b"))),
    ("remove a resource", lambda u: u.remove_resource("vm:1")),
    ("legacy add of a new sid", lambda u: u.add_resource_usage_to_node("b", "vm:6", ResourceStats.static(1.0, GiB))),
    ("legacy add making one move", lambda u: u.add_resource_usage_to_node("b", "vm:2", ResourceStats.static(1.0, 1))),
    ("remove a node", lambda u: u.remove_node("a")),
]


def base() -> Usage:
    usage = Usage()
    usage.add_node("a", NodeStats.checked(1.0, 16, 2 * GiB, 64 * GiB))
    usage.add_node("b", NodeStats.checked(4.0, 8, 6 * GiB, 32 * GiB))
    usage.add_resource("vm:1", resource(1.0, True, "a"))
    usage.add_resource("vm:2", resource(0.5, False, "a"))
    return usage


@pytest.mark.parametrize("done", range(1, len(CHANGES) + 1), ids=[name for name, _ in CHANGES])
def test_every_change_is_seen_by_the_next_view(done):
    cached, fresh = base(), base()
    for aggregation in Aggregation:
        cached.view(aggregation)  # cached before the changes
    for _, change in CHANGES[:done]:
        before = {a: columns(cached, a) for a in Aggregation}
        change(cached)
        change(fresh)
        assert any(columns(cached, a) != before[a] for a in Aggregation)  # each change shows
    rebuilt = Usage()  # a usage whose views were never asked for, built to the same state
    for name in fresh.node_names():
        rebuilt.add_node(name, fresh.node_stats(name))
    for sid, res in fresh.resources().items():
        rebuilt.add_resource(sid, res)
    for aggregation in Aggregation:
        assert columns(cached, aggregation) == columns(rebuilt, aggregation)


def test_a_failed_change_keeps_the_view_and_a_copy_has_its_own():
    usage = base()
    view = usage.view(Aggregation.STARTED)
    with pytest.raises(SchedulingError):
        usage.add_resource("vm:1", resource(1.0, True, "a"))
    assert usage.view(Aggregation.STARTED) is view
    other = usage.copy()
    other.add_resource("vm:9", resource(2.0, True, "b"))
    assert usage.view(Aggregation.STARTED) is view
    assert columns(other, Aggregation.STARTED) != columns(usage, Aggregation.STARTED)


def test_views_are_read_only():
    view = base().view(Aggregation.STARTED)
    for column in (view.cpu, view.maxcpu, view.mem, view.maxmem, view.load):
        with pytest.raises(ValueError):
            column[0] = 0
        assert isinstance(column, np.ndarray)


#: Byte counts of a few GiB, and beyond 2**53 with low bits set: taken as floats, they round.
BYTES = st.one_of(st.integers(1, 2**40), st.integers(2**53, MAX_BYTES).map(lambda count: count | 0x3FF))
#: Node stats over the whole accepted range.
ANY_NODE = st.builds(NodeStats, st.floats(0.0, MAX_CORES), st.integers(1, int(MAX_CORES)), BYTES, BYTES)


@given(st.lists(ANY_NODE, min_size=0, max_size=2 * usage_module._PYTHON_LOADS_UP_TO + 1))
def test_loads_node_by_node_and_by_columns_are_the_references(stats):
    """A view's loads, computed node by node in Python (few nodes) or on the columns (many), have
    the reference's bits either way."""
    names = [f"n{i}" for i in range(len(stats))]
    expected = [struct.pack("<d", ref.load(s)) for s in stats]
    for up_to in (0, len(stats)):  # on the columns; node by node
        with mock.patch.object(usage_module, "_PYTHON_LOADS_UP_TO", up_to):
            view = NodeView.from_stats(names, stats)
        assert [struct.pack("<d", x) for x in view.load.tolist()] == expected
        assert view.load.dtype == np.float64
