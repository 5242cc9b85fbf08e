"""Explanations (core/explain.py): they agree with the scorers, show the numbers of the reference
figures, and give each "why nothing moves" reason in a case built for it.

Independent expectations come from the spec's published figures (reference-figures.md §8.1),
from hand arithmetic, and from the slow reference model (tests/reference.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_bridge.bridge.results import Explanation
from crs_bridge.bridge.wire import as_wire
from crs_bridge.core import CompactCandidate, InvalidInputError
from crs_bridge.core.explain import explain_migrations
from crs_bridge.core.imbalance import truncate
from crs_bridge.core.modes import DynamicScheduler, StaticScheduler
from crs_bridge.core.stats import NodeStats, ResourceStats
from crs_bridge.core.verdicts import MARGIN_NOT_REACHED, MIGRATE, NO_CANDIDATES, NO_IMPROVEMENT, THRESHOLD_REACHED
from tests import columns
from tests import reference as ref

GiB, MiB = 1024**3, 1024**2

# -- random clusters, shared with test_planner.py --------------------------------------------


@dataclass
class Cluster:
    """A cluster description from which identical schedulers (and reference usages) are built.

    ``nodes``: (name, NodeStats); ``resources``: (sid, ResourceStats, running, current, target);
    ``bundles``: compact candidates over the stationary resources.
    """

    mode: str
    formula: str
    nodes: list
    resources: list
    bundles: list = field(default_factory=list)

    def scheduler(self):
        if self.mode == "static":
            s = StaticScheduler(self.formula)
            for name, stats in self.nodes:
                s.add_node(name, stats.maxcpu, stats.maxmem)
            for sid, stats, running, current, target in self.resources:
                s.add_service(sid, stats, running, current, target)
        else:
            s = DynamicScheduler(self.formula)
            for name, stats in self.nodes:
                s.add_node(name, stats)
            for sid, stats, running, current, target in self.resources:
                s.add_resource(sid, stats, running, current, target)
        return s

    def reference(self) -> ref.RefUsage:
        usage = ref.RefUsage()
        for name, stats in self.nodes:
            usage.add_node(name, stats)
        for sid, stats, running, current, target in self.resources:
            usage.add_resource(sid, ref.RefResource(stats, running, current, target))
        return usage

    def reference_view(self) -> ref.View:
        return self.reference().view("started" if self.mode == "static" else "identity")


@st.composite
def clusters(draw, max_nodes: int = 5, max_resources: int = 8) -> Cluster:
    """Small clusters with coarse numbers (so ties occur), maxcpu-0 and moving resources, and
    bundles of one or two stationary resources with random allowed targets."""
    mode = draw(st.sampled_from(["static", "dynamic"]))
    names = [f"node{i}" for i in range(1, draw(st.integers(2, max_nodes)) + 1)]
    nodes = []
    for name in names:
        maxcpu, maxmem = draw(st.sampled_from([4, 8, 16])), draw(st.sampled_from([16, 32, 64])) * GiB
        cpu = draw(st.integers(0, maxcpu * 10)) / 10 if mode == "dynamic" else 0.0
        mem = draw(st.integers(0, maxmem // GiB)) * GiB if mode == "dynamic" else 0
        nodes.append((name, NodeStats(cpu, maxcpu, mem, maxmem)))
    resources = []
    for i in range(draw(st.integers(1, max_resources))):
        maxcpu = draw(st.sampled_from([0.0, 0.1, 0.3, 1.0, 2.0, 4.0]))  # tenths: sums that round
        maxmem = draw(st.sampled_from([1, 2, 4, 8])) * GiB
        if mode == "static":
            stats = ResourceStats.static(maxcpu, maxmem)
        else:
            stats = ResourceStats(draw(st.integers(0, 40)) / 10, maxcpu, draw(st.integers(0, 8)) * GiB, maxmem)
        current = draw(st.sampled_from(names))
        target = draw(st.sampled_from([None] * 8 + [n for n in names if n != current]))
        resources.append((f"vm:{100 + i}", stats, draw(st.booleans()), current, target))
    cluster = Cluster(mode, draw(st.sampled_from(["normalized", "raw"])), nodes, resources)
    cluster.bundles = draw(bundles(cluster))
    return cluster


@st.composite
def bundles(draw, cluster: Cluster) -> list[CompactCandidate]:
    names = [name for name, _ in cluster.nodes]
    out, single_at = [], {}  # single_at: node -> index in out of a one-member bundle there
    for sid, _, _, current, target in cluster.resources:
        if target is not None:
            continue
        if current in single_at and draw(st.booleans()):
            i = single_at.pop(current)
            out[i] = CompactCandidate(out[i].leader, (out[i].leader, sid), out[i].nodes)
        else:
            others = [n for n in names if n != current]
            targets = draw(st.lists(st.sampled_from(others), min_size=draw(st.sampled_from([0, 1, 1, 1])), unique=True))
            single_at[current] = len(out)
            out.append(CompactCandidate(sid, (sid,), tuple(targets)))
    return out


# -- the reference figures -------------------------------------------------------------------

# reference-figures.md §8.1, node stats (cpu cores, maxcpu, mem, maxmem) and the candidate.
HOMOGENEOUS = [(1.7, 16, 12334 * MiB, 64 * GiB), (15.184, 16, 529 * MiB, 64 * GiB), (5.2, 16, 9381 * MiB, 64 * GiB)]
HETEROGENEOUS = [(1.7, 16, 12334 * MiB, 128 * GiB), (15.184, 32, 529 * MiB, 96 * GiB), (5.2, 24, 9381 * MiB, 64 * GiB)]
VM101 = ResourceStats(0.7, 4.0, 8 * GiB, 16 * GiB)
VM101_CANDIDATES = [CompactCandidate("vm:101", ("vm:101",), ("node2", "node3"))]


def figure_cluster(nodes, formula: str = "normalized") -> DynamicScheduler:
    s = DynamicScheduler(formula)
    for i, stats in enumerate(nodes, 1):
        s.add_node(f"node{i}", NodeStats(*stats))
    s.add_resource("vm:101", VM101, True, "node1")
    return s


@pytest.mark.parametrize(
    "nodes, current, to_node2, to_node3",
    [
        (HOMOGENEOUS, 0.3460548572604576, 0.511933196160907, 0.422346017431863),
        (HETEROGENEOUS, 0.23352917788066363, 0.409710187680757, 0.371253581868279),
    ],
)
def test_bruteforce_explanation_shows_the_published_figures(nodes, current, to_node2, to_node3):
    e = explain_migrations(figure_cluster(nodes), columns(VM101_CANDIDATES), "bruteforce")
    assert e.current.imbalance == current
    assert [(d.migration.target_node, d.imbalance) for d in e.chosen] == [("node3", to_node3)]
    assert (e.runner_up.migration.target_node, e.runner_up.imbalance) == ("node2", to_node2)
    # Both moves leave more imbalance than now (the figures' point), so nothing should move.
    assert e.best_imbalance == to_node3 and e.reason == NO_IMPROVEMENT
    # node1 keeps 1.7 - 0.7 = 1 core and 12334 MiB - 8 GiB of memory.
    source = e.chosen[0].source
    assert (source.before.name, source.after.cpu) == ("node1", 1.0 / 16)
    assert source.after.mem == (12334 * MiB - 8 * GiB) / nodes[0][3]
    assert e.chosen[0].target.after.cpu == (5.2 + 0.7) / nodes[2][1]


@pytest.mark.parametrize(
    "nodes, scores",
    [
        (HOMOGENEOUS, (0.9585666934295297, 0.041433306570470306)),
        (HETEROGENEOUS, (0.9729602954463386, 0.027039704553661364)),
    ],
)
def test_topsis_explanation_shows_the_published_scores(nodes, scores):
    e = explain_migrations(figure_cluster(nodes), columns(VM101_CANDIDATES), "topsis")
    assert e.chosen[0].migration.target_node == "node2" and e.runner_up.migration.target_node == "node3"
    assert (e.chosen[0].topsis.score, e.runner_up.topsis.score) == scores
    assert e.topsis.weights == (0.05555555555555555, 0.1111111111111111, 0.2777777777777778, 0.5555555555555556)
    # Two alternatives: each is the ideal where it is the smaller one, so the distances mirror.
    assert e.chosen[0].topsis.to_best == e.runner_up.topsis.to_worst
    assert e.chosen[0].topsis.to_worst == e.runner_up.topsis.to_best
    # TOPSIS picks node2, yet node3 would leave the lower imbalance.
    assert e.best_imbalance == e.runner_up.imbalance < e.chosen[0].imbalance


# -- agreement with the scorers (property) ---------------------------------------------------


def scorer(scheduler, method):
    if method == "topsis":
        return scheduler.score_best_balancing_migration_candidates_topsis
    return scheduler.score_best_balancing_migration_candidates


@given(clusters(), st.sampled_from(["bruteforce", "topsis"]), st.integers(1, 3))
def test_explanation_agrees_with_the_scorer(cluster, method, limit):
    s = cluster.scheduler()
    e = explain_migrations(s, columns(cluster.bundles), method, limit)
    scored = scorer(s, method)(columns(cluster.bundles), limit + 1)
    shown = [*e.chosen, *([e.runner_up] if e.runner_up else [])]
    assert [(d.migration, d.imbalance) for d in shown] == [(m.migration, m.imbalance) for m in scored]
    assert len(e.chosen) == min(limit, len(scored))
    assert e.current.imbalance == s.calculate_node_imbalance()

    view = cluster.reference_view()
    candidates = ref.expand(cluster.reference(), cluster.bundles)
    assert e.candidate_count == len(candidates)
    values = [ref.migration_imbalance(view, c, cluster.formula) for c in candidates]
    assert e.best_imbalance == (min(values) if values else None)
    for d in shown:
        migration, stats = candidates[d.index]
        assert migration == d.migration
        after = dict(ref.what_if(view, migration, stats))
        for change in (d.source, d.target):
            node = after[change.after.name]
            assert (change.after.cpu, change.after.mem) == (ref.cpu_load(node), ref.mem_load(node))
        # The whole cluster after the move, from the explanation's own numbers.
        loads = {n.name: n.load for n in e.current.nodes} | {d.source.after.name: d.source.after.load}
        loads[d.target.after.name] = d.target.after.load
        assert truncate(ref.imbalance_of_loads(list(loads.values()), cluster.formula)) == d.imbalance


@given(clusters(), st.integers(1, 2))
def test_topsis_numbers_agree_with_the_reference(cluster, limit):
    e = explain_migrations(cluster.scheduler(), columns(cluster.bundles), "topsis", limit)
    view, candidates = cluster.reference_view(), ref.expand(cluster.reference(), cluster.bundles)
    scores = ref.topsis_candidate_scores(view, candidates)
    criteria = ref.alternatives([ref.what_if(view, *c) for c in candidates])  # ties among all rows
    for d in [*e.chosen, *([e.runner_up] if e.runner_up else [])]:
        assert list(d.topsis.criteria) == criteria[d.index]
        assert d.topsis.score == scores[d.index]
        # The distances follow from the normalised row and the ideals shown (rounding aside).
        for ideal, distance in ((e.topsis.best, d.topsis.to_best), (e.topsis.worst, d.topsis.to_worst)):
            terms = [(w * (x - i)) ** 2 for w, x, i in zip(e.topsis.weights, d.topsis.normalised, ideal)]
            assert math.isclose(math.sqrt(math.fsum(terms)), distance, rel_tol=1e-12, abs_tol=1e-15)
    if candidates:
        assert max(scores) == e.chosen[0].topsis.score


@pytest.mark.parametrize("method", ["bruteforce", "topsis"])
def test_same_migration_from_two_bundles_is_told_apart(method):
    """vm:1 leads two bundles (alone, and with vm:2): two candidates with the same migration but
    different stats; each detail must show its own row's numbers."""
    s = two_nodes(TINY_VM)
    s.add_resource("vm:2", ResourceStats(2.0, 2.0, 8 * GiB, 8 * GiB), True, "node1")
    bundles = [CompactCandidate("vm:1", ("vm:1",), ("node2",)), CompactCandidate("vm:1", ("vm:1", "vm:2"), ("node2",))]
    e = explain_migrations(s, columns(bundles), method)
    shown = [e.chosen[0], e.runner_up]
    assert sorted(d.index for d in shown) == [0, 1]
    moved_cpu = {0: 0.1, 1: 2.1}  # cores leaving node1 per row
    for d in shown:
        assert d.source.after.cpu == (8.0 - moved_cpu[d.index]) / 16
        loads = [d.source.after.load, d.target.after.load]
        assert truncate(ref.imbalance_of_loads(loads)) == d.imbalance


