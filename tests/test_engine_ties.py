"""Exact ties: TOPSIS scores equal in exact arithmetic rank as equal (input order), also for start
scores; and upstream's candidate errors win over crs-bridge's own refusals.

On a cluster of identical (or mirrored) nodes, moving a guest to either of two symmetric nodes
gives the same multiset of node loads; only the order of the left-to-right sums differs, so the
floats differ by an ulp, and TOPSIS, which normalises by the spread of the rows, turns that ulp
into any score at all. The tests show that the raw sums do differ, and what the engine did
without ties (so they could fail).
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from crs_bridge import core
from crs_bridge.core import (
    CompactCandidate,
    DynamicScheduler,
    NodeStats,
    ResourceStats,
    SchedulingError,
    StaticScheduler,
)
from crs_bridge.core.errors import InvalidInputError
from crs_bridge.core.scheduler import topsis_criteria
from crs_bridge.core.topsis import sum_tolerance, tied_sums, topsis_scores
from crs_bridge.core.whatif import exact_square_sums, what_if
from tests import reference as ref

GiB = 1 << 30


#: The two guests of each identical node, and the extra one on node3 (vm:999): (maxcpu, maxmem).
#: Without ties, rounding noise sends vm:999 to node10 instead of node1 (found by a search).
GUESTS = ((4.0, int(1.3 * GiB)), (0.5, GiB))
EXTRA = (2.0, int(1.1 * GiB))


def identical_static(count: int, extra: bool = True) -> StaticScheduler:
    """``count`` identical nodes node1..nodeN (16 cores, 64 GiB), each with the two GUESTS
    (vm:N01 and vm:N02), and (with ``extra``) vm:999 (EXTRA) on node3."""
    s = StaticScheduler()
    for i in range(1, count + 1):
        s.add_node(f"node{i}", 16, 64 * GiB)
    for i in range(1, count + 1):
        for k, (maxcpu, maxmem) in enumerate(GUESTS, 1):
            s.add_service(f"vm:{i}0{k}", ResourceStats.static(maxcpu, maxmem), True, f"node{i}")
    if extra:
        s.add_service("vm:999", ResourceStats.static(*EXTRA), True, "node3")
    return s


def ha_targets(source: str, count: int) -> tuple[str, ...]:
    """All nodes but ``source``, sorted by name as the HA manager sorts them (node10 < node2)."""
    return tuple(sorted(f"node{i}" for i in range(1, count + 1) if f"node{i}" != source))


def raw_sums_differ(s, bundles) -> bool:
    """Whether the what-ifs' left-to-right cpu or memory square sums differ at all (before ties)."""
    batch = s.candidate_batch(bundles)
    w = what_if(batch)
    view, a, b = batch.view, batch.src, batch.tgt
    cpu = exact_square_sums(view.cpu_loads(), a, w.cpu_src, b, w.cpu_tgt)
    mem = exact_square_sums(view.mem_loads(), a, w.mem_src, b, w.mem_tgt)
    return len(set(cpu.tolist())) > 1 or len(set(mem.tolist())) > 1


def without_ties(monkeypatch):
    """The engine as it was: sums used as they come (no ties)."""
    monkeypatch.setattr(core.topsis, "tied_sums", lambda sums, n: np.asarray(sums, dtype=np.float64))


def test_without_ties_rounding_noise_picks_another_node(monkeypatch):
    """Without the tie rule, the fixed summation order breaks the tie the same wrong way every time."""
    s = identical_static(16)
    bundles = [CompactCandidate("vm:999", ("vm:999",), ha_targets("node3", 16))]
    without_ties(monkeypatch)
    best = s.score_best_balancing_migration_candidates_topsis(bundles, 1)
    assert best[0].migration.target_node == "node10"


@pytest.mark.parametrize("order", ["ha", "reversed"])
def test_sixteen_identical_nodes_topsis_takes_the_first_target(order):
    s = identical_static(16)
    targets = ha_targets("node3", 16)
    if order == "reversed":
        targets = targets[::-1]
    bundles = [CompactCandidate("vm:999", ("vm:999",), targets)]
    assert raw_sums_differ(s, bundles), "no rounding noise to break: the test would prove nothing"
    best = s.score_best_balancing_migration_candidates_topsis(bundles, 1)
    assert [m.migration.target_node for m in best] == [targets[0]]
    # The whole ranking is input order, as every score is the same.
    ranked = s.score_best_balancing_migration_candidates_topsis(bundles, len(targets))
    assert [m.migration.target_node for m in ranked] == list(targets)
    scores = topsis_scores(topsis_criteria(what_if(s.candidate_batch(bundles))))
    assert len(set(scores.tolist())) == 1


