"""Ties are bit-equal values only (the arithmetic rule in ``core/__init__.py``): a near tie, values
an ulp or a hair apart, is decided as the crate's arithmetic decides it for the nodes in insertion
order, and only a true tie (the same bits) is broken by input order (TOPSIS) or by name
(bruteforce). Also: upstream's candidate errors win over crs-bridge's own refusals.

On identical (or mirrored) nodes, moving a guest to either of two symmetric nodes gives the same
multiset of node loads but other orders of the left-to-right sums, so floats an ulp apart, which
TOPSIS, normalising by the spread of the rows, can turn into any score. Upstream's binding sums in
a random order there; crs-bridge gives the crate's answer for insertion order, which the slow
reference (``tests/reference.py``) computes independently.
"""

from __future__ import annotations

import struct

import pytest

from crs_bridge.core import (
    CompactCandidate,
    DynamicScheduler,
    Migration,
    MigrationCandidate,
    NodeStats,
    ResourceStats,
    SchedulingError,
    StaticScheduler,
)
from crs_bridge.core.errors import InvalidInputError
from crs_bridge.core.scheduler import topsis_criteria
from crs_bridge.core.topsis import topsis_scores
from crs_bridge.core.whatif import exact_square_sums, what_if
from tests import columns
from tests import reference as ref
from tests.test_engine_usage import ref_usage_of

GiB = 1 << 30


#: The two guests of each identical node, and the extra one on node3 (vm:999): (maxcpu, maxmem).
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
    """Whether the what-ifs' left-to-right cpu or memory square sums differ at all."""
    batch = s.candidate_batch(columns(bundles))
    w = what_if(batch)
    view, a, b = batch.view, batch.src, batch.tgt
    cpu = exact_square_sums(view.cpu_loads(), a, w.cpu_src, b, w.cpu_tgt)
    mem = exact_square_sums(view.mem_loads(), a, w.mem_src, b, w.mem_tgt)
    return len(set(cpu.tolist())) > 1 or len(set(mem.tolist())) > 1


def bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def topsis_ranking(s, bundles, limit: int = 100) -> list[tuple[str, str, int]]:
    """The engine's TOPSIS answer as (sid, target, imbalance bits)."""
    scored = s.score_best_balancing_migration_candidates_topsis(columns(bundles), limit)
    return [(m.migration.sid, m.migration.target_node, bits(m.imbalance)) for m in scored]


def reference_topsis_ranking(s, bundles, limit: int = 100) -> list[tuple[str, str, int]]:
    """The slow reference's TOPSIS answer for the same cluster and bundles."""
    usage = ref_usage_of(s)
    view = usage.view("started" if s.mode == "static" else "identity")
    scored = ref.topsis(view, ref.expand(usage, bundles), limit, s.formula)
    return [(m.sid, m.target_node, bits(value)) for m, value in scored]


def reference_start_scores(s, stats: ResourceStats) -> list[tuple[str, int]]:
    view = ref_usage_of(s).view("started" if s.mode == "static" else "starting")
    return [(name, bits(score)) for name, score in ref.start_scores(view, stats)]


def start_score_bits(scores) -> list[tuple[str, int]]:
    return [(name, bits(score)) for name, score in scores]


# -- a real difference is no tie ---------------------------------------------------------------

#: Issue 25, example 1: vm:101 moves 1 byte, vm:100 12,345, so vm:101 leaves the lower RMS memory
#: load. Upstream ranks vm:101 first in every node order, with this imbalance (raw).
EXAMPLE_NODES = [
    ("n0", 0.0, 96, 0, 1073741824),
    ("n1", 0.504, 1, 521860546560, 1629715955711),
    ("n2", 3.8987625101428405, 4, 710109298688, 1099511627776),
    ("n3", 74.43942559889999, 96, 1544382191852, 2176114825314),
    ("n4", 110.359, 256, 0, 274877906944),
    ("n5", 112.25922096223273, 128, 1152204721865, 2139982207100),
    ("n6", 6.502310926828734, 8, 2284847104, 8589934592),
]
UPSTREAM_BEST = ("vm:101", 0.566012358337451)


@pytest.mark.parametrize("rotation", range(len(EXAMPLE_NODES)))
def test_a_one_byte_difference_decides_in_every_node_order(rotation):
    s = DynamicScheduler("raw")
    for name, cpu, maxcpu, mem, maxmem in EXAMPLE_NODES[rotation:] + EXAMPLE_NODES[:rotation]:
        s.add_node(name, NodeStats(cpu, maxcpu, mem, maxmem))
    candidates = [
        MigrationCandidate(Migration(sid, "n0", "n4"), ResourceStats(0.0, 0.0, mem, 0))
        for sid, mem in (("vm:100", 12345), ("vm:101", 1))
    ]
    best = s.score_best_balancing_migration_candidates_topsis(columns(candidates), 1)
    assert [(m.migration.sid, m.imbalance) for m in best] == [UPSTREAM_BEST]


# -- near ties: the crate's arithmetic for insertion order decides -----------------------------


@pytest.mark.parametrize("order", ["ha", "reversed"])
def test_sixteen_identical_nodes_rank_as_the_crate_for_insertion_order(order):
    s = identical_static(16)
    targets = ha_targets("node3", 16)
    if order == "reversed":
        targets = targets[::-1]
    bundles = [CompactCandidate("vm:999", ("vm:999",), targets)]
    assert raw_sums_differ(s, bundles), "no near tie: the test would prove nothing"
    ranked = topsis_ranking(s, bundles)
    assert ranked == reference_topsis_ranking(s, bundles)
    assert topsis_ranking(s, bundles) == ranked  # and the same every run


