"""Usage rules of the engine: node and resource bookkeeping, the legacy add, candidate validation,
invalid values, ``limit`` and the threshold select (binding.md §2-§4, README decisions 3-5).

Error texts are upstream's, copied from the spec; expected scores come from the slow reference.
"""

from __future__ import annotations

import math
import struct

import pytest

from crs_bridge.core import (
    CompactCandidate,
    DynamicScheduler,
    InvalidInputError,
    NodeStats,
    ResourceStats,
    SchedulingError,
    StaticScheduler,
    new_scheduler,
)
from crs_bridge.core.candidates import Migration, MigrationCandidate
from crs_bridge.core.limits import MAX_BYTES, MAX_CORES
from crs_bridge.core.usage import Aggregation, Resource, Usage
from tests import columns
from tests import reference as ref

GiB = 1 << 30
SERVICE = ResourceStats.static(2.0, 4 * GiB)


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def snapshot(s) -> tuple:
    """Everything observable about a scheduler's state, to the bit."""
    views = []
    for aggregation in Aggregation:
        view = s.view(aggregation)
        views.append((view.names, [bits(x) for x in view.cpu.tolist()], view.mem.tolist()))
    # Each node's resource order decides the order of its float sums, so it is state too.
    placement = [(n, s.usage.node_stats(n), list(s.usage._nodes[n].sids)) for n in s.list_nodes()]
    return s.list_nodes(), s.usage.resources(), views, placement


def static_abc() -> StaticScheduler:
    s = StaticScheduler()
    for name in ("A", "B", "C"):
        s.add_node(name, 8, 32 * GiB)
    return s


def dynamic_abc() -> DynamicScheduler:
    s = DynamicScheduler()
    for i, name in enumerate(("A", "B", "C")):
        s.add_node(name, NodeStats.checked(1.0 + i, 8, (4 + i) * GiB, 32 * GiB))
    return s


def fails_unchanged(s, call, error: type[Exception], match: str | None = None) -> Exception:
    """Run ``call``, expect ``error`` (with exactly the text ``match`` if given) and no state change."""
    before = snapshot(s)
    with pytest.raises(error) as info:
        call()
    if match is not None:
        assert str(info.value) == match
    assert snapshot(s) == before
    return info.value


# -- nodes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [static_abc, dynamic_abc])
def test_duplicate_node_is_refused_and_keeps_the_first(make):
    s = make()
    again = (
        (lambda: s.add_node("B", 1, 1))
        if isinstance(s, StaticScheduler)
        else (lambda: s.add_node("B", NodeStats.checked(0.0, 1, 0, 1)))
    )
    fails_unchanged(s, again, SchedulingError, "node 'B' already exists")


def test_nodes_keep_insertion_order_through_removal_and_re_adding():
    s = StaticScheduler()
    for name in ("zeta", "alpha", "mid"):
        s.add_node(name, 4, GiB)
    assert s.list_nodes() == ["zeta", "alpha", "mid"]
    s.remove_node("zeta")
    s.add_node("zeta", 4, GiB)
    assert s.list_nodes() == ["alpha", "mid", "zeta"]
    assert [s.contains_node(n) for n in ("alpha", "zeta", "gone")] == [True, True, False]


def test_resources_keep_insertion_order():
    s = static_abc()
    for sid, node in [("vm:3", "A"), ("vm:1", "B"), ("vm:2", "A")]:
        s.add_service(sid, SERVICE, True, node)
    assert list(s.usage.resources()) == ["vm:3", "vm:1", "vm:2"]
    s.remove_service_usage("vm:3")
    s.add_service("vm:3", SERVICE, True, "C")
    assert list(s.usage.resources()) == ["vm:1", "vm:2", "vm:3"]


def test_removing_an_unknown_node_or_resource_is_a_no_op():
    s = static_abc()
    s.add_service("vm:1", SERVICE, True, "A")
    before = snapshot(s)
    s.remove_node("nowhere")
    s.remove_service_usage("vm:404")
    assert snapshot(s) == before