def test_identical_targets_tie_among_different_ones():
    """Two bundles; within each, the identical targets tie and keep input order, and the better
    bundle still comes first (ties do not flatten real differences)."""
    s = identical_static(6)
    s.add_node("big", 64, 256 * GiB)
    s.add_service("vm:700", ResourceStats.static(5.0, 9 * GiB), True, "big")
    targets = ("node4", "node2", "node1", "big", "node5")
    bundles = [
        CompactCandidate("vm:999", ("vm:999",), targets),
        CompactCandidate("vm:602", ("vm:602",), ("node1", "node2", "big")),
    ]
    ranked = [
        (m.migration.sid, m.migration.target_node)
        for m in s.score_best_balancing_migration_candidates_topsis(bundles, 100)
    ]
    expected = ref_ranking(s, bundles)
    assert ranked == expected
    # Among equal targets of one bundle: input order.
    small = [t for sid, t in ranked if sid == "vm:999" and t != "big"]
    assert small == ["node4", "node2", "node1", "node5"]
    scores = topsis_scores(topsis_criteria(what_if(s.candidate_batch(bundles))))
    assert len(set(scores.tolist())) >= 3  # big, the small nodes, the other bundle's


def ref_ranking(s: StaticScheduler, bundles) -> list[tuple[str, str]]:
    """The slow reference's TOPSIS ranking of the same cluster and bundles."""
    usage = ref.RefUsage()
    for name in s.list_nodes():
        usage.add_node(name, s.usage.node_stats(name))
    for sid, res in s.usage.resources().items():
        usage.add_resource(sid, ref.RefResource(res.stats, res.running, res.current, res.target))
    candidates = ref.expand(usage, bundles)
    return [(m.sid, m.target_node) for m, _ in ref.topsis(usage.view("started"), candidates, 100)]


def mirrored_dynamic() -> DynamicScheduler:
    """Pairs of nodes with equal measured usage (a-b, c-d), in a mixed order, plus one odd node."""
    s = DynamicScheduler()
    usage = {"a": (3.3, 12.1), "c": (7.9, 40.3), "odd": (1.1, 2.9), "b": (3.3, 12.1), "d": (7.9, 40.3)}
    for name, (cpu, mem_gib) in usage.items():
        s.add_node(name, NodeStats(cpu, 32, int(mem_gib * GiB), 128 * GiB))
    s.add_resource("vm:1", ResourceStats(1.3, 4.0, int(3.1 * GiB), 8 * GiB), True, "odd")
    s.add_resource("vm:2", ResourceStats(0.7, 2.0, int(1.7 * GiB), 4 * GiB), True, "c")
    return s


def test_mirrored_nodes_tie_in_topsis_and_keep_input_order():
    s = mirrored_dynamic()
    for targets in (("b", "a", "d", "c"), ("a", "b", "c", "d"), ("d", "c", "b", "a")):
        bundles = [CompactCandidate("vm:1", ("vm:1",), targets)]
        ranked = [m.migration.target_node for m in s.score_best_balancing_migration_candidates_topsis(bundles, 4)]
        pairs = [{"a", "b"}, {"c", "d"}]
        # Each mirrored pair is adjacent in the ranking, in input order.
        for pair in pairs:
            at = sorted(ranked.index(t) for t in pair)
            assert at[1] == at[0] + 1
            assert [ranked[i] for i in at] == [t for t in targets if t in pair]


def test_mirrored_sums_really_differ_before_ties():
    s = mirrored_dynamic()
    assert raw_sums_differ(s, [CompactCandidate("vm:1", ("vm:1",), ("b", "a", "d", "c"))])


def test_start_scores_of_identical_nodes_are_equal(monkeypatch):
    s = identical_static(16, extra=False)
    stats = ResourceStats.static(*EXTRA)
    scores = s.score_nodes_to_start_service(stats)
    assert {score for _, score in scores} == {0.0}  # every alternative the same: no best, no worst
    # HA negates the scores and sorts by (score, name): the first name wins, as exact arithmetic says.
    assert sorted(scores, key=lambda p: (-p[1], p[0]))[0][0] == "node1"
    without_ties(monkeypatch)
    noisy = s.score_nodes_to_start_service(stats)
    assert len({score for _, score in noisy}) > 1  # the noise the ties remove


