"""The rebalance planner (core/planner.py): properties on random clusters, and hand-worked examples
for every stop reason.

The replay check re-applies a plan's moves by hand on a fresh scheduler (static: its own
remove/add methods; dynamic: the measured node stats shifted with core.stats' add/remove of the
bundle's usage, the what-if's assumption) and demands the reported loads and imbalances exactly.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.bridge.results import RebalancePlan
from crs_bridge.bridge.wire import as_wire
from crs_bridge.core import CompactCandidate, InvalidInputError, Migration, MigrationCandidate
from crs_bridge.core.imbalance import truncate
from crs_bridge.core.modes import DynamicScheduler, StaticScheduler
from crs_bridge.core.planner import plan_rebalance
from crs_bridge.core.stats import ZERO_RESOURCE, NodeStats, ResourceStats, add_running, remove_running
from crs_bridge.core.verdicts import (
    MARGIN_NOT_REACHED,
    MAX_STEPS,
    NO_CANDIDATES,
    NO_IMPROVEMENT,
    STOP_REASONS,
    THRESHOLD_REACHED,
)
from tests import columns
from tests.test_explain import HOMOGENEOUS, VM101_CANDIDATES, Cluster, GiB, clusters, figure_cluster, two_bundles_of_vm1

# -- replaying a plan by hand ----------------------------------------------------------------


def replay(cluster: Cluster, plan) -> StaticScheduler | DynamicScheduler:
    """A fresh scheduler with the plan's moves applied one by one; checks each step's source and
    imbalance on the way."""
    if cluster.mode == "static":
        s = cluster.scheduler()
        for step in plan.steps:
            for sid in step.resources:
                r = s.usage.resource(sid)
                assert r.current == step.migration.source_node
                s.remove_service_usage(sid)
                s.add_service(sid, r.stats, r.running, step.migration.target_node)
            assert s.calculate_node_imbalance() == step.imbalance_after
        return s
    nodes = dict(cluster.nodes)
    placed = {sid: [stats, running, current, target] for sid, stats, running, current, target in cluster.resources}
    for step in plan.steps:
        source, target = step.migration.source_node, step.migration.target_node
        moving = ZERO_RESOURCE
        for sid in step.resources:
            assert placed[sid][2] == source
            moving = moving + placed[sid][0]
            placed[sid][2] = target
        nodes[source], nodes[target] = remove_running(nodes[source], moving), add_running(nodes[target], moving)
        s = DynamicScheduler(cluster.formula)
        for name, stats in nodes.items():
            s.add_node(name, stats)
        for sid, (stats, running, current, moving_to) in placed.items():
            s.add_resource(sid, stats, running, current, moving_to)
        assert s.calculate_node_imbalance() == step.imbalance_after
    return s if plan.steps else cluster.scheduler()


def loads_of(scheduler) -> list[tuple]:
    view = scheduler.view()
    return list(zip(view.names, view.cpu_loads().tolist(), view.mem_loads().tolist(), view.loads().tolist()))


def snapshot(scheduler) -> tuple:
    view = scheduler.view()
    return view.names, view.cpu.tobytes(), view.mem.tobytes(), scheduler.usage.resources()


# -- properties ------------------------------------------------------------------------------


@given(
    clusters(),
    st.sampled_from(["bruteforce", "topsis"]),
    st.sampled_from([0.0, 0.1, 0.3]),
    st.sampled_from([0.0, 0.05, 0.1]),
    st.sampled_from([None, 0, 1, 3]),
    st.booleans(),
)
def test_plan_properties(cluster, method, threshold, margin, max_steps, allow_repeat):
    s = cluster.scheduler()
    untouched = snapshot(s)
    plan = plan_rebalance(s, columns(cluster.bundles), method, threshold, margin, max_steps, allow_repeat)
    assert snapshot(s) == untouched

    assert plan.stop_reason in STOP_REASONS
    assert max_steps is None or len(plan.steps) <= max_steps
    assert (plan.stop_reason == MAX_STEPS) == (len(plan.steps) == max_steps and plan.after.imbalance > threshold)
    assert (plan.stop_reason == THRESHOLD_REACHED) == (plan.after.imbalance <= threshold)
    assert [(n.name, n.cpu, n.mem, n.load) for n in plan.before.nodes] == loads_of(s)

    # The imbalance strictly falls, step after step, and each step passed the margin.
    imbalance = plan.before.imbalance
    for step in plan.steps:
        assert step.imbalance_before == imbalance
        assert step.imbalance_after < step.imbalance_before
        assert (step.imbalance_before - step.expected_imbalance) / step.imbalance_before >= margin
        if cluster.mode == "dynamic":
            assert truncate(step.imbalance_after) == step.expected_imbalance
        imbalance = step.imbalance_after
    assert plan.after.imbalance == imbalance <= plan.before.imbalance

    # Every move goes where its bundle may go; without allow_repeat nothing moves twice.
    allowed = {b.leader: b for b in cluster.bundles}
    for step in plan.steps:
        bundle = allowed[step.migration.sid]
        assert step.resources == bundle.resources
        assert step.migration.target_node in bundle.nodes
        assert step.migration.target_node != step.migration.source_node
    moved = [sid for step in plan.steps for sid in step.resources]
    if not allow_repeat:
        assert len(moved) == len(set(moved))

    # Step 1 is what one HA round would pick.
    if plan.steps:
        best = (
            s.select_best_balancing_migration_topsis(columns(cluster.bundles))
            if method == "topsis"
            else s.select_best_balancing_migration(columns(cluster.bundles))
        )
        assert (best.migration, best.imbalance) == (plan.steps[0].migration, plan.steps[0].expected_imbalance)

    replayed = replay(cluster, plan)
    assert [(n.name, n.cpu, n.mem, n.load) for n in plan.after.nodes] == loads_of(replayed)
    assert plan.after.imbalance == replayed.calculate_node_imbalance()


# -- hand-worked examples --------------------------------------------------------------------


def three_vms_on_node1(formula: str = "normalized") -> tuple[StaticScheduler, list[CompactCandidate]]:
    """Three 8-core 32 GiB nodes; vm:a, vm:b, vm:c (2 cores, 8 GiB each) all on node1, each
    allowed on node2 and node3. Loads 0.75 / 0 / 0; one vm on each node balances perfectly."""
    s = StaticScheduler(formula)
    for name in ("node1", "node2", "node3"):
        s.add_node(name, 8, 32 * GiB)
    bundles = []
    for sid in ("vm:a", "vm:b", "vm:c"):
        s.add_service(sid, ResourceStats.static(2.0, 8 * GiB), True, "node1")
        bundles.append(CompactCandidate(sid, (sid,), ("node2", "node3")))
    return s, bundles


def moves(plan) -> list[tuple[str, str, str]]:
    return [(m.sid, m.source_node, m.target_node) for m in (step.migration for step in plan.steps)]


def test_three_vms_spread_until_balanced():
    s, bundles = three_vms_on_node1()
    plan = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0)
    # Ties in imbalance go by sid, then target: vm:a to node2 first; then node3 is the better target.
    assert moves(plan) == [("vm:a", "node1", "node2"), ("vm:b", "node1", "node3")]
    # Loads 0.5 / 0.25 / 0 after step 1: CV = sqrt(1/24) / 0.25 = sqrt(2/3), normalised 1/sqrt(3).
    assert math.isclose(plan.steps[0].imbalance_after, 1 / math.sqrt(3), rel_tol=1e-15)
    assert plan.after.imbalance == 0.0 and plan.stop_reason == THRESHOLD_REACHED
    assert [(n.cpu, n.mem, n.load) for n in plan.after.nodes] == [(0.25, 0.25, 0.25)] * 3
    assert [n.load for n in plan.before.nodes] == [0.75, 0.0, 0.0]


def test_stop_after_max_steps():
    s, bundles = three_vms_on_node1()
    plan = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0, max_steps=1)
    assert (moves(plan), plan.stop_reason) == ([("vm:a", "node1", "node2")], MAX_STEPS)
    assert "1" in plan.stop_message


def test_stop_at_threshold_before_any_move():
    s, bundles = three_vms_on_node1()
    plan = plan_rebalance(s, columns(bundles), threshold=1.0)
    assert (plan.steps, plan.stop_reason) == ((), THRESHOLD_REACHED)
    assert plan.after == plan.before


def test_stop_when_the_margin_is_not_reached():
    # The first move lowers the imbalance from 1 to 1/sqrt(3): 42.3 % relative.
    s, bundles = three_vms_on_node1()
    assert plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.43).stop_reason == MARGIN_NOT_REACHED
    assert len(plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.42).steps) == 2


def test_stop_when_no_candidate_is_left():
    s, bundles = three_vms_on_node1()
    plan = plan_rebalance(s, columns(bundles[:1]), threshold=0.0, margin=0.0)
    assert (moves(plan), plan.stop_reason) == ([("vm:a", "node1", "node2")], NO_CANDIDATES)
    assert plan_rebalance(s, columns([]), threshold=0.0).stop_reason == NO_CANDIDATES


def test_stop_when_every_move_would_worsen():
    plan = plan_rebalance(figure_cluster(HOMOGENEOUS), columns(VM101_CANDIDATES), threshold=0.0, margin=0.0)
    assert (plan.steps, plan.stop_reason) == ((), NO_IMPROVEMENT)


@pytest.mark.parametrize(("method", "resources"), [("topsis", ("vm:1", "vm:3")), ("bruteforce", ("vm:1", "vm:4"))])
def test_the_bundle_moved_is_the_row_the_scorer_ranked(method, resources):
    """vm:1 leads two bundles whose moves tie in imbalance: TOPSIS ranks the one with vm:3 first,
    bruteforce takes the first listed (with vm:4); the plan moves that bundle."""
    cluster = two_bundles_of_vm1()
    plan = plan_rebalance(cluster.scheduler(), columns(cluster.bundles), method, threshold=0, margin=0, max_steps=1)
    assert [(step.migration.sid, step.resources) for step in plan.steps] == [("vm:1", resources)]
    replay(cluster, plan)


def test_static_move_checked_once_applied():
    """A static service with maxcpu 0 counts a whole node's cores where it runs, but moves 0 cores
    in the what-if: the scorer expects a gain, the applied move only mirrors the loads."""
    s = StaticScheduler()
    s.add_node("node1", 4, 100 * GiB)
    s.add_node("node2", 4, 100 * GiB)
    s.add_service("vm:1", ResourceStats.static(0.0, 60 * GiB), True, "node1")
    bundles = [CompactCandidate("vm:1", ("vm:1",), ("node2",))]
    expected = s.select_best_balancing_migration(columns(bundles)).imbalance
    assert expected < s.calculate_node_imbalance()  # loads 0.8 / 0 -> 0.5 / 0.3 predicted
    plan = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0)
    assert (plan.steps, plan.stop_reason) == ((), NO_IMPROVEMENT)
    assert "once applied" in plan.stop_message


def repeat_cluster() -> tuple[StaticScheduler, list[CompactCandidate]]:
    """vm:100 (4 cores, 4 GiB) fills node1 (4 cores, 16 GiB); vm:101 (2 cores, 1 GiB) on node2
    (8 cores, 64 GiB); node3 (8 cores, 16 GiB) is empty. Raw CV."""
    s = StaticScheduler("raw")
    s.add_node("node1", 4, 16 * GiB)
    s.add_node("node2", 8, 64 * GiB)
    s.add_node("node3", 8, 16 * GiB)
    s.add_service("vm:100", ResourceStats.static(4.0, 4 * GiB), False, "node1")
    s.add_service("vm:101", ResourceStats.static(2.0, 1 * GiB), False, "node2")
    return s, [
        CompactCandidate("vm:100", ("vm:100",), ("node2", "node3")),
        CompactCandidate("vm:101", ("vm:101",), ("node1", "node3")),
    ]


def test_allow_repeat_moves_a_bundle_again():
    s, bundles = repeat_cluster()
    once = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0)
    assert moves(once) == [("vm:100", "node1", "node3"), ("vm:101", "node2", "node1")]
    assert once.stop_reason == NO_CANDIDATES
    again = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0, max_steps=None, allow_repeat=True)
    assert moves(again) == moves(once) + [("vm:100", "node3", "node2")]
    # Loads 0.28125 / 0.28125 / 0: deviations 3/32, 3/32, -6/32 around 6/32 give CV = 1/sqrt(2).
    assert math.isclose(again.after.imbalance, 1 / math.sqrt(2), rel_tol=1e-15)
    assert again.stop_reason == NO_IMPROVEMENT


def test_allow_repeat_skips_a_bundle_whose_members_another_move_split():
    """vm:101 is in two bundles: once the first moves, the second has members on two nodes, which
    HA skips (ha-manager.md 7.3); the plan used to fail on it with the scorer's error."""
    s = StaticScheduler()
    for name, cores in (("n0", 8), ("n1", 8), ("n2", 8)):
        s.add_node(name, cores, 32 * GiB)
    for sid in ("vm:100", "vm:101", "vm:102"):
        s.add_service(sid, ResourceStats.static(2.0, 8 * GiB), True, "n0")
    bundles = [
        CompactCandidate("vm:100", ("vm:100", "vm:101"), ("n1", "n2")),
        CompactCandidate("vm:102", ("vm:102", "vm:101"), ("n1", "n2")),
    ]
    once = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0)
    again = plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0, allow_repeat=True)
    assert moves(once)[:1] == moves(again)[:1] == [("vm:100", "n0", "n1")]
    assert all(step.migration.sid == "vm:100" for step in again.steps)  # never the split bundle