def test_remove_node_deletes_its_stationary_resources():
    s = static_abc()
    s.add_service("vm:1", SERVICE, True, "A")
    s.add_service("vm:2", SERVICE, True, "B")
    s.remove_node("A")
    assert s.usage.resource("vm:1") is None
    assert list(s.usage.resources()) == ["vm:2"]
    s.add_node("A", 8, 32 * GiB)
    s.add_service("vm:1", SERVICE, True, "A")  # the sid is free again


@pytest.mark.parametrize(("removed", "survivor"), [("A", "B"), ("B", "A")])
def test_remove_node_leaves_a_moving_resource_on_the_other_node(removed, survivor):
    s = dynamic_abc()
    stats = ResourceStats.checked(0.5, 2.0, GiB, 2 * GiB)
    s.add_resource("vm:1", stats, False, "A", "B")
    s.remove_node(removed)
    res = s.usage.resource("vm:1")
    assert (res.current, res.target, res.stats, res.running) == (survivor, None, stats, False)
    # It now loads only the survivor (starting resources count in start scoring's view).
    view = s.view(Aggregation.STARTING_AS_STARTED)
    base = {name: s.usage.node_stats(name) for name in s.list_nodes()}
    for name, cpu in zip(view.names, view.cpu.tolist()):
        assert cpu == base[name].cpu + (2.0 if name == survivor else 0.0)


# -- resources -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sid", "current", "target", "message"),
    [
        # Upstream's order: duplicate sid, stationary unknown node, same nodes, unknown nodes.
        ("vm:1", "nowhere", None, "resource 'vm:1' already exists"),
        ("vm:1", "A", "A", "resource 'vm:1' already exists"),
        ("vm:2", "nowhere", None, "current node for resource 'vm:2' does not exist"),
        ("vm:2", "nowhere", "nowhere", "resource 'vm:2' has the same current and target node"),
        ("vm:2", "A", "A", "resource 'vm:2' has the same current and target node"),
        ("vm:2", "nowhere", "A", "nodes for resource 'vm:2' do not exist"),
        ("vm:2", "A", "nowhere", "nodes for resource 'vm:2' do not exist"),
    ],
)
@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_add_resource_errors_in_upstream_order(mode, sid, current, target, message):
    s = static_abc() if mode == "static" else dynamic_abc()
    add = s.add_service if mode == "static" else s.add_resource
    add("vm:1", SERVICE, True, "B")
    fails_unchanged(s, lambda: add(sid, SERVICE, True, current, target), SchedulingError, message)


BULK_ROWS = [
    ("vm:1", "A", None, SERVICE),
    ("vm:2", "B", "C", SERVICE),  # moving: loads both nodes
    ("vm:3", "C", None, SERVICE),
]
BULK_FAILURES = [
    (("vm:1", "B", None, SERVICE), SchedulingError, "resource 'vm:1' already exists"),
    (("vm:4", "nowhere", None, SERVICE), SchedulingError, "current node for resource 'vm:4' does not exist"),
    (("vm:4", "A", "A", SERVICE), SchedulingError, "resource 'vm:4' has the same current and target node"),
    (("", "A", None, SERVICE), InvalidInputError, None),
    (("vm:4", "A", None, ResourceStats.static(1.0, MAX_BYTES)), InvalidInputError, None),  # node memory overflows
]


def _outcome(add) -> tuple | None:
    try:
        add()
    except (SchedulingError, InvalidInputError) as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("failure", [None, *BULK_FAILURES])
@pytest.mark.parametrize("make", [static_abc, dynamic_abc])
def test_add_resources_equals_adding_one_by_one(make, failure):
    """The bulk add leaves the state, and raises the first error, of adding the rows one by one."""
    rows = [*BULK_ROWS, *([failure[0]] if failure else []), ("vm:9", "A", None, SERVICE)]
    resources = [(sid, Resource(stats, True, current, target)) for sid, current, target, stats in rows]
    bulk, single = make(), make()

    def one_by_one() -> None:
        for sid, r in resources:
            single._add_resource(sid, r.stats, r.running, r.current, r.target)

    outcome = _outcome(lambda: bulk.add_resources(resources))
    assert outcome == _outcome(one_by_one)
    if failure is not None:
        assert outcome[0] is failure[1] and (failure[2] is None or outcome[1] == failure[2])
    assert snapshot(bulk) == snapshot(single)


