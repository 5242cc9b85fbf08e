"""The engine against upstream's published figures (reference-figures.md §8.1 and §8.2).

Expected values are the spec's numbers, never the engine's own output; every figure is also
checked on the slow reference (tests/reference.py) so a wrong expectation would show twice.
"""

from __future__ import annotations

import math
import struct

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
from crs_bridge.core.candidates import CandidateColumns, Migration, MigrationCandidate, batch_from_columns
from crs_bridge.core.imbalance import truncate
from crs_bridge.core.topsis import topsis_rank, topsis_scores
from crs_bridge.core.usage import NodeView
from tests import columns
from tests import reference as ref

GiB, MiB = 1 << 30, 1 << 20


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


# -- §8.1 crate tests ------------------------------------------------------------------------

CLUSTERS = {
    "homogeneous": [
        ("node1", NodeStats(1.7, 16, 12334 * MiB, 64 * GiB)),
        ("node2", NodeStats(15.184, 16, 529 * MiB, 64 * GiB)),
        ("node3", NodeStats(5.2, 16, 9381 * MiB, 64 * GiB)),
    ],
    "heterogeneous": [
        ("node1", NodeStats(1.7, 16, 12334 * MiB, 128 * GiB)),
        ("node2", NodeStats(15.184, 32, 529 * MiB, 96 * GiB)),
        ("node3", NodeStats(5.2, 24, 9381 * MiB, 64 * GiB)),
    ],
}
VM101 = ResourceStats(0.7, 4.0, 8 * GiB, 16 * GiB)
BUNDLE = [CompactCandidate("vm:101", ("vm:101",), ("node2", "node3"))]
TO_NODE2 = Migration("vm:101", "node1", "node2")
TO_NODE3 = Migration("vm:101", "node1", "node3")

IMBALANCE = {  # formula -> cluster -> published value
    "normalized": {"homogeneous": 0.3460548572604576, "heterogeneous": 0.23352917788066363},
    "raw": {"homogeneous": 0.4893954724628247, "heterogeneous": 0.33026013056867354},
}
WHAT_IF = {  # formula -> cluster -> (->node2, ->node3), truncated
    "normalized": {
        "homogeneous": (0.511933196160907, 0.422346017431863),
        "heterogeneous": (0.409710187680757, 0.371253581868279),
    },
    "raw": {
        "homogeneous": (0.723982869039761, 0.597287465866405),
        "heterogeneous": (0.579417704060553, 0.52503185055771),
    },
}
TOPSIS_SCORES = {
    "homogeneous": (0.9585666934295297, 0.041433306570470306),
    "heterogeneous": (0.9729602954463386, 0.027039704553661364),
}
START_ORDERS = {  # resource stats (cpu, maxcpu, mem, maxmem) -> cluster -> best first
    "mem-heavy": ((0.0, 1.0, 0, 12 * GiB), {"homogeneous": "node2 node3 node1", "heterogeneous": "node2 node1 node3"}),
    "cpu-heavy": ((0.0, 12.0, 0, 0), {"homogeneous": "node1 node3 node2", "heterogeneous": "node3 node2 node1"}),
    "unlimited": ((0.0, 0.0, 0, 0), {"homogeneous": "node1 node3 node2", "heterogeneous": "node1 node3 node2"}),
    "combined": ((0.0, 12.0, 0, 12 * GiB), {"homogeneous": "node2 node3 node1", "heterogeneous": "node2 node1 node3"}),
}


def crate_scheduler(cluster: str, formula: str = "normalized") -> DynamicScheduler:
    """The crate test's cluster as Dynamic nodes (measured stats), vm:101 running on node1."""
    s = DynamicScheduler(formula)
    for name, st in CLUSTERS[cluster]:
        s.add_node(name, NodeStats.checked(st.cpu, st.maxcpu, st.mem, st.maxmem))
    s.add_resource("vm:101", VM101, running=True, current="node1")
    return s


def ref_candidates() -> list[ref.Candidate]:
    return [(TO_NODE2, VM101), (TO_NODE3, VM101)]


def start_order(scores: list[tuple[str, float]]) -> str:
    """Names by descending score, then name (as the HA manager sorts them)."""
    return " ".join(name for name, _ in sorted(scores, key=lambda t: (-t[1], t[0])))