def test_near_ties_are_not_flattened():
    """Sums an ulp apart give other scores: nothing makes them equal."""
    s = identical_static(16)
    bundles = [CompactCandidate("vm:999", ("vm:999",), ha_targets("node3", 16))]
    scores = topsis_scores(topsis_criteria(what_if(s.candidate_batch(columns(bundles)))))
    assert len(set(scores.tolist())) > 1


def test_identical_and_different_targets_rank_as_the_reference():
    s = identical_static(6)
    s.add_node("big", 64, 256 * GiB)
    s.add_service("vm:700", ResourceStats.static(5.0, 9 * GiB), True, "big")
    bundles = [
        CompactCandidate("vm:999", ("vm:999",), ("node4", "node2", "node1", "big", "node5")),
        CompactCandidate("vm:602", ("vm:602",), ("node1", "node2", "big")),
    ]
    assert topsis_ranking(s, bundles) == reference_topsis_ranking(s, bundles)


def mirrored_dynamic() -> DynamicScheduler:
    """Pairs of nodes with equal measured usage (a-b, c-d), in a mixed order, plus one odd node."""
    s = DynamicScheduler()
    usage = {"a": (3.3, 12.1), "c": (7.9, 40.3), "odd": (1.1, 2.9), "b": (3.3, 12.1), "d": (7.9, 40.3)}
    for name, (cpu, mem_gib) in usage.items():
        s.add_node(name, NodeStats(cpu, 32, int(mem_gib * GiB), 128 * GiB))
    s.add_resource("vm:1", ResourceStats(1.3, 4.0, int(3.1 * GiB), 8 * GiB), True, "odd")
    s.add_resource("vm:2", ResourceStats(0.7, 2.0, int(1.7 * GiB), 4 * GiB), True, "c")
    return s


@pytest.mark.parametrize("targets", [("b", "a", "d", "c"), ("a", "b", "c", "d"), ("d", "c", "b", "a")])
def test_mirrored_nodes_rank_as_the_reference(targets):
    s = mirrored_dynamic()
    bundles = [CompactCandidate("vm:1", ("vm:1",), targets)]
    assert raw_sums_differ(s, bundles)
    assert topsis_ranking(s, bundles, 4) == reference_topsis_ranking(s, bundles, 4)


def test_start_scores_of_identical_nodes_are_the_references_bits():
    s = identical_static(16, extra=False)
    stats = ResourceStats.static(*EXTRA)
    scores = start_score_bits(s.score_nodes_to_start_service(stats))
    assert scores == reference_start_scores(s, stats)


def test_start_scores_of_mirrored_nodes_are_the_references_bits():
    s = mirrored_dynamic()
    stats = ResourceStats(0.5, 2.0, GiB, 2 * GiB)
    assert start_score_bits(s.score_nodes_to_start_resource(stats)) == reference_start_scores(s, stats)


# -- true ties: the same bits -------------------------------------------------------------------


def twins_first() -> DynamicScheduler:
    """Identical nodes a and b first, then the source c: a move to a and a move to b sum the same
    squares in the same order but for the first two terms, whose sum does not depend on their
    order, so every criterion and imbalance is the same float."""
    s = DynamicScheduler()
    for name, cpu, mem in (("a", 3.3, 12 * GiB), ("b", 3.3, 12 * GiB), ("c", 9.1, 70 * GiB)):
        s.add_node(name, NodeStats(cpu, 32, mem, 128 * GiB))
    s.add_resource("vm:1", ResourceStats(1.3, 4.0, int(3.1 * GiB), 8 * GiB), True, "c")
    return s


@pytest.mark.parametrize("targets", [("a", "b"), ("b", "a")])
def test_bit_equal_scores_keep_input_order_in_topsis(targets):
    s = twins_first()
    bundles = [CompactCandidate("vm:1", ("vm:1",), targets)]
    scores = topsis_scores(topsis_criteria(what_if(s.candidate_batch(columns(bundles)))))
    assert bits(scores[0]) == bits(scores[1])
    assert [
        m.migration.target_node for m in s.score_best_balancing_migration_candidates_topsis(columns(bundles), 2)
    ] == list(targets)


@pytest.mark.parametrize("targets", [("a", "b"), ("b", "a")])
def test_bit_equal_imbalances_go_by_name_in_bruteforce(targets):
    s = twins_first()
    bundles = [CompactCandidate("vm:1", ("vm:1",), targets)]
    scored = s.score_best_balancing_migration_candidates(columns(bundles), 2)
    assert bits(scored[0].imbalance) == bits(scored[1].imbalance)
    assert [m.migration.target_node for m in scored] == ["a", "b"]


# -- whose error wins ------------------------------------------------------------------------


def test_unknown_leader_later_beats_a_target_equal_to_its_source():
    s = identical_static(3)
    bundles = [
        CompactCandidate("vm:101", ("vm:101",), ("node1", "node2")),  # node1 is its own node
        CompactCandidate("vm:415", ("vm:415",), ("node2",)),
    ]
    with pytest.raises(SchedulingError, match=r"^leader 'vm:415' is not present in the cluster usage$"):
        s.score_best_balancing_migration_candidates_topsis(columns(bundles), 1)
    # Alone, the first bundle still gets crs-bridge's refusal.
    with pytest.raises(InvalidInputError, match="is the source node"):
        s.score_best_balancing_migration_candidates(columns(bundles[:1]), 1)


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
        score(columns(bundles), 1)
    assert str(info.value) == error