def two_bundles_of_vm1() -> Cluster:
    """vm:1 leads two bundles to node b, with vm:4 (memory) and with vm:3 (cpu): the same migration
    and the same truncated imbalance, but different what-ifs; a third bundle moves vm:2 to c.
    TOPSIS ranks the second bundle (row 1) first and the first (row 0) last."""
    nodes = [("a", (6.0, 8, 8 * GiB)), ("b", (1.0, 8, 8 * GiB)), ("c", (1.0, 8, 20 * GiB))]
    vms = [("vm:1", (0.0, 1, 0, 1 * GiB)), ("vm:3", (2.0, 4, 0, 8 * GiB)), ("vm:4", (0.0, 4, 8 * GiB, 8 * GiB))]
    vms.append(("vm:2", (1.0, 4, 0, 8 * GiB)))
    return Cluster(
        "dynamic",
        "normalized",
        [(name, NodeStats(cpu, maxcpu, mem, 32 * GiB)) for name, (cpu, maxcpu, mem) in nodes],
        [(sid, ResourceStats(*stats), True, "a", None) for sid, stats in vms],
        [
            CompactCandidate("vm:1", ("vm:1", "vm:4"), ("b",)),
            CompactCandidate("vm:1", ("vm:1", "vm:3"), ("b",)),
            CompactCandidate("vm:2", ("vm:2",), ("c",)),
        ],
    )