@pytest.mark.parametrize(
    ("bad", "error"),
    [(None, None), ("B", "node 'B' already exists"), ("", None)],
)
def test_add_nodes_equals_adding_one_by_one(bad, error):
    """The snapshot's nodes in one call: the state, and the first error, of adding them one by one
    (the nodes before the failing one stay added)."""
    stats = NodeStats.checked(1.0, 8, GiB, 16 * GiB)
    rows = [("A", stats), ("B", stats), *([(bad, stats)] if bad is not None else []), ("C", stats)]
    bulk, single = Usage(), Usage()

    def one_by_one() -> None:
        for name, node in rows:
            single.add_node(name, node)

    outcome = _outcome(lambda: bulk.add_nodes(rows))
    assert outcome == _outcome(one_by_one)
    if bad is not None:
        assert outcome is not None and (error is None or outcome[1] == error)
    assert bulk.node_names() == single.node_names() == (["A", "B"] if bad is not None else ["A", "B", "C"])
    assert bulk.view(Aggregation.IDENTITY).loads().tolist() == single.view(Aggregation.IDENTITY).loads().tolist()


def test_add_resources_checks_stats():
    bad = ResourceStats(float("nan"), 1.0, 0, 0)
    s = dynamic_abc()
    fails_unchanged(s, lambda: s.add_resources([("vm:1", Resource(bad, True, "A"))]), InvalidInputError)
    s.add_resources([("vm:1", Resource(SERVICE, True, "A"))])
    assert list(s.usage.resources()) == ["vm:1"]


def test_moving_resource_counts_on_both_nodes_in_static():
    s = static_abc()
    s.add_service("vm:1", SERVICE, False, "A", "C")
    view = s.view()
    assert view.cpu.tolist() == [2.0, 0.0, 2.0]
    assert view.mem.tolist() == [4 * GiB, 0, 4 * GiB]


def test_removing_a_moving_resource_frees_both_nodes():
    s = static_abc()
    s.add_service("vm:1", SERVICE, True, "A", "C")
    s.remove_service_usage("vm:1")
    assert s.view().cpu.tolist() == [0.0, 0.0, 0.0]
    assert s.usage.resources() == {}


# -- the legacy add (Static add_service_usage_to_node) ---------------------------------------


def test_legacy_add_of_an_unknown_sid_adds_it_started_and_stationary():
    s = static_abc()
    s.add_service_usage_to_node("B", "vm:1", SERVICE)
    res = s.usage.resource("vm:1")
    assert (res.current, res.target, res.running, res.stats) == ("B", None, True, SERVICE)


def test_legacy_add_on_an_unknown_node_fails_as_upstream():
    s = static_abc()
    fails_unchanged(
        s,
        lambda: s.add_service_usage_to_node("D", "vm:1", SERVICE),
        SchedulingError,
        "current node for resource 'vm:1' does not exist",
    )


def test_legacy_add_of_a_stationary_sid_moves_it_with_its_original_stats():
    s = static_abc()
    s.add_service("vm:1", SERVICE, False, "A")
    s.add_service_usage_to_node("C", "vm:1", ResourceStats.static(7.0, GiB))  # stats ignored
    res = s.usage.resource("vm:1")
    assert (res.current, res.target, res.running, res.stats) == ("A", "C", False, SERVICE)
    assert s.view().cpu.tolist() == [2.0, 0.0, 2.0]


@pytest.mark.parametrize(
    ("node", "message"),
    [("A", "resource 'vm:1' has the same current and target node"), ("D", "nodes for resource 'vm:1' do not exist")],
)
def test_failed_legacy_re_add_changes_nothing(node, message):
    s = static_abc()
    s.add_service("vm:0", SERVICE, True, "A")
    s.add_service("vm:1", SERVICE, True, "A")
    s.add_service("vm:2", SERVICE, True, "A")
    fails_unchanged(s, lambda: s.add_service_usage_to_node(node, "vm:1", SERVICE), SchedulingError, message)


