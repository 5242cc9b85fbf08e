"""scheduler.apply (bridge.schedulers.apply): runs of resource adds go to the engine in bulk, and the
outcome (state and error) must be that of the mutations run one by one as their single calls."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.bridge import models as m
from crs_bridge.bridge import wire
from crs_bridge.bridge.errors import MutationError
from crs_bridge.bridge.schedulers import MUTATORS, apply
from crs_bridge.bridge.wire import ParamsDecoder
from crs_bridge.core import Aggregation, InvalidInputError, SchedulingError, new_scheduler
from crs_bridge.core.limits import MAX_BYTES

GiB = 1 << 30
APPLY = {
    mode: ParamsDecoder(model)
    for mode, model in (("static", m.StaticApplyParams), ("dynamic", m.DynamicApplyParams))
}

# Enough sids for most batches to succeed, and some duplicates.
SIDS = st.integers(1, 200).map(lambda i: f"vm:{i}")
# Mostly known nodes; n4 is unknown until an entry adds it. Mostly stationary resources.
NODES = st.sampled_from(["n1", "n2", "n3"] * 6 + ["n4"])
TARGETS = st.sampled_from([None] * 12 + ["n1", "n2", "n3", "n4"])
#: A few sizes, and huge memory that makes a node's aggregated memory overflow (an engine error).
CORES, BYTES = st.sampled_from([0.0, 0.25, 1.0, 4.0]), st.sampled_from([0, GiB, 4 * GiB, MAX_BYTES // 3])


def stats(mode: str) -> st.SearchStrategy:
    if mode == "static":
        return st.fixed_dictionaries({"maxcpu": CORES, "maxmem": BYTES})
    return st.fixed_dictionaries({"cpu": CORES, "maxcpu": CORES, "mem": BYTES, "maxmem": BYTES})


def placed(mode: str) -> st.SearchStrategy:
    record = st.fixed_dictionaries(
        {"stats": stats(mode), "running": st.booleans(), "current-node": NODES, "target-node": TARGETS}
    )
    return record.map(lambda r: {k: v for k, v in r.items() if v is not None})


@st.composite
def entries(draw, mode: str, first: bool, adds_only: bool = False) -> list:
    """``scheduler.apply`` entries of ``mode``: the ``first`` batch adds nodes n1 to n3; then mostly
    resource adds (runs of them), some of them failing, with other mutations in between (with
    ``adds_only``, node adds only: a round's batch, added in place)."""
    sizes = [(16, 64 * GiB), (8, 32 * GiB), (4, 16 * GiB)] if first else []

    def node(name: str, cores: int, memory: int) -> list:
        if mode == "static":
            return ["add_node", name, cores, memory]
        return ["add_node", name, {"cpu": 1.0, "maxcpu": cores, "mem": GiB, "maxmem": memory}]

    batch = [node(f"n{i + 1}", *size) for i, size in enumerate(sizes)]
    add, remove = ("add_service", "remove_service_usage") if mode == "static" else ("add_resource", "remove_resource")
    others = [
        st.sampled_from(["n1", "n4"]).map(lambda name: node(name, 8, 32 * GiB)),
        st.sampled_from(["n2", "n4"]).map(lambda name: ["remove_node", name]),
        SIDS.map(lambda sid: [remove, sid]),
    ]
    if mode == "static":
        others.append(st.tuples(NODES, SIDS, stats(mode)).map(lambda a: ["add_service_usage_to_node", *a]))
    if adds_only:
        others = others[:1]
    for _ in range(draw(st.integers(0, 12))):
        # Three in four are adds, so that runs of them form.
        adding = draw(st.integers(0, 3))
        batch.append(draw(st.tuples(SIDS, placed(mode)).map(lambda a: [add, *a]) if adding else st.one_of(others)))
    return batch


def state(scheduler) -> tuple:
    """What a scheduler holds, as every query would see it (views bit for bit: the order of each
    node's resources decides their sums)."""
    usage = scheduler.usage
    views = [usage.view(a) for a in Aggregation]
    return (
        usage.node_names(),
        list(usage.resources().items()),
        [(v.cpu.tobytes(), v.mem.tobytes(), v.maxcpu.tobytes(), v.maxmem.tobytes()) for v in views],
    )


def typed(mode: str, batch: list) -> list:
    """The entries as the strict decoder gives them."""
    return APPLY[mode].decode(json.dumps({"scheduler": "s1", "mutations": batch}).encode()).mutations


def one_by_one(mode: str, batches: list) -> tuple:
    """Every mutation run as its single call: a failing batch leaves the state as it was."""
    scheduler, errors = new_scheduler(mode), []
    for batch in batches:
        trial = new_scheduler(mode)
        trial.usage = scheduler.usage.copy()
        for index, entry in enumerate(typed(mode, batch)):
            method = entry.__struct_config__.tag
            try:
                MUTATORS[mode][method](trial, entry)
            except (SchedulingError, InvalidInputError) as exc:
                errors.append(str(MutationError(index, method, exc)))
                break
        else:
            scheduler = trial
            errors.append(None)
    return state(scheduler), errors


def applied(mode: str, batches: list) -> tuple:
    scheduler, errors = new_scheduler(mode), []
    for batch in batches:
        try:
            apply(scheduler, mode, typed(mode, batch))
            errors.append(None)
        except MutationError as exc:
            errors.append(str(exc))
    return state(scheduler), errors


@st.composite
def sessions(draw) -> tuple[str, list]:
    mode = draw(st.sampled_from(["static", "dynamic"]))
    return mode, [draw(entries(mode, True))] + draw(st.lists(entries(mode, False), max_size=2))


@given(sessions())
def test_apply_gives_what_the_mutations_one_by_one_give(session):
    mode, batches = session
    assert applied(mode, batches) == one_by_one(mode, batches)


@st.composite
def add_sessions(draw) -> tuple[str, list]:
    mode = draw(st.sampled_from(["static", "dynamic"]))
    return mode, [draw(entries(mode, True))] + draw(st.lists(entries(mode, False, True), min_size=1, max_size=3))


@given(add_sessions())
def test_batches_of_adds_give_what_the_adds_one_by_one_give(session):
    """Batches of adds only go to the usage itself: one that fails midway must leave it as it was."""
    mode, batches = session
    assert applied(mode, batches) == one_by_one(mode, batches)


def node_entry(mode: str, name: str) -> list:
    if mode == "static":
        return ["add_node", name, 8, 32 * GiB]
    return ["add_node", name, {"cpu": 1.0, "maxcpu": 8, "mem": GiB, "maxmem": 32 * GiB}]


def add_entry(mode: str, sid: str, current: str, target: str | None = None) -> list:
    if mode == "static":
        add, stats = "add_service", {"maxcpu": 1.0, "maxmem": GiB}
    else:
        add, stats = "add_resource", {"cpu": 0.5, "maxcpu": 1.0, "mem": GiB, "maxmem": GiB}
    record = {"stats": stats, "running": True, "current-node": current}
    return [add, sid, record if target is None else {**record, "target-node": target}]


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize("failure", [MemoryError, RuntimeError])
def test_a_batch_of_adds_failing_unexpectedly_midway_changes_nothing(monkeypatch, mode, failure):
    """Adds go to the usage itself: a failure that is no engine error (no memory left, a bug) must
    leave it as it was, as the copy they once ran on did, before the failure goes on up."""
    scheduler = new_scheduler(mode)
    apply(scheduler, mode, typed(mode, [node_entry(mode, "n1"), node_entry(mode, "n2"), add_entry(mode, "vm:1", "n1")]))
    batch = [
        add_entry(mode, "vm:2", "n1"),
        add_entry(mode, "vm:3", "n2", "n1"),
        node_entry(mode, "n3"),
        add_entry(mode, "vm:4", "n3"),
        add_entry(mode, "vm:5", "n2"),
    ]
    before, totals = state(scheduler), [n.maxmem_total for n in scheduler.usage._nodes.values()]
    placed_as_given, calls = wire.placed, []

    def placed_failing_at_the_fourth(record):
        calls.append(record)
        if len(calls) == 4:
            raise failure("injected")
        return placed_as_given(record)

    monkeypatch.setattr(wire, "placed", placed_failing_at_the_fourth)
    with pytest.raises(failure):
        apply(scheduler, mode, typed(mode, batch))
    assert len(calls) == 4  # vm:2, vm:3 and n3 were added before it
    assert state(scheduler) == before
    assert [n.maxmem_total for n in scheduler.usage._nodes.values()] == totals
