"""``scheduler.stage_candidates`` / ``scheduler.score_staged_candidates`` against the real server:
a candidate list sent in parts scores as the whole list sent at once.

The expected side is always the whole list through ``scheduler.score_best_balancing_migration_
candidates[_topsis]`` on the same scheduler, never a hard-coded result.
"""

from __future__ import annotations

import pytest

from crs_bridge.client import BridgeClient, RpcError

GiB = 1024**3
NODES = [f"n{i}" for i in range(1, 7)]
SCORERS = {
    "bruteforce": "scheduler.score_best_balancing_migration_candidates",
    "topsis": "scheduler.score_best_balancing_migration_candidates_topsis",
}


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient() as client:
        yield client


def home(i: int) -> str:
    return NODES[(i * 5) % 3]  # the first three nodes carry everything


def cluster(bridge, mode: str) -> str:
    handle = bridge.call("scheduler.new", {"mode": mode})["scheduler"]
    mutations = []
    for i, name in enumerate(NODES):
        if mode == "static":
            mutations.append(["add_node", name, 8 + 8 * (i % 2), 64 * GiB])
        else:
            mutations.append(["add_node", name, {"cpu": 0.5 * i, "maxcpu": 16, "mem": i * GiB, "maxmem": 64 * GiB}])
    for i in range(60):
        stats = {"maxcpu": 1.0 + i % 4, "maxmem": (1 + i % 3) * GiB}
        if mode == "dynamic":
            stats.update(cpu=0.25 * (1 + i % 5), mem=(1 + i % 2) * GiB)
        record = {"stats": stats, "running": True, "current-node": home(i)}
        mutations.append(["add_service" if mode == "static" else "add_resource", f"vm:{i}", record])
    bridge.call("scheduler.apply", [handle, mutations])
    return handle


def compact() -> list[dict]:
    bundles = []
    for i in range(60):
        members = [f"vm:{i}"] + ([f"vm:{i + 3}"] if i % 10 == 0 else [])  # i + 3 is on the same node
        bundles.append({"leader": f"vm:{i}", "resources": members, "nodes": [n for n in NODES if n != home(i)]})
    return bundles


def expanded() -> list[dict]:
    return [
        {
            "sid": f"vm:{i}",
            "source-node": home(i),
            "target-node": target,
            "stats": {"cpu": 0.1 * (i % 7), "maxcpu": 2.0, "mem": (i % 4) * GiB, "maxmem": 4 * GiB},
        }
        for i in range(60)
        for target in NODES[3:]
    ]


def staged(bridge, handle: str, parts: list[list], limit: int, method: str = "bruteforce") -> list:
    for k, part in enumerate(parts):
        total = bridge.call("scheduler.stage_candidates", [handle, part, k > 0])
        assert total == sum(map(len, parts[: k + 1]))
    count = sum(map(len, parts))
    return bridge.call("scheduler.score_staged_candidates", [handle, count, limit, method])


def split(items: list, sizes: list[int]) -> list[list]:
    parts, at = [], 0
    for size in sizes:
        parts.append(items[at : at + size])
        at += size
    return parts + [items[at:]]


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize("method", ["bruteforce", "topsis"])
@pytest.mark.parametrize("limit", [0, 1, 5, 10_000])
def test_parts_score_as_the_whole_list(bridge, mode, method, limit):
    handle = cluster(bridge, mode)
    bundles = compact()
    whole = bridge.call(SCORERS[method], [handle, bundles, limit])
    assert whole or limit == 0
    for sizes in ([20, 20], [1, 58], [59], [0, 30]):
        assert staged(bridge, handle, split(bundles, sizes), limit, method) == whole, sizes


def test_expanded_and_mixed_parts(bridge):
    handle = cluster(bridge, "dynamic")
    candidates = expanded()
    whole = bridge.call(SCORERS["bruteforce"], [handle, candidates, 4])
    assert staged(bridge, handle, split(candidates, [100, 50]), 4) == whole
    # Parts of both forms: the candidates of both, ordered as every scoring orders them.
    mixed = [compact()[:10], candidates[:90]]
    assert staged(bridge, handle, mixed, 100_000) == sorted(
        bridge.call(SCORERS["bruteforce"], [handle, compact()[:10], 100_000])
        + bridge.call(SCORERS["bruteforce"], [handle, candidates[:90], 100_000]),
        key=lambda s: (s["imbalance"], *(s["migration"][k] for k in ("sid", "source-node", "target-node"))),
    )