def test_legacy_re_add_over_the_targets_memory_limit_changes_nothing():
    """Found in review: the resource was taken out before the target's memory was checked."""
    s = static_abc()
    s.add_service("vm:0", SERVICE, True, "B")
    s.add_service("vm:1", SERVICE, True, "A")
    s.add_service("vm:2", ResourceStats.static(1.0, MAX_BYTES - SERVICE.maxmem + 1), True, "C")
    err = fails_unchanged(s, lambda: s.add_service_usage_to_node("C", "vm:1", SERVICE), InvalidInputError)
    assert (
        str(err)
        == f"resource 'vm:1'.stats.maxmem: memory of node 'C' with resource 'vm:1' would exceed {MAX_BYTES} bytes"
    )
    assert s.usage.resource("vm:1").current == "A"


def test_third_legacy_add_fails_and_keeps_the_resource():
    """Upstream drops the resource on this error (binding.md §2.7 quirk); crs-bridge keeps it."""
    s = static_abc()
    s.add_service_usage_to_node("A", "vm:1", SERVICE)
    s.add_service_usage_to_node("B", "vm:1", SERVICE)
    fails_unchanged(
        s,
        lambda: s.add_service_usage_to_node("C", "vm:1", SERVICE),
        SchedulingError,
        "resource 'vm:1' is already moving to target node 'B'",
    )
    res = s.usage.resource("vm:1")
    assert (res.current, res.target) == ("A", "B")
    assert s.view().cpu.tolist() == [2.0, 2.0, 0.0]


# -- compact candidates ----------------------------------------------------------------------


def bundle_cluster() -> StaticScheduler:
    """vm:1, vm:2 on A; vm:3 on B; vm:4 moving A -> C."""
    s = static_abc()
    s.add_service("vm:1", SERVICE, True, "A")
    s.add_service("vm:2", SERVICE, False, "A")
    s.add_service("vm:3", SERVICE, True, "B")
    s.add_service("vm:4", SERVICE, True, "A", "C")
    return s


def cc(leader: str, resources: tuple[str, ...], nodes: tuple[str, ...] = ("B",)) -> CompactCandidate:
    return CompactCandidate(leader, resources, nodes)


@pytest.mark.parametrize(
    ("bundles", "message"),
    [
        ([cc("vm:9", ("vm:9",))], "leader 'vm:9' is not present in the cluster usage"),
        ([cc("vm:9", ("vm:4",), ("nowhere",))], "leader 'vm:9' is not present in the cluster usage"),
        ([cc("vm:4", ("vm:4",))], "leader 'vm:4' is non-stationary"),
        ([cc("vm:4", ("vm:9",))], "leader 'vm:4' is non-stationary"),
        ([cc("vm:1", ("vm:2",))], "leader 'vm:1' is not present in the resources list"),
        ([cc("vm:1", ("vm:9", "vm:1"))], "resource 'vm:9' is not present in the cluster usage"),
        ([cc("vm:1", ("vm:1", "vm:9", "vm:3"))], "resource 'vm:9' is not present in the cluster usage"),
        ([cc("vm:1", ("vm:1", "vm:3", "vm:9"))], "resource 'vm:3' is on other node than leader"),
        ([cc("vm:1", ("vm:1", "vm:4", "vm:3"))], "resource 'vm:4' is non-stationary"),
        ([cc("vm:1", ("vm:1",)), cc("vm:3", ("vm:1",))], "leader 'vm:3' is not present in the resources list"),
        ([cc("vm:9", ("vm:9",)), cc("vm:4", ("vm:4",))], "leader 'vm:9' is not present in the cluster usage"),
    ],
)
@pytest.mark.parametrize("method", ["bruteforce", "topsis"])
def test_bundle_validation_in_upstream_order(bundles, message, method):
    s = bundle_cluster()
    score = (
        s.score_best_balancing_migration_candidates
        if method == "bruteforce"
        else s.score_best_balancing_migration_candidates_topsis
    )
    fails_unchanged(s, lambda: score(columns(bundles), 10), SchedulingError, message)
    with pytest.raises(SchedulingError) as info:
        ref.expand(ref_usage_of(s), bundles)
    assert str(info.value) == message


def ref_usage_of(s) -> ref.RefUsage:
    """A reference usage with the same nodes and resources (for checking expectations twice)."""
    usage = ref.RefUsage()
    for name in s.list_nodes():
        usage.add_node(name, s.usage.node_stats(name))
    for sid, res in s.usage.resources().items():
        usage.add_resource(sid, ref.RefResource(res.stats, res.running, res.current, res.target))
    return usage


