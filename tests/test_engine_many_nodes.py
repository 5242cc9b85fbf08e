"""Property tests: clusters of more nodes than bruteforce computes all candidates exactly for
(``core.scheduler._EXACT_ALL_NODES``), with few candidates (1 to 70): bruteforce bounds them
first even below 64 candidates, and exact imbalances of more than a few rows fill the load
matrix (``core.whatif.exact_load_sums``). Every value and order must be the reference's
(tests/reference.py) to the bit; tests/test_engine_properties.py covers up to 16 nodes."""

from __future__ import annotations

from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from crs_bridge import core
from crs_bridge.core import NodeStats, ResourceStats
from crs_bridge.core.candidates import CandidateColumns, Migration, MigrationCandidate, batch_from_columns
from crs_bridge.core.usage import NodeView
from tests import reference as ref
from tests.test_engine_properties import BELOW_NORMAL_SQUARES, scored_bits

FORMULAS = st.sampled_from(["normalized", "raw"])


@st.composite
def node_stats(draw, tiny: bool) -> NodeStats:
    if tiny:  # loads whose squared deviations fall below the normal floats
        return NodeStats(draw(BELOW_NORMAL_SQUARES), draw(st.sampled_from([1, 64])), 0, 1)
    maxcpu, maxmem = draw(st.sampled_from([1, 8, 64])), draw(st.sampled_from([1 << 30, 1 << 36]))
    return NodeStats(draw(st.floats(0.0, 2.0 * maxcpu)), maxcpu, draw(st.integers(0, 2 * maxmem)), maxmem)


@st.composite
def clusters(draw) -> tuple[list[tuple[str, NodeStats]], list[tuple[Migration, ResourceStats]]]:
    """33 to 48 nodes (some sharing stats: ties), 1 to 70 candidates (some sharing sids and stats)."""
    tiny = draw(st.booleans())
    names = [f"n{i:02d}" for i in range(draw(st.integers(core.scheduler._EXACT_ALL_NODES + 1, 48)))]
    pool = draw(st.lists(node_stats(tiny), min_size=1, max_size=3))
    nodes = [(name, draw(st.sampled_from(pool) | node_stats(tiny))) for name in names]
    moved = BELOW_NORMAL_SQUARES if tiny else st.floats(0.0, 16.0)
    stats = st.builds(ResourceStats, moved, st.just(0.0), st.integers(0, 0 if tiny else 1 << 34), st.just(0))
    shared = draw(st.lists(stats, min_size=1, max_size=3))
    candidates = []
    for _ in range(draw(st.integers(1, 70))):
        source, target = draw(st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True))
        sid = f"vm:{draw(st.integers(1, 20))}"
        candidates.append((Migration(sid, source, target), draw(st.sampled_from(shared) | stats)))
    return nodes, candidates


#: Cells of the load matrix filled at a time: with 1, more than one row on these many nodes takes
#: running sums instead (``core.whatif.DENSE_NODES``).
DENSE_CELLS = st.sampled_from([1, core.whatif.DENSE_CELLS])


@given(clusters(), FORMULAS, st.sampled_from([1, 2, 3, 13, 40, 100]), DENSE_CELLS, st.data())
def test_scoring_on_many_nodes_matches_reference(cluster, formula, limit, dense_cells, data):
    nodes, candidates = cluster
    view = NodeView.from_stats([name for name, _ in nodes], [stats for _, stats in nodes])
    batch = batch_from_columns(view, CandidateColumns.of([MigrationCandidate(m, stats) for m, stats in candidates]))
    with mock.patch.object(core.whatif, "DENSE_CELLS", dense_cells):
        for method, expected in (("bruteforce", ref.bruteforce), ("topsis", ref.topsis)):
            scored = core.scheduler.score_migrations(batch, limit, method, formula)
            assert scored_bits(scored) == scored_bits(expected(nodes, candidates, limit, formula))
        values = [ref.migration_imbalance(nodes, candidate, formula) for candidate in candidates]
        threshold = data.draw(st.sampled_from(values) | st.floats(0.0, 1.0), label="threshold")
        chosen = core.scheduler.select_best_migration(batch, "bruteforce", formula, threshold)
    assert scored_bits([chosen]) == scored_bits([ref.select_best(nodes, candidates, formula, threshold)])