def staged_count_error(bridge, handle: str, count: int) -> RpcError:
    with pytest.raises(RpcError) as caught:
        bridge.call("scheduler.score_staged_candidates", [handle, count, 1])
    return caught.value


def test_the_count_guards_against_a_lost_or_stale_staging(bridge):
    handle = cluster(bridge, "static")
    bundles = compact()
    bridge.call("scheduler.stage_candidates", [handle, bundles[:30]])
    error = staged_count_error(bridge, handle, 60)
    assert error.code == -32602 and error.data["errors"][0]["loc"] == "count"
    assert "30 candidates are staged, not 60" in error.message
    # Scoring consumed the staging; append=false starts afresh; another call discards it.
    assert "0 candidates are staged, not 30" in staged_count_error(bridge, handle, 30).message
    bridge.call("scheduler.stage_candidates", [handle, bundles[:10]])
    bridge.call("scheduler.stage_candidates", {"scheduler": handle, "candidates": bundles[:20]})
    assert bridge.call("scheduler.score_staged_candidates", [handle, 20, 3]) == bridge.call(
        SCORERS["bruteforce"], [handle, bundles[:20], 3]
    )
    bridge.call("scheduler.stage_candidates", [handle, bundles[:10]])
    bridge.call("scheduler.add_node", [handle, "n9", 4, GiB])
    assert "0 candidates are staged, not 10" in staged_count_error(bridge, handle, 10).message
    bridge.call("scheduler.stage_candidates", [handle, bundles[:10]])
    bridge.call("scheduler.list_nodes", [handle])
    assert "0 candidates are staged, not 10" in staged_count_error(bridge, handle, 10).message
    # A refused call changes nothing, the staging included.
    bridge.call("scheduler.stage_candidates", [handle, bundles[:10]])
    with pytest.raises(RpcError):
        bridge.call("scheduler.calculate_node_imbalance", {"scheduler": handle, "bogus": 1})
    assert bridge.call("scheduler.score_staged_candidates", [handle, 10, 3]) == bridge.call(
        SCORERS["bruteforce"], [handle, bundles[:10], 3]
    )


def test_a_part_is_refused_as_the_whole_list_would_refuse_it_and_discards_the_staging(bridge):
    handle = cluster(bridge, "static")
    bundles = compact()
    bridge.call("scheduler.stage_candidates", [handle, bundles[:30]])
    bad = [{"leader": "vm:nope", "resources": ["vm:nope"], "nodes": ["n2"]}]
    with pytest.raises(RpcError) as staging:
        bridge.call("scheduler.stage_candidates", [handle, bad, True])
    with pytest.raises(RpcError) as whole:
        bridge.call(SCORERS["bruteforce"], [handle, bad, 1])
    assert (
        (staging.value.code, staging.value.message)
        == (whole.value.code, whole.value.message)
        == (
            -32000,
            "leader 'vm:nope' is not present in the cluster usage",
        )
    )
    assert "0 candidates are staged, not 30" in staged_count_error(bridge, handle, 30).message


def test_staging_counts_against_the_candidate_limit():
    with BridgeClient(["--max-candidates", "100"]) as bridge:
        handle = cluster(bridge, "static")
        bundles = compact()  # 5 targets each: 20 bundles are 100 candidates
        assert bridge.call("scheduler.stage_candidates", [handle, bundles[:15]]) == 15
        with pytest.raises(RpcError) as caught:
            bridge.call("scheduler.stage_candidates", [handle, bundles[15:25], True])
        assert caught.value.code == -32602
        assert "125 staged expanded candidates exceed the limit of 100" in caught.value.message


def test_unknown_and_freed_handles(bridge):
    handle = cluster(bridge, "dynamic")
    bridge.call("scheduler.stage_candidates", [handle, compact()[:5]])
    bridge.call("scheduler.free", [handle])
    calls = {"scheduler.stage_candidates": [handle, []], "scheduler.score_staged_candidates": [handle, 0, 1]}
    for method, params in calls.items():
        with pytest.raises(RpcError) as caught:
            bridge.call(method, params)
        assert caught.value.code == -32001


def test_discover_publishes_both_methods(bridge):
    methods = {m["name"]: m for m in bridge.call("rpc.discover")["methods"]}
    assert methods["scheduler.stage_candidates"]["x-modes"]["static"] == ["scheduler", "candidates", "append"]
    score = methods["scheduler.score_staged_candidates"]
    assert score["x-modes"]["dynamic"] == ["scheduler", "count", "limit", "method"]