def test_a_starting_leader_and_duplicate_members_are_accepted():
    s = bundle_cluster()
    bundles = [cc("vm:2", ("vm:1", "vm:2", "vm:1"), ("C", "B"))]
    expected = ref.bruteforce(ref_usage_of(s).view("started"), ref.expand(ref_usage_of(s), bundles), 5)
    scored = s.score_best_balancing_migration_candidates(columns(bundles), 5)
    assert [(m.migration, bits(m.imbalance)) for m in scored] == [(m, bits(v)) for m, v in expected]


@pytest.mark.parametrize(
    ("bundles", "field", "problem"),
    [
        ([cc("vm:1", ("vm:1",), ("B", "nowhere"))], "candidates[0].nodes[1]", "target node 'nowhere' does not exist"),
        ([cc("vm:1", ("vm:1",), ("A",))], "candidates[0].nodes[0]", "target node 'A' is the source node"),
        ([cc("vm:3", ("vm:3",), ("A",)), cc("vm:1", ("vm:1",), ("C", "A"))], "candidates[1].nodes[1]", None),
        # Any bundle's own error comes before every target's: tests/test_engine_ties.py.
    ],
)
def test_unknown_or_source_targets_are_invalid_input(bundles, field, problem):
    s = bundle_cluster()
    err = fails_unchanged(
        s, lambda: s.score_best_balancing_migration_candidates(columns(bundles), 3), InvalidInputError
    )
    assert err.field == field
    if problem is not None:
        assert err.problem == problem
    with pytest.raises(InvalidInputError) as info:
        ref.expand(ref_usage_of(s), bundles)
    assert info.value.field == field


def test_bundle_error_before_its_bad_target():
    s = bundle_cluster()
    bundles = [cc("vm:1", ("vm:1", "vm:3"), ("nowhere",))]
    fails_unchanged(
        s,
        lambda: s.score_best_balancing_migration_candidates(columns(bundles), 3),
        SchedulingError,
        "resource 'vm:3' is on other node than leader",
    )


@pytest.mark.parametrize(
    ("migration", "field"),
    [
        (Migration("vm:1", "nowhere", "B"), "candidates[1].source-node"),
        (Migration("vm:1", "A", "nowhere"), "candidates[1].target-node"),
        (Migration("vm:1", "A", "A"), "candidates[1].target-node"),
    ],
)
def test_expanded_candidates_with_bad_nodes_are_invalid_input(migration, field):
    s = dynamic_abc()
    good = MigrationCandidate(Migration("vm:1", "A", "B"), ResourceStats.checked(1.0, 1.0, GiB, GiB))
    bad = MigrationCandidate(migration, good.stats)
    err = fails_unchanged(
        s, lambda: s.score_best_balancing_migration_candidates(columns([good, bad]), 3), InvalidInputError
    )
    assert err.field == field


# -- invalid values (README decision 4) ------------------------------------------------------

BAD_CORES = [-1.0, math.nan, math.inf, -math.inf, MAX_CORES * 2, "2", True, None]
BAD_BYTES = [-1, 1.5, math.nan, math.inf, MAX_BYTES + 1, "2", True, None]


@pytest.mark.parametrize("value", [0, *BAD_CORES])
def test_static_node_maxcpu_must_be_a_positive_count(value):
    s = static_abc()
    err = fails_unchanged(s, lambda: s.add_node("D", value, GiB), InvalidInputError)
    assert err.field == "node.maxcpu"