def test_copy_keeps_each_nodes_summing_order():
    """After a legacy add and a node removal, node1 sums its services as b, c, a; the plan's
    model of the cluster must sum them in that order too (0.2 + 0.3 + 0.1 != 0.1 + 0.2 + 0.3)."""
    assert 0.2 + 0.3 + 0.1 != 0.1 + 0.2 + 0.3
    s = StaticScheduler()
    s.add_node("node1", 1, 1 * GiB)
    s.add_node("node2", 1, 1 * GiB)
    s.add_node("node3", 1, 1 * GiB)
    for sid, cores in (("a", 0.1), ("b", 0.2), ("c", 0.3)):
        s.add_service(sid, ResourceStats.static(cores, 0), True, "node1")
    s.add_service_usage_to_node("node2", "a", ResourceStats.static(0.1, 0))
    s.remove_node("node2")
    plan = plan_rebalance(
        s, columns([CompactCandidate("c", ("c",), ("node3",))]), threshold=0.0, margin=0.0, max_steps=0
    )
    assert plan.before.nodes[0].cpu == 0.2 + 0.3 + 0.1 == s.view().cpu_loads()[0]
    moved = plan_rebalance(s, columns([CompactCandidate("c", ("c",), ("node3",))]), threshold=0.0, margin=0.0)
    assert moves(moved) == [("c", "node1", "node3")]
    assert moved.after.nodes[0].cpu == 0.2 + 0.1


