"""Upstream's crate answers every vector of ``tests/data/upstream-vectors/`` (see its README);
crs-bridge must give the same answer bit for bit, in the same order: through the real server, on
the engine in process, and on the slow reference (which shares none of the engine's arithmetic).
"""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from crs_bridge.client import server_command
from crs_bridge.core import DynamicScheduler, Migration, MigrationCandidate, NodeStats, ResourceStats
from crs_bridge.core.candidates import CandidateColumns, batch_from_columns
from crs_bridge.core.imbalance import imbalance_bounds, node_imbalance
from crs_bridge.core.scheduler import calculate_node_imbalance, score_migrations, score_nodes_to_start
from crs_bridge.core.whatif import what_if
from tests import reference as ref

VECTOR_DIR = Path(__file__).resolve().parent / "data" / "upstream-vectors"
VECTOR_FILES = sorted(VECTOR_DIR.glob("*.jsonl.gz"))
METHODS = ("calculate_node_imbalance", "score_best_balancing_migrations", "score_nodes_to_start_resource")


def read_vectors(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


VECTORS = {path.name: read_vectors(path) for path in VECTOR_FILES}


def same_bits(got: Any, expected: Any) -> bool:
    """Equal JSON values, floats compared by their bits (``float.hex``), lists in order."""
    if isinstance(expected, float):
        return type(got) is float and got.hex() == expected.hex()
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(map(same_bits, got, expected))
    if isinstance(expected, dict):
        return (
            isinstance(got, dict) and got.keys() == expected.keys() and all(same_bits(got[k], expected[k]) for k in got)
        )
    return type(got) is type(expected) and got == expected


def mismatches(vectors: list[dict], answers: Iterable[Any]) -> list[str]:
    """The ids of the vectors whose answer (``answers`` in the same order) is not ``expected`` bit
    for bit, each with both."""
    wrong = []
    for vector, got in zip(vectors, answers, strict=True):
        if not same_bits(got, vector["expected"]["result"]):
            wrong.append(f"{vector['id']}: got {got!r}, upstream {vector['expected']['result']!r}")
    return wrong


def test_the_vectors_are_all_there():
    """Both files, every method the RPC headline offers on a snapshot except the seed's select."""
    assert [path.name for path in VECTOR_FILES] == ["crate-main.jsonl.gz", "crate-stress.jsonl.gz"]
    vectors = [v for file in VECTORS.values() for v in file]
    assert len(vectors) == 1934
    assert {v["method"] for v in vectors} == set(METHODS)
    assert {v["params"].get("method") for v in vectors} >= {"bruteforce", "topsis"}
    assert sum(bool(v.get("order_dependent")) for v in vectors) > 100  # the hard cases are in


# -- through the real server ----------------------------------------------------------------------


def test_the_server_answers_every_vector_as_upstream(tmp_path):
    vectors = [v for file in VECTORS.values() for v in file]
    requests = "".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "method": v["method"], "params": v["params"]}) + "\n"
        for i, v in enumerate(vectors)
    )
    served = subprocess.run(
        server_command(), input=requests, capture_output=True, text=True, check=True, cwd=tmp_path, timeout=600
    )
    answers = {answer["id"]: answer for answer in map(json.loads, served.stdout.splitlines())}
    assert sorted(answers) == list(range(len(vectors)))
    # An error answer is shown whole.
    wrong = mismatches(vectors, (answers[i].get("result", answers[i]) for i in range(len(vectors))))
    assert not wrong, f"{len(wrong)} of {len(vectors)} not upstream's:\n" + "\n".join(wrong[:5])


# -- the engine in process ------------------------------------------------------------------------


def migration_wire(migration: Migration) -> dict[str, str]:
    return {"sid": migration.sid, "source-node": migration.source_node, "target-node": migration.target_node}


def engine_stats(stats: dict) -> ResourceStats:
    return ResourceStats.checked(stats["cpu"], stats["maxcpu"], stats["mem"], stats["maxmem"])


def vector_scheduler(params: dict, formula: str) -> DynamicScheduler:
    """The vector's snapshot (dynamic, without resources, as all vectors are) as a scheduler."""
    usage = params["usage"]
    assert usage["mode"] == "dynamic" and not usage["resources"]
    scheduler = DynamicScheduler(formula)
    for node in usage["nodes"]:
        scheduler.add_node(node["name"], NodeStats.checked(node["cpu"], node["maxcpu"], node["mem"], node["maxmem"]))
    return scheduler