@pytest.mark.parametrize("method", ["bruteforce", "topsis"])
def test_each_detail_is_the_row_the_scorer_ranked(method):
    """With two rows for one migration at the same imbalance, the details are the rows in the
    scorer's own order (the reference's): TOPSIS scores descend; bruteforce breaks the tie by
    (sid, source, target), where the equal rows keep expansion order."""
    cluster = two_bundles_of_vm1()
    e = explain_migrations(cluster.scheduler(), columns(cluster.bundles), method, limit=2)
    shown = [*e.chosen, e.runner_up]
    view, candidates = cluster.reference_view(), ref.expand(cluster.reference(), cluster.bundles)
    values = [ref.migration_imbalance(view, c, cluster.formula) for c in candidates]
    assert values[0] == values[1]  # the two vm:1 rows tie
    if method == "topsis":
        scores = ref.topsis_candidate_scores(view, candidates)
        order = ref.topsis_rank(scores)
        assert order == [1, 2, 0]
        assert [d.topsis.score for d in shown] == [scores[i] for i in order]
    else:
        order = [0, 1, 2]
    assert [d.index for d in shown] == order
    assert [(d.migration, d.imbalance) for d in shown] == [(candidates[i][0], truncate(values[i])) for i in order]
    for d in shown:
        after = dict(ref.what_if(view, *candidates[d.index]))
        node = after[d.source.after.name]
        assert (d.source.after.cpu, d.source.after.mem) == (ref.cpu_load(node), ref.mem_load(node))