@pytest.mark.parametrize("formula", ["normalized", "raw"])
@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_imbalance_is_the_published_value_to_the_bit(cluster, formula):
    expected = IMBALANCE[formula][cluster]
    assert ref.imbalance(CLUSTERS[cluster], formula) == expected
    assert bits(crate_scheduler(cluster, formula).calculate_node_imbalance()) == bits(expected)


@pytest.mark.parametrize("formula", ["normalized", "raw"])
@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_bruteforce_order_and_what_if_values(cluster, formula):
    to2, to3 = WHAT_IF[formula][cluster]
    expected = [(TO_NODE3, to3), (TO_NODE2, to2)]
    assert ref.bruteforce(CLUSTERS[cluster], ref_candidates(), 10, formula) == expected
    scored = crate_scheduler(cluster, formula).score_best_balancing_migration_candidates(columns(BUNDLE), 10)
    assert [(m.migration, bits(m.imbalance)) for m in scored] == [(m, bits(v)) for m, v in expected]


@pytest.mark.parametrize("formula", ["normalized", "raw"])
@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_topsis_order_keeps_each_what_if_imbalance(cluster, formula):
    to2, to3 = WHAT_IF[formula][cluster]
    expected = [(TO_NODE2, to2), (TO_NODE3, to3)]
    assert ref.topsis(CLUSTERS[cluster], ref_candidates(), 10, formula) == expected
    scored = crate_scheduler(cluster, formula).score_best_balancing_migration_candidates_topsis(columns(BUNDLE), 10)
    assert [(m.migration, bits(m.imbalance)) for m in scored] == [(m, bits(v)) for m, v in expected]


@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_topsis_scores_are_the_published_values(cluster, monkeypatch):
    expected = list(TOPSIS_SCORES[cluster])
    assert ref.topsis_candidate_scores(CLUSTERS[cluster], ref_candidates()) == expected
    seen = []

    def spy(matrix):
        scores = topsis_scores(matrix)
        seen.append(scores.tolist())
        return scores

    monkeypatch.setattr(core.scheduler, "topsis_scores", spy)
    crate_scheduler(cluster).score_best_balancing_migration_candidates_topsis(columns(BUNDLE), 1)
    assert [[bits(v) for v in s] for s in seen] == [[bits(v) for v in expected]]


@pytest.mark.parametrize("case", list(START_ORDERS))
@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_start_orders(cluster, case):
    fields, orders = START_ORDERS[case]
    stats = ResourceStats(*fields)
    ref_scores = ref.start_scores(CLUSTERS[cluster], stats)
    assert start_order(ref_scores) == orders[cluster]
    scores = crate_scheduler(cluster).score_nodes_to_start_resource(stats)
    assert start_order(scores) == orders[cluster]
    assert [(n, bits(v)) for n, v in scores] == [(n, bits(v)) for n, v in ref_scores]


def test_expanded_candidates_score_as_the_compact_form():
    s = crate_scheduler("homogeneous")
    expanded = [MigrationCandidate(TO_NODE2, VM101), MigrationCandidate(TO_NODE3, VM101)]
    assert s.score_best_balancing_migration_candidates(
        columns(expanded), 2
    ) == s.score_best_balancing_migration_candidates(columns(BUNDLE), 2)
    topsis = s.score_best_balancing_migration_candidates_topsis
    assert topsis(columns(expanded), 2) == topsis(columns(BUNDLE), 2)


# -- §5.4 truncation -------------------------------------------------------------------------

LONGER, SHORTER = 0.7231749488916931, 0.723174948891693


@pytest.mark.parametrize("trunc", [truncate, ref.truncate], ids=["engine", "reference"])
def test_truncation_makes_equal_significant_digits_equal(trunc):
    assert LONGER != SHORTER
    assert trunc(LONGER) == trunc(SHORTER)
    assert trunc(SHORTER + 1e-15) > trunc(SHORTER)


@pytest.mark.parametrize("trunc", [truncate, ref.truncate], ids=["engine", "reference"])
def test_truncation_keeps_non_finite_values(trunc):
    assert math.isnan(trunc(math.nan))
    assert trunc(math.inf) == math.inf
    assert trunc(-math.inf) == -math.inf