def test_start_scores_of_mirrored_nodes_are_equal():
    s = mirrored_dynamic()
    scores = dict(s.score_nodes_to_start_resource(ResourceStats(0.5, 2.0, GiB, 2 * GiB)))
    assert scores["a"] == scores["b"] and scores["c"] == scores["d"]
    assert len(set(scores.values())) == 3


# -- the tolerance ---------------------------------------------------------------------------


def left_to_right(terms) -> float:
    total = 0.0
    for t in terms:
        total += t
    return total


def test_sums_equal_in_exact_arithmetic_are_tied():
    """Every order of the same terms: the left-to-right sums differ, yet all tie."""
    rng = random.Random(18)
    for n in (3, 8, 16, 64):
        terms = [rng.random() ** 2 * rng.choice((1.0, 1e-3, 7.0)) for _ in range(n)]
        sums = sorted({left_to_right(rng.sample(terms, n)) for _ in range(200)})
        tied = tied_sums(np.array(sums), n)
        assert len(set(tied.tolist())) == 1, (n, sums)


def test_the_tolerance_is_the_sums_error_bound():
    n = 16
    c = sum_tolerance(n)
    u = 2.0**-53
    assert (n - 1) * u < c < (n + 2) * u
    a = 1.0
    # Just within and just beyond c (a + b).
    inside = a + c * 2.0 * 0.9
    outside = a + c * 2.0 * 1.1
    assert tied_sums(np.array([inside, a]), n).tolist() == [a, a]
    assert tied_sums(np.array([outside, a]), n).tolist() == [outside, a]


def test_groups_chain_and_keep_order():
    n = 4
    step = sum_tolerance(n) * 1.9  # each neighbour linked, the ends of three too far apart alone
    values = np.array([1.0 + 2 * step, 5.0, 1.0, 1.0 + step, math.inf, math.nan, 0.0, 0.0])
    tied = tied_sums(values, n)
    assert tied[[0, 2, 3]].tolist() == [1.0, 1.0, 1.0]
    assert tied[1] == 5.0 and tied[4] == math.inf and math.isnan(tied[5]) and tied[6] == tied[7] == 0.0
    assert tied_sums(np.array([1.0, 1.0 + 2 * step]), n).tolist() == [1.0, 1.0 + 2 * step]
    assert ref.tie_sums(values.tolist(), n)[:5] == tied.tolist()[:5]


# -- whose error wins ------------------------------------------------------------------------


def test_unknown_leader_later_beats_a_target_equal_to_its_source():
    s = identical_static(3)
    bundles = [
        CompactCandidate("vm:101", ("vm:101",), ("node1", "node2")),  # node1 is its own node
        CompactCandidate("vm:415", ("vm:415",), ("node2",)),
    ]
    with pytest.raises(SchedulingError, match=r"^leader 'vm:415' is not present in the cluster usage$"):
        s.score_best_balancing_migration_candidates_topsis(bundles, 1)
    # Alone, the first bundle still gets crs-bridge's refusal.
    with pytest.raises(InvalidInputError, match="is the source node"):
        s.score_best_balancing_migration_candidates(bundles[:1], 1)


@pytest.mark.parametrize(
    ("later", "error"),
    [
        (
            CompactCandidate("vm:201", ("vm:201", "vm:101"), ("node3",)),
            "resource 'vm:101' is on other node than leader",
        ),
        (CompactCandidate("vm:201", ("vm:202",), ("node3",)), "leader 'vm:201' is not present in the resources list"),
    ],
)
@pytest.mark.parametrize("method", ["bruteforce", "topsis"])
def test_any_later_bundle_error_beats_an_unknown_target(later, error, method):
    s = identical_static(3)
    bundles = [CompactCandidate("vm:101", ("vm:101",), ("nowhere",)), later]
    score = s.score_best_balancing_migration_candidates
    if method == "topsis":
        score = s.score_best_balancing_migration_candidates_topsis
    with pytest.raises(SchedulingError) as info:
        score(bundles, 1)
    assert str(info.value) == error


def test_every_permutation_of_identical_targets_ranks_in_input_order():
    s = identical_static(5)
    for targets in itertools.permutations(("node2", "node1", "node4", "node5")):
        bundles = [CompactCandidate("vm:999", ("vm:999",), targets)]
        ranked = [m.migration.target_node for m in s.score_best_balancing_migration_candidates_topsis(bundles, 4)]
        assert ranked == list(targets)
