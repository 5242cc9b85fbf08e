"""Written only against the public client (crs_bridge.client and its pytest fixture), as a
project that installs crs-bridge would write it. `make wheel-test` runs this file in a fresh
virtual environment with the package installed from its wheel, from outside the repository."""

from __future__ import annotations

import math
from importlib.metadata import version

import pytest

from crs_bridge.client import BridgeClient, RpcError

GiB = 1 << 30
#: One service of 4 cores and 8 GiB on the first of three nodes of 16 cores and 64 GiB.
SERVICE = {"stats": {"maxcpu": 4.0, "maxmem": 8 * GiB}, "running": True, "current-node": "n1"}


def three_nodes(scheduler) -> None:
    for name in ("n1", "n2", "n3"):
        scheduler.add_node(name, 16, 64 * GiB)


def test_fixture_serves_the_installed_version(crs_bridge):
    assert crs_bridge.call("bridge.info")["version"] == version("crs-bridge")


@pytest.mark.parametrize("imbalance", ["raw", "normalized"])
def test_static_imbalance_follows_the_formula(crs_bridge, imbalance):
    s = crs_bridge.static(imbalance)
    three_nodes(s)
    s.add_service("vm:100", SERVICE)
    # Loads (x, 0, 0): mean x/3, population deviation x*sqrt(2)/3, so the raw coefficient of
    # variation is sqrt(2); normalized divides it by sqrt(n - 1) = sqrt(2).
    expected = math.sqrt(2) if imbalance == "raw" else 1.0
    assert s.calculate_node_imbalance() == pytest.approx(expected, rel=1e-12)
    assert s.list_nodes() == ["n1", "n2", "n3"]
    assert s.contains_node("n2") and not s.contains_node("n4")


def test_scheduling_error_carries_code_and_upstream_text(crs_bridge):
    s = crs_bridge.static()
    three_nodes(s)
    with pytest.raises(RpcError) as caught:
        s.add_node("n1", 8, 8 * GiB)
    assert caught.value.code == -32000
    assert caught.value.message == "node 'n1' already exists"
    assert s.list_nodes() == ["n1", "n2", "n3"]  # the failed call changed nothing


def test_invalid_params_name_the_field(crs_bridge):
    s = crs_bridge.static()
    with pytest.raises(RpcError) as caught:
        s.add_node("n1", 0, 8 * GiB)
    assert caught.value.code == -32602
    assert [e["loc"] for e in caught.value.data["errors"]] == ["maxcpu"]
    assert s.list_nodes() == []


def test_dynamic_scores_a_move_off_the_busy_node(crs_bridge):
    d = crs_bridge.dynamic()
    d.add_node("busy", {"cpu": 12.0, "maxcpu": 16, "mem": 48 * GiB, "maxmem": 64 * GiB})
    d.add_node("idle", {"cpu": 1.0, "maxcpu": 16, "mem": 4 * GiB, "maxmem": 64 * GiB})
    stats = {"cpu": 4.0, "maxcpu": 4.0, "mem": 16 * GiB, "maxmem": 16 * GiB}
    d.add_resource("vm:100", {"stats": stats, "running": True, "current-node": "busy"})
    before = d.calculate_node_imbalance()
    candidates = [{"leader": "vm:100", "resources": ["vm:100"], "nodes": ["idle"]}]
    [best] = d.score_best_balancing_migration_candidates(candidates, 5)
    assert best["migration"] == {"sid": "vm:100", "source-node": "busy", "target-node": "idle"}
    assert best["imbalance"] < before
    scores = dict(d.score_nodes_to_start_resource(stats))
    assert scores["idle"] > scores["busy"]


def test_freed_scheduler_is_unknown(crs_bridge):
    with crs_bridge.static() as s:
        s.add_node("n1", 16, 64 * GiB)
    with pytest.raises(RpcError) as caught:
        s.list_nodes()
    assert caught.value.code == -32001


def test_client_stops_its_server_at_end_of_input():
    with BridgeClient() as bridge:
        assert bridge.call("calculate_node_imbalance", {"usage": {"mode": "static", "nodes": [], "resources": []}}) == 0
        assert bridge.close() == 0
