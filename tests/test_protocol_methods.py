"""Every JSON-RPC method against the real server process: answers, params forms, error codes.

Expected numbers come from the specification (reference-figures.md), never from the code under
test; other checks compare two independent paths through the server (a snapshot vs the same
cluster built call by call). Every result is also validated against the result schema that
``rpc.discover`` publishes for its method.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crs_bridge.client import BridgeClient, RpcError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GiB = 1024**3
MiB = 1024**2


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient() as client:
        yield client


def rpc_error(bridge, method, params=None) -> RpcError:
    with pytest.raises(RpcError) as caught:
        bridge.call(method, params)
    return caught.value


# -- the reference cluster of reference-figures.md 8.1 (homogeneous) ------------------------

REF_NODES = [
    {"name": "node1", "cpu": 1.7, "maxcpu": 16, "mem": 12334 * MiB, "maxmem": 64 * GiB},
    {"name": "node2", "cpu": 15.184, "maxcpu": 16, "mem": 529 * MiB, "maxmem": 64 * GiB},
    {"name": "node3", "cpu": 5.2, "maxcpu": 16, "mem": 9381 * MiB, "maxmem": 64 * GiB},
]
REF_STATS = {"cpu": 0.7, "maxcpu": 4.0, "mem": 8 * GiB, "maxmem": 16 * GiB}
REF_USAGE = {
    "mode": "dynamic",
    "nodes": REF_NODES,
    "resources": [{"sid": "vm:101", "stats": REF_STATS, "running": True, "current-node": "node1"}],
}
REF_CANDIDATES = [{"leader": "vm:101", "nodes": ["node2", "node3"], "resources": ["vm:101"]}]


def targets(scored):
    return [s["migration"]["target-node"] for s in scored]


def by_score(pairs):
    """Node names best first (score descending, then name), as the HA manager orders them."""
    return [name for name, score in sorted(pairs, key=lambda p: (-p[1], p[0]))]


def load(bridge, usage, imbalance="normalized"):
    """Build ``usage`` into a new scheduler, call by call; return the handle."""
    static = usage["mode"] == "static"
    handle = bridge.call("scheduler.new", {"mode": usage["mode"], "imbalance": imbalance})["scheduler"]
    for node in usage["nodes"]:
        if static:
            bridge.call("scheduler.add_node", [handle, node["name"], node["maxcpu"], node["maxmem"]])
        else:
            stats = {k: node[k] for k in ("cpu", "maxcpu", "mem", "maxmem")}
            bridge.call("scheduler.add_node", [handle, node["name"], stats])
    for res in usage["resources"]:
        record = {k: v for k, v in res.items() if k != "sid"}
        bridge.call("scheduler.add_service" if static else "scheduler.add_resource", [handle, res["sid"], record])
    return handle


def test_reference_imbalance_both_formulas(rpc):
    assert rpc("calculate_node_imbalance", {"usage": REF_USAGE}) == 0.4893954724628247  # raw by default
    assert rpc("calculate_node_imbalance", {"usage": REF_USAGE, "imbalance": "normalized"}) == 0.3460548572604576


def test_reference_bruteforce_and_topsis_order(rpc):
    params = {"usage": REF_USAGE, "candidates": REF_CANDIDATES, "limit": 5, "imbalance": "normalized"}
    brute = rpc("score_best_balancing_migrations", params)
    assert targets(brute) == ["node3", "node2"]
    assert [s["imbalance"] for s in brute] == [0.422346017431863, 0.511933196160907]
    assert targets(rpc("score_best_balancing_migrations", {**params, "method": "topsis"})) == ["node2", "node3"]
    assert brute[0]["migration"] == {"sid": "vm:101", "source-node": "node1", "target-node": "node3"}


@pytest.mark.parametrize(
    ("stats", "order"),
    [
        ({"cpu": 0.0, "maxcpu": 1.0, "mem": 0, "maxmem": 12 * GiB}, ["node2", "node3", "node1"]),
        ({"cpu": 0.0, "maxcpu": 12.0, "mem": 0, "maxmem": 0}, ["node1", "node3", "node2"]),
        ({"cpu": 0.0, "maxcpu": 0.0, "mem": 0, "maxmem": 0}, ["node1", "node3", "node2"]),
        ({"cpu": 0.0, "maxcpu": 12.0, "mem": 0, "maxmem": 12 * GiB}, ["node2", "node3", "node1"]),
    ],
)
def test_reference_start_scoring(rpc, stats, order):
    scores = rpc("score_nodes_to_start_resource", {"usage": REF_USAGE, "stats": stats})
    assert [name for name, _ in scores] == ["node1", "node2", "node3"]  # node order
    assert by_score(scores) == order


def test_static_legacy_balance_figure(rpc, bridge):
    """reference-figures.md 8.2 test_balance: A(10 cores), B(20 cores); the best node is A
    when i % 3 == 2, else B; each round places the service there with the legacy add."""
    handle = rpc("scheduler.new", ["static"])["scheduler"]
    rpc("scheduler.add_node", [handle, "A", 10, 100_000_000_000])
    rpc("scheduler.add_node", [handle, "B", 20, 200_000_000_000])
    service = {"maxcpu": 4.0, "maxmem": 20_000_000_000}
    for i in range(15):
        best = by_score(rpc("scheduler.score_nodes_to_start_service", [handle, service]))[0]
        assert best == ("A" if i % 3 == 2 else "B"), i
        assert rpc("scheduler.add_service_usage_to_node", [handle, best, f"vm:{i}", service]) is None
    rpc("scheduler.free", [handle])


@pytest.mark.parametrize("example", ["static-cluster.json", "dynamic-cluster.json"])
@pytest.mark.parametrize("formula", ["normalized", "raw"])
def test_stateless_and_stateful_answers_agree(rpc, bridge, example, formula):
    params = json.loads((EXAMPLES / example).read_text())
    usage, candidates = params["usage"], params["candidates"]
    handle = load(bridge, usage, formula)
    snapshot = {"usage": usage, "imbalance": formula}
    live = {"scheduler": handle}

    imbalance = rpc("calculate_node_imbalance", snapshot)
    assert rpc("calculate_node_imbalance", live) == imbalance
    assert rpc("scheduler.calculate_node_imbalance", [handle]) == imbalance

    for method, binding in [("bruteforce", ""), ("topsis", "_topsis")]:
        scored = rpc(
            "score_best_balancing_migrations", {**snapshot, "candidates": candidates, "limit": 50, "method": method}
        )
        assert len(scored) == sum(len(c["nodes"]) for c in candidates)
        assert (
            rpc("score_best_balancing_migrations", {**live, "candidates": candidates, "limit": 50, "method": method})
            == scored
        )
        assert rpc(f"scheduler.score_best_balancing_migration_candidates{binding}", [handle, candidates, 50]) == scored
        best = rpc("select_best_balancing_migration", {**snapshot, "candidates": candidates, "method": method})
        assert best == scored[0]
        assert rpc(f"scheduler.select_best_balancing_migration{binding}", [handle, candidates]) == best

    start = (
        {"maxcpu": 2.0, "maxmem": 4 * GiB}
        if usage["mode"] == "static"
        else {"cpu": 1.0, "maxcpu": 2.0, "mem": GiB, "maxmem": 4 * GiB}
    )
    scores = rpc("score_nodes_to_start_resource", {"usage": usage, "stats": start})
    assert rpc("score_nodes_to_start_resource", {"scheduler": handle, "stats": start}) == scores
    binding = (
        "scheduler.score_nodes_to_start_service"
        if usage["mode"] == "static"
        else "scheduler.score_nodes_to_start_resource"
    )
    assert rpc(binding, [handle, start]) == scores
    assert rpc("scheduler.free", {"scheduler": handle}) is True


def test_per_call_formula_overrides_a_schedulers_own_without_changing_it(rpc, bridge):
    handle = load(bridge, REF_USAGE, "raw")
    assert rpc("calculate_node_imbalance", {"scheduler": handle, "imbalance": "normalized"}) == 0.3460548572604576
    assert rpc("scheduler.calculate_node_imbalance", [handle]) == 0.4893954724628247


def test_select_threshold_takes_first_candidate_in_input_order(rpc):
    params = {"usage": REF_USAGE, "candidates": REF_CANDIDATES, "imbalance": "normalized"}
    # ->node2 (0.5119...) comes first in input order and is under a threshold of 0.6.
    assert targets([rpc("select_best_balancing_migration", {**params, "imbalance_threshold": 0.6})]) == ["node2"]
    # Nothing at or under 0.1: the best (->node3).
    assert targets([rpc("select_best_balancing_migration", {**params, "imbalance_threshold": 0.1})]) == ["node3"]
    assert rpc("select_best_balancing_migration", {**params, "candidates": []}) is None


def test_limit_truncates_and_huge_limit_returns_all(rpc):
    params = {"usage": REF_USAGE, "candidates": REF_CANDIDATES}
    assert len(rpc("score_best_balancing_migrations", {**params, "limit": 1})) == 1
    assert rpc("score_best_balancing_migrations", {**params, "limit": 0}) == []
    assert len(rpc("score_best_balancing_migrations", {**params, "limit": 2**63 - 1})) == 2


def test_limit_beyond_64_bits_allocates_nothing(bridge):
    message = bridge.message(
        "score_best_balancing_migrations", {"usage": REF_USAGE, "candidates": REF_CANDIDATES, "limit": 10**30}, 1
    )
    bridge.send_raw(json.dumps(message).encode())  # orjson cannot write such an integer; json can
    assert len(bridge.read()["result"]) == 2


def test_expanded_candidates_score_like_compact_ones(rpc):
    expanded = [
        {"sid": "vm:101", "source-node": "node1", "target-node": t, "stats": REF_STATS} for t in ("node2", "node3")
    ]
    compact = rpc("score_best_balancing_migrations", {"usage": REF_USAGE, "candidates": REF_CANDIDATES, "limit": 5})
    assert rpc("score_best_balancing_migrations", {"usage": REF_USAGE, "candidates": expanded, "limit": 5}) == compact


def test_node_lifecycle_methods(rpc):
    handle = rpc("scheduler.new", {"mode": "dynamic", "imbalance": "raw"})["scheduler"]
    for node in REF_NODES:
        stats = {k: node[k] for k in ("cpu", "maxcpu", "mem", "maxmem")}
        assert rpc("scheduler.add_node", {"scheduler": handle, "nodename": node["name"], "stats": stats}) is None
    assert rpc("scheduler.list_nodes", [handle]) == ["node1", "node2", "node3"]
    assert rpc("scheduler.contains_node", [handle, "node2"]) is True
    assert rpc("scheduler.remove_node", [handle, "node2"]) is None
    assert rpc("scheduler.remove_node", [handle, "no-such-node"]) is None
    assert rpc("scheduler.contains_node", {"scheduler": handle, "nodename": "node2"}) is False
    assert rpc("scheduler.list_nodes", {"scheduler": handle}) == ["node1", "node3"]


def test_resource_methods_change_start_scores(rpc):
    """A starting resource loads its node in dynamic start scoring; removing it unloads it."""
    handle = rpc("scheduler.new", ["dynamic"])["scheduler"]
    for node in REF_NODES:
        rpc("scheduler.add_node", [handle, node["name"], {k: node[k] for k in ("cpu", "maxcpu", "mem", "maxmem")}])
    stats = {"cpu": 0.0, "maxcpu": 1.0, "mem": 0, "maxmem": 12 * GiB}
    before = rpc("scheduler.score_nodes_to_start_resource", [handle, stats])
    starting = {
        "stats": {"cpu": 0.0, "maxcpu": 8.0, "mem": 0, "maxmem": 48 * GiB},
        "running": False,
        "current-node": "node2",
    }
    assert rpc("scheduler.add_resource", [handle, "vm:200", starting]) is None
    after = rpc("scheduler.score_nodes_to_start_resource", [handle, stats])
    assert by_score(before)[0] == "node2" and by_score(after)[0] != "node2"
    assert rpc("scheduler.remove_resource", [handle, "vm:200"]) is None
    assert rpc("scheduler.score_nodes_to_start_resource", [handle, stats]) == before


def test_static_service_methods(rpc):
    handle = rpc("scheduler.new", {"mode": "static"})["scheduler"]
    rpc("scheduler.add_node", [handle, "A", 8, 64 * GiB])
    rpc("scheduler.add_node", [handle, "B", 8, 64 * GiB])
    empty = rpc("scheduler.calculate_node_imbalance", [handle])
    service = {"stats": {"maxcpu": 4.0, "maxmem": 8 * GiB}, "running": True, "current-node": "A"}
    assert rpc("scheduler.add_service", [handle, "vm:1", service]) is None
    assert rpc("scheduler.calculate_node_imbalance", [handle]) > empty
    assert rpc("scheduler.remove_service_usage", [handle, "vm:1"]) is None
    assert rpc("scheduler.calculate_node_imbalance", [handle]) == empty


def test_running_accepts_perl_style_numbers_and_null(rpc):
    handle = rpc("scheduler.new", {"mode": "dynamic"})["scheduler"]
    rpc("scheduler.add_node", [handle, "n1", {"cpu": 0.0, "maxcpu": 4, "mem": 0, "maxmem": 8 * GiB}])
    for i, running in enumerate([1, 0, None, 2.5]):
        record = {"stats": REF_STATS, "running": running, "current-node": "n1"}
        assert rpc("scheduler.add_resource", [handle, f"vm:{i}", record]) is None


def test_integral_floats_count_as_integers(rpc):
    handle = rpc("scheduler.new", {"mode": "static"})["scheduler"]
    assert rpc("scheduler.add_node", [handle, "n1", 8.0, float(2**40)]) is None
    service = {"stats": {"maxcpu": 2, "maxmem": 2.0**33}, "running": True, "current-node": "n1"}
    assert rpc("scheduler.add_service", [handle, "vm:1", service]) is None


# -- errors -------------------------------------------------------------------------------


def test_scheduling_error_carries_upstreams_text(bridge):
    handle = load(bridge, REF_USAGE)
    err = rpc_error(bridge, "scheduler.add_node", [handle, "node1", {"cpu": 0.0, "maxcpu": 4, "mem": 0, "maxmem": GiB}])
    assert (err.code, err.message) == (-32000, "node 'node1' already exists")
    bad = [{"leader": "vm:999", "nodes": ["node2"], "resources": ["vm:999"]}]
    err = rpc_error(bridge, "score_best_balancing_migrations", {"scheduler": handle, "candidates": bad, "limit": 1})
    assert (err.code, err.message) == (-32000, "leader 'vm:999' is not present in the cluster usage")


def test_unknown_and_freed_handles_are_named(bridge):
    err = rpc_error(bridge, "scheduler.list_nodes", ["s999999"])
    assert err.code == -32001 and "s999999" in err.message
    handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    assert bridge.call("scheduler.free", [handle]) is True
    for method, params in [("scheduler.free", [handle]), ("calculate_node_imbalance", {"scheduler": handle})]:
        err = rpc_error(bridge, method, params)
        assert err.code == -32001 and handle in err.message


def test_method_of_the_other_mode_is_not_found(bridge):
    handle = bridge.call("scheduler.new", {"mode": "dynamic"})["scheduler"]
    err = rpc_error(bridge, "scheduler.add_service", [handle, "vm:1", {}])
    assert err.code == -32601
    assert "scheduler.add_service" in err.message and "dynamic" in err.message


def locs(err: RpcError) -> list[str]:
    assert err.code == -32602
    entries = err.data["errors"]
    assert all(e["loc"] in err.message and e["msg"] for e in entries)
    return [e["loc"] for e in entries]


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        (
            {"usage": {**REF_USAGE, "nodes": [{**REF_NODES[0], "maxcpu": 0}]}, "limit": 1, "candidates": []},
            "usage.nodes[0].maxcpu",
        ),
        (
            {"usage": {**REF_USAGE, "nodes": [{**REF_NODES[0], "mem": "12"}]}, "limit": 1, "candidates": []},
            "usage.nodes[0].mem",
        ),
        ({"usage": REF_USAGE, "candidates": REF_CANDIDATES}, "limit"),
        ({"usage": REF_USAGE, "candidates": REF_CANDIDATES, "limit": -1}, "limit"),
        ({"usage": REF_USAGE, "candidates": REF_CANDIDATES, "limt": 1, "limit": 1}, "limt"),
        ({"usage": REF_USAGE, "candidates": REF_CANDIDATES, "limit": 1, "method": "best"}, "method"),
        (
            {"usage": REF_USAGE, "candidates": [{"leader": "vm:101", "nodes": ["node2"]}], "limit": 1},
            "candidates[0].resources",
        ),
        (
            {"usage": {**REF_USAGE, "nodes": REF_NODES + REF_NODES[:1]}, "candidates": [], "limit": 1},
            "usage.nodes[3].name",
        ),
        (
            {"usage": REF_USAGE, "candidates": [{**REF_CANDIDATES[0], "nodes": ["node9"]}], "limit": 1},
            "candidates[0].nodes[0]",
        ),
        ({"usage": REF_USAGE, "scheduler": "s1", "candidates": [], "limit": 1}, "params"),
        ({"candidates": [], "limit": 1}, "params"),
    ],
)
def test_invalid_params_name_the_field(bridge, params, loc):
    assert loc in locs(rpc_error(bridge, "score_best_balancing_migrations", params))


def test_invalid_params_forms(bridge):
    handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    assert locs(rpc_error(bridge, "scheduler.add_node", [handle, "n", 4, 2**30, "extra"])) == ["params"]
    assert locs(rpc_error(bridge, "calculate_node_imbalance", [REF_USAGE])) == ["params"]
    assert locs(rpc_error(bridge, "scheduler.add_node", {"nodename": "n"})) == ["scheduler"]
    assert set(locs(rpc_error(bridge, "scheduler.add_node", [handle, "", 1.5, -1]))) == {"nodename", "maxcpu", "maxmem"}
    err = rpc_error(
        bridge,
        "select_best_balancing_migration",
        {"usage": REF_USAGE, "candidates": REF_CANDIDATES, "method": "topsis", "imbalance_threshold": 0.5},
    )
    assert locs(err) == ["imbalance_threshold"]


def test_many_invalid_entries_are_capped(bridge):
    candidates = [{"leader": 1, "nodes": [], "resources": []}] * 100
    err = rpc_error(
        bridge, "score_best_balancing_migrations", {"usage": REF_USAGE, "candidates": candidates, "limit": 1}
    )
    assert err.code == -32602 and len(err.data["errors"]) == 20 and err.data["omitted"] == 80


def test_failed_calls_change_no_state(bridge):
    handle = load(bridge, REF_USAGE)
    state = lambda: (  # noqa: E731
        bridge.call("scheduler.list_nodes", [handle]),
        bridge.call("scheduler.calculate_node_imbalance", [handle]),
        bridge.call("scheduler.score_nodes_to_start_resource", [handle, REF_STATS]),
    )
    before = state()
    count = bridge.call("bridge.info")["schedulers"]
    failing = [
        ("scheduler.add_node", [handle, "node4", {"cpu": 0.0, "maxcpu": 0, "mem": 0, "maxmem": GiB}]),
        ("scheduler.add_resource", [handle, "vm:101", {"stats": REF_STATS, "running": True, "current-node": "node1"}]),
        ("scheduler.add_resource", [handle, "vm:102", {"stats": REF_STATS, "running": True, "current-node": "node9"}]),
        (
            "scheduler.add_resource",
            [handle, "vm:103", {"stats": REF_STATS, "running": True, "current-node": "node1", "target-node": "node1"}],
        ),
        ("scheduler.score_best_balancing_migration_candidates", [handle, [{**REF_CANDIDATES[0], "leader": "vm:7"}], 1]),
        ("scheduler.new", {"mode": "hybrid"}),
        ("calculate_node_imbalance", {"usage": {**REF_USAGE, "resources": REF_USAGE["resources"] * 2}}),
    ]
    for method, params in failing:
        with pytest.raises(RpcError):
            bridge.call(method, params)
    assert state() == before
    assert bridge.call("bridge.info")["schedulers"] == count


def test_shutdown_and_info_take_no_params(bridge):
    assert locs(rpc_error(bridge, "bridge.info", {"verbose": True})) == ["verbose"]


def test_a_separate_server_shuts_down_on_request():
    with BridgeClient() as client:
        assert client.call("shutdown") is None
        assert client.process.wait(10) == 0