# -- why nothing moves -----------------------------------------------------------------------


def two_nodes(small_vm: ResourceStats) -> DynamicScheduler:
    """node1 at load 0.5, node2 at 0.375 (16 cores, 64 GiB each); ``small_vm`` on node1."""
    s = DynamicScheduler()
    s.add_node("node1", NodeStats(8.0, 16, 32 * GiB, 64 * GiB))
    s.add_node("node2", NodeStats(6.0, 16, 24 * GiB, 64 * GiB))
    s.add_resource("vm:1", small_vm, True, "node1")
    return s


MOVE_VM1 = [CompactCandidate("vm:1", ("vm:1",), ("node2",))]
#: 0.1 cores and 256 MiB: loads become 0.494921875 / 0.380078125, so the imbalance (two
#: nodes: sd / mean) drops from 0.0625 / 0.4375 to 0.057421875 / 0.4375, i.e. by 8.125 %.
TINY_VM = ResourceStats(0.1, 1.0, 256 * MiB, 1 * GiB)


def test_margin_not_reached_when_the_gain_is_below_the_margin():
    e = explain_migrations(two_nodes(TINY_VM), columns(MOVE_VM1), margin=0.1)
    assert e.reason == MARGIN_NOT_REACHED and not e.would_migrate
    assert math.isclose(e.relative, 0.08125, rel_tol=1e-9)
    assert "margin" in e.message and "vm:1" in e.message
    assert explain_migrations(two_nodes(TINY_VM), columns(MOVE_VM1), margin=0.08).reason == MIGRATE