def _node3_view() -> NodeView:
    return NodeView.from_stats(["node1", "node2", "node3"], [NodeStats(1.0, 4, 1, 4)] * 3)


@pytest.mark.parametrize(
    ("to_node2", "to_node3", "first"),
    [(SHORTER, LONGER, "node2"), (LONGER, SHORTER, "node2"), (SHORTER + 1e-15, SHORTER, "node3")],
)
def test_truncated_ties_are_ordered_by_migration(to_node2, to_node3, first):
    """Upstream's unit test: after truncation the two values tie and (sid, source, target) decides."""
    candidates = [
        MigrationCandidate(Migration("vm:102", "node1", "node3"), VM101),
        MigrationCandidate(Migration("vm:102", "node1", "node2"), VM101),
    ]
    batch = batch_from_columns(_node3_view(), CandidateColumns.of(candidates))
    values = np.array([truncate(to_node3), truncate(to_node2)])
    order = core.scheduler._ordered(batch, np.arange(2), values)
    assert batch.migration(int(order[0])).target_node == first
    scored = [(c.migration, ref.truncate(v)) for c, v in zip(candidates, (to_node3, to_node2))]
    assert min(scored, key=ref.order_key)[0].target_node == first


# -- TOPSIS unit tests -----------------------------------------------------------------------


def engine_rank(matrix, weights) -> list[int]:
    return topsis_rank(topsis_scores(np.array(matrix, dtype=float), np.array(weights))).tolist()


def reference_rank(matrix, weights) -> list[int]:
    return ref.topsis_rank(ref.topsis_scores(matrix, weights))


@pytest.mark.parametrize("rank", [engine_rank, reference_rank], ids=["engine", "reference"])
def test_topsis_single_criterion_minimised(rank):
    assert rank([[1.0], [2.0], [5.0], [3.0], [4.0]], [1.0]) == [0, 1, 3, 4, 2]


@pytest.mark.parametrize("rank", [engine_rank, reference_rank], ids=["engine", "reference"])
def test_topsis_ties_keep_input_order(rank):
    # Symmetric columns: rows 1 and 2 score 0.5 each, rows 0 and 3 (the worst) 0.0.
    assert rank([[2.0, 2.0], [1.0, 2.0], [2.0, 1.0], [2.0, 2.0]], [0.5, 0.5]) == [1, 2, 0, 3]
    assert rank([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [2.0, 1.0]], [0.5, 0.5]) == [0, 1, 2, 3]


@pytest.mark.parametrize("rank", [engine_rank, reference_rank], ids=["engine", "reference"])
def test_topsis_identical_rows_all_score_zero(rank):
    assert rank([[1.5, 2.0]] * 3, [0.5, 0.5]) == [0, 1, 2]
    assert topsis_scores(np.array([[1.5, 2.0]] * 3), np.array([0.5, 0.5])).tolist() == [0.0] * 3
    assert ref.topsis_scores([[7.0]], [1.0]) == [0.0]


def test_topsis_scores_do_not_depend_on_the_matrix_layout():
    # topsis_solve works on contiguous columns: a row-major matrix (as callers other than
    # load_criteria may pass) must score exactly as the column-major one load_criteria builds.
    rng = np.random.default_rng(7)
    columns = [1.0 + rng.random(257) for _ in range(4)]
    row_major, column_major = np.column_stack(columns), np.stack(columns).T
    assert row_major.flags.c_contiguous and column_major.flags.f_contiguous
    scores = topsis_scores(row_major)
    assert scores.tobytes() == topsis_scores(column_major).tobytes()
    assert scores.tolist() == ref.topsis_scores(row_major.tolist(), ref.WEIGHTS)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ([[1.0, 2.0], [math.nan, 1.0]], "criterion 0 got invalid value NaN"),
        ([[1.0, 2.0], [1.0, math.nan]], "criterion 1 got invalid value NaN"),
        ([[1.0, math.inf], [1.0, 2.0]], "criterion 1 got invalid value NaN"),
    ],
)
def test_topsis_non_finite_criteria_are_errors(matrix, message):
    with pytest.raises(SchedulingError) as engine:
        topsis_scores(np.array(matrix), np.array([0.5, 0.5]))
    with pytest.raises(SchedulingError) as reference:
        ref.topsis_scores(matrix, [0.5, 0.5])
    assert str(engine.value) == str(reference.value) == message


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (math.nan, "NaN"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (1.0, "1"),
        (-0.0, "-0"),
        (0.1, "0.1"),
        (1e-7, "0.0000001"),
        (1.5e16, "15000000000000000"),
        (123.456, "123.456"),
    ],
)
@pytest.mark.parametrize("fmt", [core.topsis.rust_float, ref.rust_display], ids=["engine", "reference"])
def test_error_texts_format_floats_as_rust_display(fmt, value, text):
    assert fmt(value) == text