def engine_answer(vector: dict) -> Any:
    """The engine's answer to a vector."""
    params = vector["params"]
    scheduler = vector_scheduler(params, params.get("imbalance") or "raw")
    if vector["method"] == "calculate_node_imbalance":
        return calculate_node_imbalance(scheduler.view(), params["imbalance"])
    if vector["method"] == "score_nodes_to_start_resource":
        scores = score_nodes_to_start(scheduler.view(scheduler.start_view), engine_stats(params["stats"]))
        return [[name, score] for name, score in scores]
    candidates = [
        MigrationCandidate(Migration(c["sid"], c["source-node"], c["target-node"]), engine_stats(c["stats"]))
        for c in params["candidates"]
    ]
    if not candidates:
        return []
    batch = batch_from_columns(scheduler.view(), CandidateColumns.of(candidates))
    scored = score_migrations(batch, params["limit"], params["method"], params["imbalance"])
    return [{"migration": migration_wire(s.migration), "imbalance": s.imbalance} for s in scored]


@pytest.mark.parametrize("file", VECTORS)
def test_the_engine_answers_every_vector_as_upstream(file):
    vectors = VECTORS[file]
    wrong = mismatches(vectors, map(engine_answer, vectors))
    assert not wrong, f"{len(wrong)} of {len(vectors)} not upstream's:\n" + "\n".join(wrong[:5])


# -- the slow reference ---------------------------------------------------------------------------


def reference_stats(stats: dict) -> ResourceStats:
    return ResourceStats(float(stats["cpu"]), float(stats["maxcpu"]), stats["mem"], stats["maxmem"])


def reference_answer(vector: dict) -> Any:
    """The reference's answer to a vector; every method of the vectors is covered."""
    params = vector["params"]
    view = [
        (node["name"], NodeStats(float(node["cpu"]), node["maxcpu"], node["mem"], node["maxmem"]))
        for node in params["usage"]["nodes"]
    ]
    if vector["method"] == "calculate_node_imbalance":
        return ref.imbalance(view, params["imbalance"])
    if vector["method"] == "score_nodes_to_start_resource":
        return [[name, score] for name, score in ref.start_scores(view, reference_stats(params["stats"]))]
    assert vector["method"] == "score_best_balancing_migrations", vector["method"]
    candidates = [
        (Migration(c["sid"], c["source-node"], c["target-node"]), reference_stats(c["stats"]))
        for c in params["candidates"]
    ]
    score = {"bruteforce": ref.bruteforce, "topsis": ref.topsis}[params["method"]]
    scored = score(view, candidates, params["limit"], params["imbalance"])
    return [{"migration": migration_wire(migration), "imbalance": value} for migration, value in scored]


@pytest.mark.parametrize("file", VECTORS)
def test_the_reference_answers_every_vector_as_upstream(file):
    vectors = VECTORS[file]
    wrong = mismatches(vectors, map(reference_answer, vectors))
    assert not wrong, f"{len(wrong)} of {len(vectors)} not upstream's:\n" + "\n".join(wrong[:5])


# -- the bruteforce filter on the vectors' clusters -----------------------------------------------


@pytest.mark.parametrize("formula", ["raw", "normalized"])
def test_the_bruteforce_bounds_hold_on_every_vectors_what_if(formula):
    """The O(1) bounds that filter bruteforce candidates contain the exact imbalance of every
    what-if of the vectors' clusters (extreme scales included), so the filter never drops a
    candidate that the exact values would rank."""
    checked = 0
    for vector in (v for file in VECTORS.values() for v in file):
        params = vector["params"]
        if vector["method"] != "score_best_balancing_migrations" or not params["candidates"]:
            continue
        view = vector_scheduler(params, formula).view()
        candidates = [
            MigrationCandidate(Migration(c["sid"], c["source-node"], c["target-node"]), engine_stats(c["stats"]))
            for c in params["candidates"]
        ]
        batch = batch_from_columns(view, CandidateColumns.of(candidates))
        moved = what_if(batch)
        lo, hi = imbalance_bounds(view.loads(), batch.src, moved.load_src, batch.tgt, moved.load_tgt, formula)
        loads = view.loads().tolist()
        for row, (a, new_a, b, new_b) in enumerate(
            zip(batch.src.tolist(), moved.load_src.tolist(), batch.tgt.tolist(), moved.load_tgt.tolist())
        ):
            changed = list(loads)
            changed[a], changed[b] = new_a, new_b
            exact = node_imbalance(changed, formula)
            assert lo[row] <= exact <= hi[row], (vector["id"], row, lo[row], exact, hi[row])
            checked += 1
    assert checked > 10000  # the test checked something