@pytest.mark.parametrize("value", [0, *BAD_BYTES])
def test_static_node_maxmem_must_be_a_positive_count(value):
    s = static_abc()
    err = fails_unchanged(s, lambda: s.add_node("D", 4, value), InvalidInputError)
    assert err.field == "node.maxmem"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ((0.0, 0, 0, GiB), "node.maxcpu"),
        ((0.0, 4, 0, 0), "node.maxmem"),
        *[((v, 4, 0, GiB), "node.cpu") for v in BAD_CORES],
        *[((0.0, 4, v, GiB), "node.mem") for v in BAD_BYTES],
    ],
)
def test_node_stats_are_checked(fields, field):
    with pytest.raises(InvalidInputError) as info:
        NodeStats.checked(*fields)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        *[((v, 1.0, 0, 0), "stats.cpu") for v in BAD_CORES],
        *[((0.0, v, 0, 0), "stats.maxcpu") for v in BAD_CORES],
        *[((0.0, 1.0, v, 0), "stats.mem") for v in BAD_BYTES],
        *[((0.0, 1.0, 0, v), "stats.maxmem") for v in BAD_BYTES],
    ],
)
def test_resource_stats_are_checked(fields, field):
    with pytest.raises(InvalidInputError) as info:
        ResourceStats.checked(*fields)
    assert info.value.field == field


@pytest.mark.parametrize("value", BAD_CORES)
def test_static_service_stats_are_checked(value):
    with pytest.raises(InvalidInputError) as info:
        ResourceStats.static(value, GiB)
    assert info.value.field == "stats.maxcpu"


def test_zero_maxcpu_and_zero_memory_are_valid_resource_stats():
    assert ResourceStats.static(0.0, 0) == ResourceStats(0.0, 0.0, 0, 0)


@pytest.mark.parametrize(
    "stats",
    [NodeStats(0.0, 0, 0, GiB), NodeStats(0.0, 4, 0, 0), NodeStats(-1.0, 4, 0, GiB), NodeStats(math.nan, 4, 0, GiB)],
)
def test_dynamic_add_node_refuses_unchecked_stats(stats):
    s = dynamic_abc()
    err = fails_unchanged(s, lambda: s.add_node("D", stats), InvalidInputError)
    assert err.field.endswith(("maxcpu", "maxmem", "cpu"))


@pytest.mark.parametrize(
    "stats", [ResourceStats(-1.0, 1.0, 0, 0), ResourceStats(0.0, math.inf, 0, 0), ResourceStats(0.0, 1.0, -5, 0)]
)
def test_resources_with_unchecked_stats_are_refused(stats):
    static, dynamic = static_abc(), dynamic_abc()
    fails_unchanged(static, lambda: static.add_service("vm:1", stats, True, "A"), InvalidInputError)
    fails_unchanged(static, lambda: static.add_service_usage_to_node("A", "vm:1", stats), InvalidInputError)
    fails_unchanged(dynamic, lambda: dynamic.add_resource("vm:1", stats, True, "A"), InvalidInputError)
    fails_unchanged(static, lambda: static.score_nodes_to_start_service(stats), InvalidInputError)
    fails_unchanged(dynamic, lambda: dynamic.score_nodes_to_start_resource(stats), InvalidInputError)
    candidate = MigrationCandidate(Migration("vm:1", "A", "B"), stats)
    fails_unchanged(
        dynamic, lambda: dynamic.score_best_balancing_migration_candidates(columns([candidate]), 1), InvalidInputError
    )


@pytest.mark.parametrize(("mode", "formula"), [("static", "cv"), ("fast", "normalized")])
def test_unknown_mode_or_formula(mode, formula):
    with pytest.raises(InvalidInputError) as info:
        new_scheduler(mode, formula)
    assert info.value.field == ("mode" if mode == "fast" else "imbalance")


# -- limit -----------------------------------------------------------------------------------


def scored_cluster() -> tuple[DynamicScheduler, list[CompactCandidate], list]:
    """Six candidates and the reference's full bruteforce ranking of them."""
    s = DynamicScheduler()
    for i, name in enumerate(("A", "B", "C", "D")):
        s.add_node(name, NodeStats.checked(1.5 * i + 0.25, 8, (3 * i + 1) * GiB, 32 * GiB))
    s.add_resource("vm:1", ResourceStats.checked(1.0, 2.0, 2 * GiB, 4 * GiB), True, "D")
    s.add_resource("vm:2", ResourceStats.checked(0.5, 1.0, 6 * GiB, 8 * GiB), True, "C")
    bundles = [cc("vm:2", ("vm:2",), ("D", "A", "B")), cc("vm:1", ("vm:1",), ("C", "B", "A"))]
    usage = ref_usage_of(s)
    ranking = ref.bruteforce(usage.view("identity"), ref.expand(usage, bundles), 100)
    return s, bundles, ranking