def test_migrate_without_margin_and_threshold():
    e = explain_migrations(two_nodes(TINY_VM), columns(MOVE_VM1))
    assert e.would_migrate and e.chosen[0].migration.target_node == "node2"
    assert e.message.startswith("Migrate vm:1 from node1 to node2")
    assert e.runner_up is None


def test_threshold_reached_when_already_balanced_enough():
    # Current imbalance 0.0625 / 0.4375 = 0.142857...
    e = explain_migrations(two_nodes(TINY_VM), columns(MOVE_VM1), threshold=0.15, margin=0.0)
    assert e.reason == THRESHOLD_REACHED and "threshold" in e.message
    assert explain_migrations(two_nodes(TINY_VM), columns(MOVE_VM1), threshold=0.14).reason == MIGRATE


def test_no_improvement_when_every_move_worsens():
    s = DynamicScheduler()
    for name in ("node1", "node2"):
        s.add_node(name, NodeStats(4.0, 16, 16 * GiB, 64 * GiB))
    s.add_resource("vm:1", ResourceStats(2.0, 2.0, 2 * GiB, 2 * GiB), True, "node1")
    e = explain_migrations(s, columns(MOVE_VM1), margin=0.0)
    assert (e.current.imbalance, e.reason) == (0.0, NO_IMPROVEMENT)
    assert e.relative is None and e.best_imbalance > 0.0


@pytest.mark.parametrize("candidates", [[], [CompactCandidate("vm:1", ("vm:1",), ())]])
def test_no_candidates(candidates):
    e = explain_migrations(two_nodes(TINY_VM), columns(candidates), "topsis", margin=0.1)
    assert (e.reason, e.chosen, e.runner_up, e.candidate_count) == (NO_CANDIDATES, (), None, 0)
    assert e.best_imbalance is None and e.topsis is None and e.message


# -- options and the wire --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"limit": 0}, "limit"),
        ({"margin": -0.1}, "margin"),
        ({"threshold": math.nan}, "threshold"),
        ({"method": "x"}, "method"),
    ],
)
def test_invalid_options_are_refused(kwargs, field):
    with pytest.raises(InvalidInputError) as err:
        explain_migrations(two_nodes(TINY_VM), columns(MOVE_VM1), **kwargs)
    assert err.value.field == field


def test_wire_form_is_json_with_kebab_case_keys():
    explained = explain_migrations(figure_cluster(HOMOGENEOUS), columns(VM101_CANDIDATES), "topsis", threshold=0.3)
    wire = as_wire(Explanation, explained)
    assert json.loads(json.dumps(wire)) == wire
    assert wire["chosen"][0]["migration"] == {"sid": "vm:101", "source-node": "node1", "target-node": "node2"}
    assert {"runner-up", "best-imbalance", "relative-improvement", "reason", "message"} <= wire.keys()
    assert wire["topsis"]["ideal-best"] == [
        min(a, b) for a, b in zip(*[d["topsis"]["normalised"] for d in (wire["chosen"][0], wire["runner-up"])])
    ]
    assert wire["chosen"][0]["source"]["after"]["cpu-load"] == 1.0 / 16