def test_moved_services_are_summed_last_on_their_new_node():
    """As remove + add on the scheduler: node2 sums b, c, then the moved a (0.2 + 0.3 + 0.1)."""
    s = StaticScheduler()
    s.add_node("node1", 1, 1 * GiB)
    s.add_node("node2", 8, 1 * GiB)
    for sid, cores, node in (("a", 0.1, "node1"), ("b", 0.2, "node2"), ("c", 0.3, "node2"), ("e", 0.8, "node1")):
        s.add_service(sid, ResourceStats.static(cores, 0), True, node)
    plan = plan_rebalance(s, columns([CompactCandidate("a", ("a",), ("node2",))]), threshold=0.0, margin=0.0)
    assert moves(plan) == [("a", "node1", "node2")]
    assert plan.after.nodes[1].cpu == (0.2 + 0.3 + 0.1) / 8 != (0.1 + 0.2 + 0.3) / 8


def test_dynamic_move_shifts_measured_usage_with_clamping():
    s = DynamicScheduler()
    s.add_node("node1", NodeStats(1.0, 8, 2 * GiB, 16 * GiB))
    s.add_node("node2", NodeStats(0.0, 8, 0, 16 * GiB))
    s.add_node("node3", NodeStats(6.0, 8, 12 * GiB, 16 * GiB))  # keeps the mean up: the move pays
    # The guest reports more than its node: the source clamps at 0, the target gains it all.
    s.add_resource("vm:1", ResourceStats(3.0, 4.0, 4 * GiB, 4 * GiB), True, "node1")
    s.add_resource("vm:2", ResourceStats(0.5, 1.0, 1 * GiB, 1 * GiB), True, "node1")
    plan = plan_rebalance(
        s, columns([CompactCandidate("vm:1", ("vm:1", "vm:2"), ("node2",))]), threshold=0.0, margin=0.0
    )
    assert moves(plan) == [("vm:1", "node1", "node2")]
    assert plan.steps[0].resources == ("vm:1", "vm:2")
    assert [(n.cpu, n.mem) for n in plan.after.nodes] == [(0.0, 0.0), (3.5 / 8, 5 / 16), (0.75, 0.75)]


