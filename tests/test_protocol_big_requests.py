"""Big requests through the real server: expanded candidates scored as their bundles, a bad value
deep in a big list named, notifications, and the opt-in phase timing of ``serve --trace``."""

from __future__ import annotations

import random

import pytest

from crs_bridge.client import BridgeClient, RpcError

GiB = 1 << 30


def cluster(nodes: int, bundles: int, seed: int = 7) -> tuple[dict, list[dict], list[dict]]:
    """A dynamic usage, compact bundles on it, and the same candidates expanded (leader's sid,
    the bundle's summed stats, bundle then target order)."""
    rng = random.Random(seed)
    names = [f"node{i}" for i in range(nodes)]
    usage = {"mode": "dynamic", "resources": [], "nodes": []}
    for name in names:
        maxcpu, maxmem = rng.choice([8, 16, 64]), rng.choice([32, 128, 512]) * GiB
        usage["nodes"].append(
            {
                "name": name,
                "maxcpu": maxcpu,
                "maxmem": maxmem,
                "cpu": maxcpu * rng.random(),
                "mem": rng.randrange(maxmem),
            }
        )
    compact, expanded = [], []
    for b in range(bundles):
        node = rng.choice(names)
        members = [f"vm:{100 + 3 * b + k}" for k in range(rng.randint(1, 3))]
        total = {"cpu": 0.0, "maxcpu": 0.0, "mem": 0, "maxmem": 0}
        for sid in members:
            stats = {"cpu": rng.uniform(0.1, 4.0), "maxcpu": 4.0, "mem": rng.randrange(GiB, 8 * GiB), "maxmem": 8 * GiB}
            usage["resources"].append({"sid": sid, "stats": stats, "running": True, "current-node": node})
            total = {key: total[key] + stats[key] for key in total}
        targets = rng.sample([n for n in names if n != node], min(20, nodes - 1))
        compact.append({"leader": members[0], "nodes": targets, "resources": members})
        expanded += [{"sid": members[0], "source-node": node, "target-node": t, "stats": total} for t in targets]
    return usage, compact, expanded


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient() as client:
        yield client


@pytest.mark.parametrize("method", ["bruteforce", "topsis"])
def test_expanded_candidates_score_as_their_bundles(bridge, method):
    """The columnar path (expanded) and the expansion of bundles (compact) meet in the engine."""
    usage, compact, expanded = cluster(nodes=30, bundles=150)
    params = {"usage": usage, "limit": 25, "method": method}
    by_bundles = bridge.call("score_best_balancing_migrations", {**params, "candidates": compact})
    assert len(by_bundles) == 25
    assert bridge.call("score_best_balancing_migrations", {**params, "candidates": expanded}) == by_bundles


def test_a_bad_value_deep_in_a_big_request_is_named(bridge):
    usage, _, expanded = cluster(nodes=30, bundles=700)
    assert len(expanded) > 12_345
    expanded[12_345] = {**expanded[12_345], "stats": {**expanded[12_345]["stats"], "cpu": -0.5}}
    with pytest.raises(RpcError) as caught:
        bridge.call("score_best_balancing_migrations", {"usage": usage, "candidates": expanded, "limit": 1})
    err = caught.value
    assert err.code == -32602
    assert [e["loc"] for e in err.data["errors"]] == ["candidates[12345].stats.cpu"]
    assert "candidates[12345].stats.cpu" in err.message


def test_an_unknown_node_in_expanded_candidates_is_named(bridge):
    usage, _, expanded = cluster(nodes=5, bundles=10)
    expanded[7] = {**expanded[7], "target-node": "node99"}
    with pytest.raises(RpcError) as caught:
        bridge.call("score_best_balancing_migrations", {"usage": usage, "candidates": expanded, "limit": 1})
    assert caught.value.code == -32602
    assert [e["loc"] for e in caught.value.data["errors"]] == ["candidates[7].target-node"]
    assert "node99" in caught.value.message


def test_notifications_run_and_get_no_answer(bridge):
    before = bridge.call("bridge.info")["schedulers"]
    bridge.notify("scheduler.new", {"mode": "static"})
    bridge.notify("no.such.method")
    assert bridge.call("bridge.info")["schedulers"] == before + 1
    assert bridge.pending_output() == b""


def test_trace_shows_the_phases_of_a_call():
    usage, compact, _ = cluster(nodes=4, bundles=3)
    with BridgeClient(["--trace", "-"]) as client:
        client.call("score_best_balancing_migrations", {"usage": usage, "candidates": compact, "limit": 2})
        client.call("bridge.info")
        client.close()
        answers = [line for line in client.stderr().splitlines() if "<--" in line]
    assert len(answers) == 2
    phases = [p.split() for p in answers[0].split(" ms [", 1)[1].split("]", 1)[0].split(", ")]
    names = [name for name, _ in phases]
    expected = ["decode", "validate", "snapshot", "candidates", "score"]
    assert [name for name in names if name in expected] == expected and names[-1] == "encode"
    assert all(float(ms) >= 0.0 for _, ms in phases)
