"""The bulk checks of usage snapshots (:func:`bridge.fastpath.usage_rows`) against the models.

They may only accept what :data:`bridge.models.Usage` accepts, and must then give the engine the
same values as the models' path (:func:`bridge.convert.snapshot_rows`), to the bit; whatever they
turn down goes to the models. The expected side is always the models, never a hard-coded result.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from crs_bridge.bridge import convert, fastpath
from crs_bridge.bridge import models as m
from crs_bridge.core import NodeStats, Resource, ResourceStats
from crs_bridge.core.limits import MAX_BYTES, MAX_CORES
from tests.test_fastpath import STATS, call_errors, model_errors

USAGE_MODEL = TypeAdapter(m.Usage)

NAMES = st.sampled_from(["n1", "n2", "n3", "vm:1", "vm:2", "", 1, None, True, ["n1"]])
CORES = st.sampled_from([0.0, -0.0, 0.5, 4, 0, 2**53, 2**53 + 1, float(MAX_CORES), 1e300, -1.0, True, "1", None])
NODE_CORES = st.sampled_from([1, 4, 64, 0, -1, 4.0, 4.5, 2**53, 2**53 + 1, True, "4", None])
BYTES = st.sampled_from([0, 5, 2**34, MAX_BYTES, MAX_BYTES + 1, 2**64, -1, 4.0, -0.0, 3.5, True, "5", None])
RUNNING = st.sampled_from([True, False, 0, 1, 2.5, None, "yes"])


def optional(draw, record: dict, keys: list[str]) -> dict:
    """``record`` with sometimes one of ``keys`` missing, and sometimes an unknown key."""
    for key in draw(st.sets(st.sampled_from(keys), max_size=1)):
        record.pop(key, None)
    if draw(st.booleans()):
        record["extra"] = draw(st.sampled_from([1, "x", None]))
    return record


@st.composite
def nodes(draw, mode: str) -> dict:
    node = {"name": draw(NAMES), "maxcpu": draw(NODE_CORES), "maxmem": draw(BYTES)}
    if mode == "dynamic" or draw(st.booleans()):
        node.update(cpu=draw(CORES), mem=draw(BYTES))
    return optional(draw, node, list(node))


@st.composite
def resources(draw, mode: str) -> dict:
    if mode == "static":
        stats = {"maxcpu": draw(CORES), "maxmem": draw(BYTES)}
    else:
        stats = {"cpu": draw(CORES), "maxcpu": draw(CORES), "mem": draw(BYTES), "maxmem": draw(BYTES)}
    resource = {"sid": draw(NAMES), "stats": optional(draw, stats, list(stats)), "running": draw(RUNNING)}
    resource["current-node"] = draw(NAMES)
    if draw(st.booleans()):
        resource["target-node"] = draw(st.one_of(NAMES, st.none()))
    return optional(draw, resource, ["sid", "stats", "running", "current-node"])


@st.composite
def usages(draw) -> object:
    mode = draw(st.sampled_from(["static", "dynamic"]))
    usage = {
        "mode": draw(st.sampled_from([mode, mode, mode, "other", None])),
        "nodes": draw(st.lists(nodes(mode), max_size=4)),
        "resources": draw(st.lists(resources(mode), max_size=5)),
    }
    usage = optional(draw, usage, ["mode", "nodes", "resources"])
    return draw(st.sampled_from([usage, usage, usage, [usage], None]))


def bits(rows: fastpath.SnapshotRows) -> tuple:
    """Every value of ``rows``, floats by their bit patterns (tells -0.0 from 0.0), with types."""

    def value(v):
        return (type(v), struct.pack("<d", v)) if isinstance(v, float) else (type(v), v)

    def stats(s: NodeStats | ResourceStats) -> tuple:
        return tuple(value(getattr(s, f)) for f in ("cpu", "maxcpu", "mem", "maxmem"))

    def resource(r: Resource) -> tuple:
        return stats(r.stats), value(r.running), r.current, r.target

    return (
        rows.mode,
        [(name, stats(s)) for name, s in rows.nodes],
        [(sid, resource(r)) for sid, r in rows.resources],
    )


@given(usages())
def test_bulk_checks_accept_only_what_the_models_accept_with_their_values(usage):
    fast = fastpath.usage_rows(usage)
    try:
        slow = convert.snapshot_rows(USAGE_MODEL.validate_python(usage))
    except ValidationError:
        assert fast is None
        return
    if fast is not None:
        assert bits(fast) == bits(slow)


@given(st.lists(st.integers(1, 64), min_size=1, max_size=5), st.booleans())
def test_plain_valid_snapshots_take_the_bulk_path(cores, moving):
    names = [f"n{i}" for i in range(len(cores))]
    usage = {
        "mode": "dynamic",
        "nodes": [{"name": n, "maxcpu": c, "maxmem": 2**34, "cpu": 0.5, "mem": 2**30} for n, c in zip(names, cores)],
        "resources": [
            {
                "sid": f"vm:{i}",
                "stats": {"cpu": 0.25, "maxcpu": 1, "mem": 2**20, "maxmem": 2**21},
                "running": i % 2 == 0,
                "current-node": n,
                "target-node": names[0] if moving and n != names[0] else None,
            }
            for i, n in enumerate(names)
        ],
    }
    fast = fastpath.usage_rows(usage)
    assert fast is not None
    assert bits(fast) == bits(convert.snapshot_rows(USAGE_MODEL.validate_python(usage)))


GOOD_NODE = {"name": "n1", "maxcpu": 4, "maxmem": 2**34, "cpu": 1.0, "mem": 2**30}
GOOD_RESOURCE = {"sid": "vm:1", "stats": STATS, "running": True, "current-node": "n1"}
BAD_SNAPSHOTS = [
    ({"nodes": [{**GOOD_NODE, "cpu": -1.0}]}, "usage.nodes[0].cpu"),
    ({"nodes": [{**GOOD_NODE, "maxcpu": 0}]}, "usage.nodes[0].maxcpu"),
    ({"resources": [{**GOOD_RESOURCE, "running": "yes"}]}, "usage.resources[0].running"),
    ({"resources": [{**GOOD_RESOURCE, "stats": {**STATS, "mem": 1.5}}]}, "usage.resources[0].stats.mem"),
]


@pytest.mark.parametrize(("change", "loc"), BAD_SNAPSHOTS)
def test_a_bad_snapshot_value_gets_the_models_error(change, loc):
    usage = {"mode": "dynamic", "nodes": [GOOD_NODE], "resources": [GOOD_RESOURCE], **change}
    params = {"usage": usage, "candidates": [], "limit": 1}
    errors = call_errors(params)
    assert errors == model_errors(params)
    assert errors[0][0] == loc


def test_only_cluster_params_take_the_bulk_path():
    assert fastpath.takes_usage(m.ScoreMigrationsParams)
    assert fastpath.takes_usage(m.ImbalanceParams)
    assert not fastpath.takes_usage(m.ScoreCandidatesParams)