def test_weights_are_upstreams_normalised_values():
    expected = [0.05555555555555555, 0.1111111111111111, 0.2777777777777778, 0.5555555555555556]
    assert expected == ref.WEIGHTS
    assert core.topsis.WEIGHTS.tolist() == expected


# -- empty and balanced clusters -------------------------------------------------------------


@pytest.mark.parametrize("formula", ["normalized", "raw"])
def test_empty_cluster_has_zero_imbalance(formula):
    assert ref.imbalance([], formula) == 0.0
    assert bits(StaticScheduler(formula).calculate_node_imbalance()) == bits(0.0)
    assert bits(DynamicScheduler(formula).calculate_node_imbalance()) == bits(0.0)


@pytest.mark.parametrize("formula", ["normalized", "raw"])
@pytest.mark.parametrize("count", [1, 3])
def test_balanced_cluster_has_zero_imbalance(count, formula):
    s = DynamicScheduler(formula)
    view = []
    for i in range(count):
        stats = NodeStats(4.0, 16, 32 * GiB, 64 * GiB)  # loads 1/4 and 1/2: sums and mean are exact
        s.add_node(f"node{i}", stats)
        view.append((f"node{i}", stats))
    assert ref.imbalance(view, formula) == 0.0
    assert bits(s.calculate_node_imbalance()) == bits(0.0)


@pytest.mark.parametrize("formula", ["normalized", "raw"])
def test_identical_nodes_with_inexact_mean_stay_within_upstreams_tolerance(formula):
    """Three loads of 0.1 do not sum to an exact multiple: the value is tiny, not 0, in both."""
    s = StaticScheduler(formula)
    view = []
    for name in ("a", "b", "c"):
        s.add_node(name, 10, 10)
        s.add_service(f"vm:{name}", ResourceStats.static(1.0, 1), running=True, current=name)
        view.append((name, NodeStats(1.0, 10, 1, 10)))
    value = s.calculate_node_imbalance()
    assert bits(value) == bits(ref.imbalance(view, formula))
    assert value <= np.finfo(float).eps


# -- §8.2 perl-rs Static binding test (engine level, legacy add as upstream's test does) -----


class EngineStatic:
    """The scenario operations on core's StaticScheduler."""

    def __init__(self) -> None:
        self.s = StaticScheduler()

    def add_node(self, name: str, maxcpu: int, maxmem: int) -> None:
        self.s.add_node(name, maxcpu, maxmem)

    def legacy_add(self, node: str, sid: str, service: tuple[float, int]) -> None:
        self.s.add_service_usage_to_node(node, sid, ResourceStats.static(*service))

    def remove(self, sid: str) -> None:
        self.s.remove_service_usage(sid)

    def remove_node(self, name: str) -> None:
        self.s.remove_node(name)

    def order(self, service: tuple[float, int]) -> list[str]:
        return start_order(self.s.score_nodes_to_start_service(ResourceStats.static(*service))).split()


class ReferenceStatic(EngineStatic):
    """The same operations on the slow reference."""

    def __init__(self) -> None:
        self.u = ref.RefUsage()

    def add_node(self, name: str, maxcpu: int, maxmem: int) -> None:
        self.u.add_node(name, NodeStats(0.0, maxcpu, 0, maxmem))

    def legacy_add(self, node: str, sid: str, service: tuple[float, int]) -> None:
        self.u.add_legacy(node, sid, ResourceStats(float(service[0]), float(service[0]), service[1], service[1]))

    def remove(self, sid: str) -> None:
        self.u.remove_resource(sid)

    def remove_node(self, name: str) -> None:
        self.u.remove_node(name)

    def order(self, service: tuple[float, int]) -> list[str]:
        stats = ResourceStats(float(service[0]), float(service[0]), service[1], service[1])
        return start_order(ref.start_scores(self.u.view("started"), stats)).split()


