"""``plan_rebalance``, ``scheduler.plan_rebalance`` and ``explain_migrations`` against the real
server process.

Nothing here trusts the planner's own numbers: every step is re-derived through the single-move
methods (``select_best_balancing_migration``, ``calculate_node_imbalance``) on a cluster the test
moves by hand, and explanations are compared with ``score_best_balancing_migrations``. Every
result is validated against the schema ``rpc.discover`` publishes for its method.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from crs_bridge.client import BridgeClient, RpcError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
METHODS = ["bruteforce", "topsis"]


def example(name: str) -> tuple[dict, list]:
    params = json.loads((EXAMPLES / name).read_text())
    return params["usage"], params["candidates"]


#: Dynamic, one node far above the others: several moves, one of them a two-guest bundle.
USAGE, CANDIDATES = example("unbalanced-cluster.json")
STATIC_USAGE, STATIC_CANDIDATES = example("static-cluster.json")


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient() as client:
        yield client


def rpc_error(bridge, method, params) -> RpcError:
    with pytest.raises(RpcError) as caught:
        bridge.call(method, params)
    return caught.value


# -- moving a snapshot by hand -----------------------------------------------------------------


def moved(usage: dict, step: dict) -> dict:
    """``usage`` after ``step``, built as a cluster would look once the move is done.

    Dynamic: the measured node stats shift by the bundle's summed cpu/mem (source clamped at 0,
    the what-if's assumption). Static: the services change node; they go to the end of the list,
    which is where a remove + add puts them. Only the placement and node stats change.
    """
    usage = copy.deepcopy(usage)
    moving = [r for sid in step["resources"] for r in usage["resources"] if r["sid"] == sid]
    assert {r["current-node"] for r in moving} == {step["source-node"]}
    for r in moving:
        r["current-node"] = step["target-node"]
    if usage["mode"] == "dynamic":
        cpu, mem = 0.0, 0
        for r in moving:
            cpu, mem = cpu + r["stats"]["cpu"], mem + r["stats"]["mem"]
        nodes = {n["name"]: n for n in usage["nodes"]}
        source, target = nodes[step["source-node"]], nodes[step["target-node"]]
        source["cpu"], source["mem"] = max(0.0, source["cpu"] - cpu), max(0, source["mem"] - mem)
        target["cpu"], target["mem"] = target["cpu"] + cpu, target["mem"] + mem
    else:
        usage["resources"] = [r for r in usage["resources"] if r not in moving] + moving
    return usage


def unmoved(candidates: list, step: dict) -> list:
    """The bundles that may still move (no repeats): those sharing no resource with the step."""
    return [c for c in candidates if not set(c["resources"]) & set(step["resources"])]


def loads(usage_nodes: list) -> list:
    """Dynamic node loads, computed here from the snapshot: name, cpu/maxcpu, mem/maxmem, mean."""
    out = []
    for n in usage_nodes:
        cpu, mem = n["cpu"] / n["maxcpu"], n["mem"] / n["maxmem"]
        out += [n["name"], pytest.approx(cpu, rel=1e-12), pytest.approx(mem, rel=1e-12), pytest.approx((cpu + mem) / 2)]
    return out


def wire_loads(cluster_load: dict) -> list:
    return [value for n in cluster_load["nodes"] for value in (n["node"], n["cpu-load"], n["mem-load"], n["load"])]


# -- plan_rebalance -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_plan_step_one_is_what_select_best_balancing_migration_picks(rpc, method):
    params = {"usage": USAGE, "candidates": CANDIDATES, "method": method}
    plan = rpc("plan_rebalance", params)
    chosen = rpc("select_best_balancing_migration", params)
    first = plan["steps"][0]
    assert {k: first[k] for k in ("sid", "source-node", "target-node")} == chosen["migration"]
    assert first["expected-imbalance"] == chosen["imbalance"]
    assert first["imbalance-before"] == plan["before"]["imbalance"] == rpc("calculate_node_imbalance", {"usage": USAGE})


@pytest.mark.parametrize(
    ("usage", "candidates", "options"),
    [
        pytest.param(USAGE, CANDIDATES, {"method": "bruteforce"}, id="dynamic-bruteforce"),
        pytest.param(USAGE, CANDIDATES, {"method": "topsis"}, id="dynamic-topsis"),
        pytest.param(STATIC_USAGE, STATIC_CANDIDATES, {"threshold": 0, "margin": 0}, id="static-to-the-end"),
    ],
)
def test_every_step_is_one_ha_round_on_the_cluster_moved_so_far(rpc, usage, candidates, options):
    """Replays the plan round by round with the single-move methods: each step is what one HA
    round would choose on the cluster as the earlier steps left it, and the numbers agree."""
    plan = rpc("plan_rebalance", {"usage": usage, "candidates": candidates, **options})
    method = options.get("method", "bruteforce")
    threshold = options.get("threshold", 0.3)
    assert len(plan["steps"]) >= 2
    for step in plan["steps"]:
        before = rpc("calculate_node_imbalance", {"usage": usage})
        assert step["imbalance-before"] == before
        assert before > threshold
        chosen = rpc("select_best_balancing_migration", {"usage": usage, "candidates": candidates, "method": method})
        assert chosen["migration"] == {k: step[k] for k in ("sid", "source-node", "target-node")}
        assert chosen["imbalance"] == step["expected-imbalance"]
        usage, candidates = moved(usage, step), unmoved(candidates, step)
        assert rpc("calculate_node_imbalance", {"usage": usage}) == step["imbalance-after"] < before
    assert plan["after"]["imbalance"] == plan["steps"][-1]["imbalance-after"]
    if usage["mode"] == "dynamic":
        assert wire_loads(plan["after"]) == loads(usage["nodes"])


def test_dynamic_plan_stops_at_the_threshold(rpc):
    plan = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES})
    assert plan["threshold"] == 0.3 and plan["margin"] == 0.1 and plan["max-steps"] == 10  # HA 5.2 defaults
    assert plan["stop-reason"] == "threshold-reached"
    assert plan["after"]["imbalance"] <= 0.3 < plan["steps"][-1]["imbalance-before"]
    assert [s["resources"] for s in plan["steps"] if s["sid"] == "vm:102"] == [["vm:102", "vm:103"]]


def test_nothing_moves_at_or_under_the_threshold(rpc):
    imbalance = rpc("calculate_node_imbalance", {"usage": USAGE})
    at = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "threshold": imbalance})
    assert at["steps"] == [] and at["stop-reason"] == "threshold-reached"
    assert at["after"] == at["before"]
    under = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "threshold": imbalance * 0.999})
    assert len(under["steps"]) == 1  # the first move goes far below


@pytest.mark.parametrize(("max_steps", "count"), [(0, 0), (1, 1)])
def test_step_limit(rpc, max_steps, count):
    plan = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "max_steps": max_steps})
    assert len(plan["steps"]) == count
    assert plan["stop-reason"] == "max-steps"


def test_margin_stops_a_move_that_gains_too_little(rpc):
    chosen = rpc("select_best_balancing_migration", {"usage": USAGE, "candidates": CANDIDATES})
    imbalance = rpc("calculate_node_imbalance", {"usage": USAGE})
    gain = (imbalance - chosen["imbalance"]) / imbalance
    plan = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "margin": gain * 1.001})
    assert plan["steps"] == [] and plan["stop-reason"] == "margin-not-reached"
    plan = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "margin": gain * 0.999, "max_steps": 1})
    assert len(plan["steps"]) == 1


def test_allow_repeat_and_no_candidates(rpc):
    # Only vm:100 may move: without repeats the plan ends after it, with them it may go on.
    only = [c for c in CANDIDATES if c["leader"] == "vm:100"]
    once = rpc("plan_rebalance", {"usage": USAGE, "candidates": only, "threshold": 0, "margin": 0})
    assert [s["sid"] for s in once["steps"]] == ["vm:100"] and once["stop-reason"] == "no-candidates"
    again = rpc(
        "plan_rebalance", {"usage": USAGE, "candidates": only, "threshold": 0, "margin": 0, "allow_repeat": True}
    )
    assert again["allow-repeat"] is True
    assert again["steps"][0] == once["steps"][0]
    assert again["stop-reason"] != "no-candidates"  # the bundle still has a target it is not on
    empty = rpc("plan_rebalance", {"usage": USAGE, "candidates": []})
    assert empty["steps"] == [] and empty["stop-reason"] == "no-candidates"


def dynamic_handle(bridge, formula="raw") -> str:
    """A live scheduler holding USAGE, built call by call."""
    handle = bridge.call("scheduler.new", {"mode": "dynamic", "imbalance": formula})["scheduler"]
    for n in USAGE["nodes"]:
        stats = {k: n[k] for k in ("cpu", "maxcpu", "mem", "maxmem")}
        bridge.call("scheduler.add_node", [handle, n["name"], stats])
    for r in USAGE["resources"]:
        bridge.call("scheduler.add_resource", [handle, r["sid"], {k: v for k, v in r.items() if k != "sid"}])
    return handle


def test_scheduler_plan_rebalance_named_and_positional_leave_the_scheduler_unchanged(bridge, rpc):
    handle = dynamic_handle(bridge)
    imbalance = bridge.call("scheduler.calculate_node_imbalance", [handle])
    expected = rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "method": "topsis", "max_steps": 2})
    named = rpc(
        "scheduler.plan_rebalance",
        {"scheduler": handle, "candidates": CANDIDATES, "method": "topsis", "max_steps": 2},
    )
    positional = rpc("scheduler.plan_rebalance", [handle, CANDIDATES, "topsis", 0.3, 0.1, 2, False])
    on_handle = rpc(
        "plan_rebalance", {"scheduler": handle, "candidates": CANDIDATES, "method": "topsis", "max_steps": 2}
    )
    assert named == positional == on_handle == expected
    assert bridge.call("scheduler.calculate_node_imbalance", [handle]) == imbalance
    bridge.call("scheduler.free", [handle])


def test_imbalance_formula_on_a_handle_does_not_change_the_handle(bridge, rpc):
    handle = dynamic_handle(bridge, "normalized")
    raw = rpc("plan_rebalance", {"scheduler": handle, "candidates": CANDIDATES, "imbalance": "raw"})
    assert raw == rpc("plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, "imbalance": "raw"})
    assert raw["imbalance-formula"] == "raw"
    assert raw["before"]["imbalance"] == rpc("calculate_node_imbalance", {"usage": USAGE, "imbalance": "raw"})
    normalized = rpc("calculate_node_imbalance", {"usage": USAGE, "imbalance": "normalized"})
    assert bridge.call("scheduler.calculate_node_imbalance", [handle]) == normalized != raw["before"]["imbalance"]
    bridge.call("scheduler.free", [handle])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"threshold": -0.1}, "threshold"),
        ({"margin": "0.1"}, "margin"),
        ({"max_steps": -1}, "max_steps"),
        ({"max_steps": 1.5}, "max_steps"),
        ({"method": "greedy"}, "method"),
        ({"allow_repeat": "yes"}, "allow_repeat"),
        ({"treshold": 0.2}, "treshold"),
        ({"imbalance": "cv"}, "imbalance"),
        ({"candidates": [{"leader": "vm:100", "nodes": ["pve2"]}]}, "candidates[0].resources"),
    ],
)
def test_invalid_params_name_the_field(bridge, change, field):
    err = rpc_error(bridge, "plan_rebalance", {"usage": USAGE, "candidates": CANDIDATES, **change})
    assert err.code == -32602
    assert [e["loc"] for e in err.data["errors"]] == [field]
    assert field in err.message


def test_planner_refuses_expanded_candidates_and_missing_ones(bridge):
    expanded = [
        {"sid": "vm:100", "source-node": "pve1", "target-node": "pve2", "stats": USAGE["resources"][0]["stats"]}
    ]
    err = rpc_error(bridge, "plan_rebalance", {"usage": USAGE, "candidates": expanded})
    assert err.code == -32602 and "candidates[0].leader" in err.message
    err = rpc_error(bridge, "plan_rebalance", {"usage": USAGE})
    assert err.code == -32602 and [e["loc"] for e in err.data["errors"]] == ["candidates"]


def test_scheduling_errors_and_handles(bridge):
    unknown = [{"leader": "vm:999", "nodes": ["pve2"], "resources": ["vm:999"]}]
    err = rpc_error(bridge, "plan_rebalance", {"usage": USAGE, "candidates": unknown})
    assert (err.code, err.message) == (-32000, "leader 'vm:999' is not present in the cluster usage")
    err = rpc_error(bridge, "scheduler.plan_rebalance", ["s999", CANDIDATES])
    assert err.code == -32001 and "s999" in err.message
    handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    err = rpc_error(bridge, "scheduler.plan_rebalance", [handle, [], "bruteforce", 0.3, 0.1, 1, False, "extra"])
    assert err.code == -32602 and "too many params" in err.message
    bridge.call("scheduler.free", [handle])


def test_topsis_moves_the_bundle_it_ranked_first_of_two_with_the_same_migration(rpc):
    """vm:1 leads two bundles to b (with vm:4, with vm:3): one migration, one truncated imbalance,
    two rows. Explain shows the rows by descending TOPSIS score, and the plan moves the bundle of
    the first one; the same cluster with only that bundle gives the same step."""
    gib = 1024**3
    nodes = [("a", 6.0, 8), ("b", 1.0, 8), ("c", 1.0, 20)]
    vms = [("vm:1", 0.0, 1, 0, 1), ("vm:3", 2.0, 4, 0, 8), ("vm:4", 0.0, 4, 8, 8), ("vm:2", 1.0, 4, 0, 8)]
    usage = {
        "mode": "dynamic",
        "nodes": [{"name": n, "maxcpu": 8, "maxmem": 32 * gib, "cpu": cpu, "mem": mem * gib} for n, cpu, mem in nodes],
        "resources": [
            {"sid": sid, "stats": {"cpu": cpu, "maxcpu": maxcpu, "mem": mem * gib, "maxmem": maxmem * gib}}
            | {"running": True, "current-node": "a"}
            for sid, cpu, maxcpu, mem, maxmem in vms
        ],
    }
    bundles = [
        {"leader": "vm:1", "resources": ["vm:1", "vm:4"], "nodes": ["b"]},
        {"leader": "vm:1", "resources": ["vm:1", "vm:3"], "nodes": ["b"]},
        {"leader": "vm:2", "resources": ["vm:2"], "nodes": ["c"]},
    ]
    cluster = {"usage": usage, "candidates": bundles, "method": "topsis"}
    explanation = rpc("explain_migrations", {**cluster, "limit": 2})
    shown = [*explanation["chosen"], explanation["runner-up"]]
    scores = [d["topsis"]["score"] for d in shown]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1]
    assert [d["candidate-index"] for d in shown] == [1, 2, 0]
    assert [scored(d) for d in shown] == rpc("score_best_balancing_migrations", {**cluster, "limit": 3})
    plan = rpc("plan_rebalance", {**cluster, "threshold": 0, "margin": 0, "max_steps": 1})
    assert [step["resources"] for step in plan["steps"]] == [["vm:1", "vm:3"]]
    alone = rpc("plan_rebalance", {**cluster, "candidates": bundles[1:2], "threshold": 0, "margin": 0, "max_steps": 1})
    assert plan["steps"] == alone["steps"]


# -- explain_migrations -------------------------------------------------------------------------


def scored(detail: dict) -> dict:
    return {"migration": detail["migration"], "imbalance": detail["imbalance"]}


@pytest.mark.parametrize("method", METHODS)
def test_explanation_agrees_with_score_best_balancing_migrations(rpc, method):
    cluster = {"usage": USAGE, "candidates": CANDIDATES, "method": method}
    explanation = rpc("explain_migrations", {**cluster, "limit": 3})
    best = rpc("score_best_balancing_migrations", {**cluster, "limit": 4})
    assert [scored(d) for d in explanation["chosen"]] == best[:3]
    assert scored(explanation["runner-up"]) == best[3]
    imbalance = rpc("calculate_node_imbalance", {"usage": USAGE})
    assert explanation["current"]["imbalance"] == imbalance
    assert explanation["candidate-count"] == sum(len(c["nodes"]) for c in CANDIDATES)
    assert explanation["relative-improvement"] == (imbalance - best[0]["imbalance"]) / imbalance
    lowest = rpc("score_best_balancing_migrations", {**cluster, "method": "bruteforce", "limit": 1})[0]
    assert explanation["best-imbalance"] == lowest["imbalance"]
    assert explanation["reason"] == "migrate"
    assert ("topsis" in explanation) == (method == "topsis")


def test_explanation_loads_are_the_snapshot_loads(rpc):
    explanation = rpc("explain_migrations", {"usage": USAGE, "candidates": CANDIDATES})
    assert wire_loads(explanation["current"]) == loads(USAGE["nodes"])
    source = explanation["chosen"][0]["source"]
    assert source["node"] == "pve1"
    assert source["after"]["load"] < source["before"]["load"] == explanation["current"]["nodes"][0]["load"]


def test_explanation_of_expanded_candidates_and_of_a_handle(bridge, rpc):
    r = USAGE["resources"][0]
    expanded = [
        {"sid": r["sid"], "source-node": r["current-node"], "target-node": t, "stats": r["stats"]}
        for t in ("pve2", "pve3")
    ]
    explanation = rpc("explain_migrations", {"usage": USAGE, "candidates": expanded})
    best = rpc("score_best_balancing_migrations", {"usage": USAGE, "candidates": expanded, "limit": 2})
    assert [scored(explanation["chosen"][0]), scored(explanation["runner-up"])] == best
    handle = dynamic_handle(bridge)
    assert rpc("explain_migrations", {"scheduler": handle, "candidates": expanded}) == explanation
    bridge.call("scheduler.free", [handle])


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"threshold": 1.5}, "threshold-reached"),  # raw: the imbalance is 1.01
        ({"margin": 0.9}, "margin-not-reached"),
        ({"candidates": []}, "no-candidates"),
        ({"threshold": 0.3, "margin": 0.1}, "migrate"),
    ],
)
def test_explanation_says_why_nothing_moves(rpc, options, reason):
    explanation = rpc("explain_migrations", {"usage": USAGE, "candidates": CANDIDATES, **options})
    assert explanation["reason"] == reason
    assert explanation["message"]
    if reason == "no-candidates":
        assert explanation["chosen"] == [] and explanation["runner-up"] is None
    else:
        assert explanation["chosen"]  # the numbers are there even when nothing moves


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"threshold": -1}, "threshold"),
        ({"margin": True}, "margin"),
        ({"explain": 1}, "explain"),
    ],
)
def test_explain_invalid_params_name_the_field(bridge, change, field):
    err = rpc_error(bridge, "explain_migrations", {"usage": USAGE, "candidates": CANDIDATES, **change})
    assert err.code == -32602
    assert [e["loc"] for e in err.data["errors"]] == [field]


def test_discover_lists_the_methods_with_their_params(bridge):
    methods = {m["name"]: m for m in bridge.call("rpc.discover")["methods"]}
    params = {name: [p["name"] for p in methods[name]["params"]] for name in methods}
    assert params["plan_rebalance"] == [
        "usage", "scheduler", "candidates", "method", "imbalance", "threshold", "margin", "max_steps", "allow_repeat"
    ]  # fmt: skip
    assert params["scheduler.plan_rebalance"] == [
        "scheduler", "candidates", "method", "threshold", "margin", "max_steps", "allow_repeat"
    ]  # fmt: skip
    assert params["explain_migrations"] == [
        "usage", "scheduler", "candidates", "limit", "method", "imbalance", "threshold", "margin"
    ]  # fmt: skip
    # The existing single-move methods keep their params and results.
    assert "explain" not in params["score_best_balancing_migrations"]
    assert "explain" not in params["select_best_balancing_migration"]


@pytest.mark.parametrize(
    ("method", "count"),
    [("explain_migrations", {"limit": 2**64}), ("plan_rebalance", {"max_steps": 2**64})],
)
def test_counts_beyond_64_bits_are_echoed_exactly(bridge, method, count):
    """Counts may be of any size; the answer echoes them as given (orjson alone cannot write them;
    2**64: a count that a JSON decoder reading big integers as floats keeps exact too)."""
    params = {"usage": USAGE, "candidates": CANDIDATES, **count}
    bridge.send_raw(json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode())
    answer = json.loads(bridge.read_raw()[1])  # the json module reads integers of any size
    wire = {"limit": "limit", "max_steps": "max-steps"}[next(iter(count))]
    assert answer["result"][wire] == 2**64