# -- options and the wire --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"threshold": None}, "threshold"),
        ({"margin": -1.0}, "margin"),
        ({"max_steps": -1}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"method": "greedy"}, "method"),
    ],
)
def test_invalid_options_are_refused(kwargs, field):
    s, bundles = three_vms_on_node1()
    with pytest.raises(InvalidInputError) as err:
        plan_rebalance(s, columns(bundles), **kwargs)
    assert err.value.field == field


def test_expanded_candidates_are_refused():
    s, _ = three_vms_on_node1()
    expanded = [MigrationCandidate(Migration("vm:a", "node1", "node2"), ResourceStats.static(2.0, 8 * GiB))]
    with pytest.raises(InvalidInputError) as err:
        plan_rebalance(s, columns(expanded))
    assert err.value.field == "candidates"


def test_wire_form_is_json_with_kebab_case_keys():
    s, bundles = three_vms_on_node1()
    wire = as_wire(RebalancePlan, plan_rebalance(s, columns(bundles), threshold=0.0, margin=0.0))
    assert json.loads(json.dumps(wire)) == wire
    assert wire["stop-reason"] == THRESHOLD_REACHED and wire["after"]["imbalance"] == 0.0
    assert wire["steps"][0] == {
        "sid": "vm:a",
        "source-node": "node1",
        "target-node": "node2",
        "resources": ["vm:a"],
        "expected-imbalance": wire["steps"][0]["expected-imbalance"],
        "imbalance-before": wire["before"]["imbalance"],
        "imbalance-after": wire["steps"][1]["imbalance-before"],
    }
    assert wire["before"]["nodes"][0] == {"node": "node1", "cpu-load": 0.75, "mem-load": 0.75, "load": 0.75}