SIDES = pytest.mark.parametrize("side", [EngineStatic, ReferenceStatic], ids=["engine", "reference"])
ABC = [("A", 10, 100_000_000_000), ("B", 20, 200_000_000_000), ("C", 30, 300_000_000_000)]
SERVICE = (4, 20_000_000_000)


@SIDES
def test_balance(side):
    s = side()
    for name, cpu, mem in ABC[:2]:
        s.add_node(name, cpu, mem)
    for i in range(15):
        nodes = s.order(SERVICE)
        assert nodes[0] == ("A" if i % 3 == 2 else "B"), f"round {i}"
        s.legacy_add(nodes[0], f"vm:{100 + i}", SERVICE)


@SIDES
def test_balance_removal(side):
    """The spec gives no service size for this scenario; it uses test_balance's (4 cores, 20e9 B)."""
    s = side()
    for name, cpu, mem in ABC:
        s.add_node(name, cpu, mem)
    for node, sid in [("A", "a"), ("A", "b"), ("B", "c"), ("B", "d")]:
        s.legacy_add(node, sid, SERVICE)
    s.legacy_add("C", "c", SERVICE)  # c is now moving B -> C and loads both
    assert s.order(SERVICE) == ["C", "B", "A"]
    s.remove("d")
    s.remove("c")
    s.legacy_add("C", "c", SERVICE)
    assert s.order(SERVICE) == ["B", "C", "A"]
    s.remove_node("B")
    assert s.order(SERVICE) == ["C", "A"]


@SIDES
def test_overcommitted(side):
    s = side()
    for name, mem in [("A", 4102062080), ("B", 4102062080), ("C", 4102053888), ("D", 4102053888)]:
        s.add_node(name, 4, mem)
    service = (1, 512 * MiB)
    for node, sid in [("A", "a"), ("A", "b"), ("A", "c"), ("B", "d"), ("A", "e")]:
        s.legacy_add(node, sid, service)
    assert s.order(service) == ["C", "D", "B", "A"]


@SIDES
@pytest.mark.parametrize("initial_load", [False, True])
def test_balance_small_memory_difference(side, initial_load):
    s = side()
    for name, cpu, mem in [("A", 8, 10_000_000_000), ("B", 4, 9_000_000_000), ("C", 4, 8_000_000_000)]:
        s.add_node(name, cpu, mem)
    if initial_load:
        for node, sid, cpu in [("A", "vm:1", 4), ("B", "vm:2", 2), ("C", "vm:3", 2)]:
            s.legacy_add(node, sid, (cpu, 1_000_000_000))
    service = (3, 16_000_000)
    expected = {0: ["A", "B", "C"], 1: ["A", "B", "C"], 2: ["B", "C", "A"], 3: ["C", "A", "B"]}
    for i in range(20):
        nodes = s.order(service)
        assert nodes == expected[i % 4], f"round {i}"
        s.legacy_add(nodes[0], f"vm:{100 + i}", service)


@pytest.mark.parametrize("formula", ["normalized", "raw"])
def test_subnormal_loads_give_the_same_value_on_every_path(formula):
    """Loads summing to a few subnormals make the mean underflow to 0 and the CV 0/0, which
    upstream answers with NaN. crs-bridge answers 0.0 (decision 4: never NaN; no load is
    balanced), on the imbalance path and on the what-if path alike."""
    s = DynamicScheduler(formula)
    s.add_node("a", NodeStats.checked(1e-323, 1, 0, 1))
    s.add_node("b", NodeStats.checked(0.0, 1, 0, 1))
    s.add_resource("vm:1", ResourceStats.checked(0.0, 1.0, 0, 0), True, "a")
    moves_nothing = [CompactCandidate("vm:1", ("vm:1",), ("b",))]
    value = s.calculate_node_imbalance()
    expected = ref.imbalance([("a", NodeStats(1e-323, 1, 0, 1)), ("b", NodeStats(0.0, 1, 0, 1))], formula)
    assert value == expected == 0.0 and not math.copysign(1.0, value) < 0
    (scored,) = s.score_best_balancing_migration_candidates(columns(moves_nothing), 1)
    assert scored.imbalance == 0.0