@pytest.mark.parametrize("limit", [0, 1, 3, 6, 7, 2**60, 2**64, 10**30])
def test_limit_cuts_the_ranking(limit):
    s, bundles, ranking = scored_cluster()
    scored = s.score_best_balancing_migration_candidates(columns(bundles), limit)
    assert [(m.migration, m.imbalance) for m in scored] == ranking[:limit]
    assert len(s.score_best_balancing_migration_candidates_topsis(columns(bundles), limit)) == min(limit, 6)


@pytest.mark.parametrize("limit", [-1, 1.5, math.nan, math.inf, "3", None, True])
def test_limit_must_be_a_non_negative_integer(limit):
    s, bundles, _ = scored_cluster()
    for score in (s.score_best_balancing_migration_candidates, s.score_best_balancing_migration_candidates_topsis):
        err = fails_unchanged(s, lambda score=score: score(columns(bundles), limit), InvalidInputError)
        assert err.field == "limit"


def test_no_candidates_give_an_empty_list():
    s, _, _ = scored_cluster()
    assert s.score_best_balancing_migration_candidates(columns([]), 5) == []
    assert s.score_best_balancing_migration_candidates_topsis(columns([]), 5) == []
    assert s.select_best_balancing_migration(columns([])) is None
    assert s.select_best_balancing_migration(columns([]), 0.5) is None
    assert s.select_best_balancing_migration_topsis(columns([])) is None


# -- select_best_balancing_migration (README decision 5) -------------------------------------


def input_order_values() -> tuple[DynamicScheduler, list[CompactCandidate], list]:
    s, bundles, _ = scored_cluster()
    usage = ref_usage_of(s)
    view = usage.view("identity")
    return s, bundles, [(c[0], ref.migration_imbalance(view, c)) for c in ref.expand(usage, bundles)]


def test_select_without_threshold_is_the_best():
    s, bundles, ranking = scored_cluster()
    chosen = s.select_best_balancing_migration(columns(bundles))
    assert (chosen.migration, chosen.imbalance) == ranking[0]


def test_select_returns_the_first_candidate_in_input_order_at_or_under_the_threshold():
    s, bundles, values = input_order_values()
    best = min(values, key=ref.order_key)
    for position, (migration, value) in enumerate(values):
        earlier = [v for _, v in values[:position]]
        if all(v > value for v in earlier):
            chosen = s.select_best_balancing_migration(columns(bundles), value)  # exactly equal counts
            assert (chosen.migration, chosen.imbalance) == (migration, value)
    above_all = max(v for _, v in values)
    assert s.select_best_balancing_migration(columns(bundles), above_all).migration == values[0][0]
    assert values[0] != best  # the cluster is built so that "first" and "best" differ


def test_select_falls_back_to_the_best_when_none_is_at_or_under_the_threshold():
    s, bundles, values = input_order_values()
    lowest = min(v for _, v in values)
    chosen = s.select_best_balancing_migration(columns(bundles), math.nextafter(lowest, 0.0))
    assert (chosen.migration, chosen.imbalance) == min(values, key=ref.order_key)


def test_select_topsis_is_the_topsis_best():
    s, bundles, _ = scored_cluster()
    usage = ref_usage_of(s)
    expected = ref.topsis(usage.view("identity"), ref.expand(usage, bundles), 1)
    chosen = s.select_best_balancing_migration_topsis(columns(bundles))
    assert [(chosen.migration, chosen.imbalance)] == expected


@pytest.mark.parametrize("threshold", [-0.1, math.nan, math.inf, "0.3", True])
def test_select_threshold_must_be_a_finite_non_negative_number(threshold):
    s, bundles, _ = scored_cluster()
    err = fails_unchanged(s, lambda: s.select_best_balancing_migration(columns(bundles), threshold), InvalidInputError)
    assert err.field == "imbalance_threshold"


def test_select_threshold_applies_to_bruteforce_only():
    s, bundles, _ = scored_cluster()
    err = fails_unchanged(
        s, lambda: s.select_best_balancing_migration(columns(bundles), 0.3, "topsis"), InvalidInputError
    )
    assert err.field == "imbalance_threshold"
