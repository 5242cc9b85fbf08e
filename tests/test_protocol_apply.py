"""``scheduler.apply`` against the real server: many mutations in one call, all or nothing.

The expected side is always another path through the server: the same mutations sent as single
``scheduler.<method>`` calls to a second scheduler, or the scheduler's own state before a call
that failed. Results are compared by what every query answers.
"""

from __future__ import annotations

import jsonschema
import pytest

from crs_bridge.client import BridgeClient, RpcError

GiB = 1024**3


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient() as client:
        yield client


def new(bridge, mode: str) -> str:
    return bridge.call("scheduler.new", {"mode": mode})["scheduler"]


def service(node: str, cpu: float = 1.0, mem: int = GiB, target: str | None = None, running=True) -> dict:
    return {"stats": {"maxcpu": cpu, "maxmem": mem}, "running": running, "current-node": node, "target-node": target}


def resource(node: str, cpu: float = 0.5, mem: int = GiB, target: str | None = None, running=True) -> dict:
    stats = {"cpu": cpu, "maxcpu": 2 * cpu, "mem": mem, "maxmem": 2 * mem}
    return {"stats": stats, "running": running, "current-node": node, "target-node": target}


def node_stats(cpu: float) -> dict:
    return {"cpu": cpu, "maxcpu": 16, "mem": int(cpu * GiB), "maxmem": 64 * GiB}


#: A session per mode: adds, a moving guest, removals, the legacy add, a node removed.
SESSIONS = {
    "static": [
        ["add_node", "n1", 16, 64 * GiB],
        ["add_node", "n2", 32, 128 * GiB],
        ["add_node", "n3", 8, 32 * GiB],
        *[["add_service", f"vm:{i}", service(f"n{1 + i % 3}", 0.5 + i % 4, (1 + i % 5) * GiB)] for i in range(40)],
        ["add_service", "vm:moving", service("n1", 2.0, 2 * GiB, target="n2")],
        ["add_service", "vm:starting", service("n3", 0.0, GiB, running=0)],
        ["remove_service_usage", "vm:3"],
        ["remove_service_usage", "vm:unknown"],
        ["add_service_usage_to_node", "n3", "vm:4", {"maxcpu": 1.0, "maxmem": GiB}],
        ["add_service_usage_to_node", "n2", "vm:legacy", {"maxcpu": 3.0, "maxmem": 3 * GiB}],
        ["add_node", "n4", 4, 16 * GiB],
        ["add_service", "vm:on-n4", service("n4")],
        ["remove_node", "n4"],
        ["remove_node", "n-unknown"],
    ],
    "dynamic": [
        ["add_node", "n1", node_stats(9.5)],
        ["add_node", "n2", node_stats(1.25)],
        ["add_node", "n3", node_stats(4.0)],
        *[["add_resource", f"vm:{i}", resource(f"n{1 + i % 3}", 0.25 * (1 + i % 5))] for i in range(40)],
        ["add_resource", "vm:moving", resource("n1", target="n2")],
        ["add_resource", "vm:starting", resource("n3", running=False)],
        ["remove_resource", "vm:3"],
        ["remove_resource", "vm:unknown"],
        ["add_node", "n4", node_stats(2.0)],
        ["add_resource", "vm:on-n4", resource("n4")],
        ["remove_node", "n4"],
    ],
}

BUNDLES = [
    {"leader": f"vm:{i}", "resources": [f"vm:{i}"], "nodes": [n for n in ("n1", "n2", "n3") if n != f"n{1 + i % 3}"]}
    for i in range(40)
    if i not in (3, 4)
]


def answers(bridge, handle: str, mode: str) -> dict:
    """What every query answers about the scheduler."""
    start = "score_nodes_to_start_service" if mode == "static" else "score_nodes_to_start_resource"
    stats = {"maxcpu": 2.0, "maxmem": 2 * GiB} if mode == "static" else resource("n1")["stats"]
    return {
        "nodes": bridge.call("scheduler.list_nodes", [handle]),
        "imbalance": bridge.call("scheduler.calculate_node_imbalance", [handle]),
        "best": bridge.call("scheduler.score_best_balancing_migration_candidates", [handle, BUNDLES, 5]),
        "topsis": bridge.call("scheduler.score_best_balancing_migration_candidates_topsis", [handle, BUNDLES, 5]),
        "start": bridge.call(f"scheduler.{start}", [handle, stats]),
    }


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_apply_builds_what_single_calls_build(bridge, mode):
    one_by_one, at_once = new(bridge, mode), new(bridge, mode)
    for method, *args in SESSIONS[mode]:
        assert bridge.call(f"scheduler.{method}", [one_by_one, *args]) is None
    assert bridge.call("scheduler.apply", {"scheduler": at_once, "mutations": SESSIONS[mode]}) is None
    expected = answers(bridge, one_by_one, mode)
    assert expected["best"] and expected["start"]
    assert answers(bridge, at_once, mode) == expected


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_apply_in_parts_and_positional_params(bridge, mode):
    whole, parts = new(bridge, mode), new(bridge, mode)
    bridge.call("scheduler.apply", [whole, SESSIONS[mode]])
    session = SESSIONS[mode]
    for at in range(0, len(session), 7):
        bridge.call("scheduler.apply", [parts, session[at : at + 7]])
    assert bridge.call("scheduler.apply", [parts, []]) is None
    assert answers(bridge, parts, mode) == answers(bridge, whole, mode)


#: (mode, mutations after a valid start, expected code, index, method, loc or message)
FAILURES = [
    ("static", [["add_node", "n1", 4, GiB]], -32000, 0, "add_node", "node 'n1' already exists"),
    (
        "static",
        [["add_node", "n5", 4, GiB], ["add_service", "vm:0", service("n1")]],
        -32000,
        1,
        "add_service",
        "resource 'vm:0' already exists",
    ),
    (
        "static",
        [["add_node", "n5", 4, GiB], ["add_service", "vm:x", service("n9")]],
        -32000,
        1,
        "add_service",
        "current node for resource 'vm:x' does not exist",
    ),
    (
        "static",
        [["add_service", "vm:x", service("n1", target="n1")]],
        -32000,
        0,
        "add_service",
        "resource 'vm:x' has the same current and target node",
    ),
    (
        "static",
        [
            ["add_service", "vm:mv", service("n1", target="n2")],
            ["add_service_usage_to_node", "n3", "vm:mv", {"maxcpu": 1.0, "maxmem": 1}],
        ],
        -32000,
        1,
        "add_service_usage_to_node",
        "resource 'vm:mv' is already moving to target node 'n2'",
    ),
    ("static", [["add_node", "n5", 4, GiB], ["add_node", "n6", 0, GiB]], -32602, None, None, "mutations[1].maxcpu"),
    (
        "static",
        [["add_service", "vm:x", service("n1", cpu=-1.0)]],
        -32602,
        None,
        None,
        "mutations[0].service.stats.maxcpu",
    ),
    (
        "static",
        [["add_service", "vm:x", {"stats": {"maxcpu": 1.0, "maxmem": 1}, "running": True}]],
        -32602,
        None,
        None,
        "mutations[0].service.current-node",
    ),
    ("static", [["add_node", "n5", 4]], -32602, None, None, "mutations[0].maxmem"),
    ("static", [["add_node", "n5", 4, GiB, 1]], -32602, None, None, "mutations[0]"),
    ("static", [["add_resource", "vm:x", resource("n1")]], -32602, None, None, "mutations[0]"),
    ("static", [["calculate_node_imbalance"]], -32602, None, None, "mutations[0]"),
    ("static", [{"method": "add_node"}], -32602, None, None, "mutations[0]"),
    (
        "static",
        [["add_service", "vm:big", service("n1", mem=2**62 - 1)]],
        -32602,
        0,
        "add_service",
        "mutations[0].resource 'vm:big'.stats.maxmem",
    ),
    ("dynamic", [["add_node", "n1", node_stats(1.0)]], -32000, 0, "add_node", "node 'n1' already exists"),
    (  # in a run of node adds (added in bulk): the run's own entry is named
        "dynamic",
        [["add_node", "n5", node_stats(1.0)], ["add_node", "n6", node_stats(2.0)], ["add_node", "n5", node_stats(3.0)]],
        -32000,
        2,
        "add_node",
        "node 'n5' already exists",
    ),
    (
        "static",
        [["add_node", "n5", 4, GiB], ["add_node", "n6", 4, GiB], ["add_node", "n6", 8, GiB]],
        -32000,
        2,
        "add_node",
        "node 'n6' already exists",
    ),
    (
        "dynamic",
        [["add_node", "n5", {**node_stats(1.0), "maxcpu": 0}]],
        -32602,
        None,
        None,
        "mutations[0].stats.maxcpu",
    ),
    ("dynamic", [["add_service", "vm:x", service("n1")]], -32602, None, None, "mutations[0]"),
]


@pytest.mark.parametrize(("mode", "mutations", "code", "index", "method", "named"), FAILURES)
def test_a_failing_entry_changes_nothing_and_is_named(bridge, mode, mutations, code, index, method, named):
    handle = new(bridge, mode)
    bridge.call("scheduler.apply", [handle, SESSIONS[mode]])
    before = answers(bridge, handle, mode)
    with pytest.raises(RpcError) as caught:
        bridge.call("scheduler.apply", [handle, [*mutations, ["remove_node", "n1"]]])
    error = caught.value
    assert error.code == code
    if code == -32000:
        assert error.message == named  # upstream's text, as the single call says it
    else:
        assert named in [e["loc"] for e in error.data["errors"]], error.data
        assert f"{named}: " in error.message
    if index is not None:
        assert (error.data["index"], error.data["method"]) == (index, method)
    assert answers(bridge, handle, mode) == before


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_a_batch_of_adds_failing_midway_changes_nothing(bridge, mode):
    """A round's kind of batch (node and guest adds only, run on the scheduler's own state): the
    adds before the failing one are taken back, and the same adds without it then succeed."""
    handle = new(bridge, mode)
    bridge.call("scheduler.apply", [handle, SESSIONS[mode]])
    before = answers(bridge, handle, mode)
    add_node = ["add_node", "n5", 4, 16 * GiB] if mode == "static" else ["add_node", "n5", node_stats(2.0)]
    add, place = ("add_service", service) if mode == "static" else ("add_resource", resource)
    adds = [add_node, [add, "vm:new", place("n5")], [add, "vm:moving-new", place("n1", target="n5")]]
    with pytest.raises(RpcError) as caught:
        bridge.call("scheduler.apply", [handle, [*adds, [add, "vm:1", place("n2")]]])
    assert (caught.value.message, caught.value.data["index"]) == ("resource 'vm:1' already exists", 3)
    assert answers(bridge, handle, mode) == before
    bridge.call("scheduler.apply", [handle, adds])
    assert bridge.call("scheduler.list_nodes", [handle]) == [*before["nodes"], "n5"]


def test_single_calls_word_refused_values_as_before(bridge):
    """Single calls are unchanged by apply: locations without a mutation prefix."""
    handle = new(bridge, "static")
    with pytest.raises(RpcError) as caught:
        bridge.call("scheduler.add_node", [handle, "n1", 0, GiB])
    assert caught.value.message == "Invalid params: maxcpu: Input should be greater than 0"


def test_unknown_handle_and_missing_mutations(bridge):
    with pytest.raises(RpcError) as caught:
        bridge.call("scheduler.apply", ["s-none", []])
    assert caught.value.code == -32001
    handle = new(bridge, "dynamic")
    with pytest.raises(RpcError) as caught:
        bridge.call("scheduler.apply", [handle])
    assert caught.value.code == -32602 and caught.value.data["errors"][0]["loc"] == "mutations"


def test_discover_publishes_apply_per_mode(bridge):
    document = bridge.call("rpc.discover")
    method = {m["name"]: m for m in document["methods"]}["scheduler.apply"]
    assert method["x-modes"] == {"static": ["scheduler", "mutations"], "dynamic": ["scheduler", "mutations"]}
    mutations = {p["name"]: p for p in method["params"]}["mutations"]
    assert mutations["required"] is True
    schema = {**mutations["schema"], "components": document["components"]}
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(SESSIONS["static"])
    validator.validate(SESSIONS["dynamic"])
    assert not validator.is_valid([["add_node", "n1", "many", GiB]])
    assert not validator.is_valid([["no_such_method"]])


def test_a_handle_of_the_clients_choosing_serves_a_batch_sent_before_any_answer(bridge):
    """``scheduler.new`` with the client's handle: the client sends the object's mutations and a
    query in the same batch, before any answer, and gets what a server-chosen handle gives."""
    batch = [
        bridge.message("scheduler.new", {"mode": "static", "scheduler": "mine"}, 1),
        bridge.message("scheduler.apply", ["mine", [["add_node", "n1", 8, 16 * GiB], ["add_node", "n2", 8, 16 * GiB],
                                                    ["add_service", "vm:1", service("n1", 4.0)]]], 2),
        bridge.message("scheduler.calculate_node_imbalance", ["mine"], 3),
    ]
    bridge.send(batch)
    answers = {a["id"]: a for a in bridge.read()}
    assert answers[1]["result"] == {"scheduler": "mine"}
    assert answers[2]["result"] is None
    reference = new(bridge, "static")
    bridge.call("scheduler.apply", [reference, [["add_node", "n1", 8, 16 * GiB], ["add_node", "n2", 8, 16 * GiB],
                                                ["add_service", "vm:1", service("n1", 4.0)]]])
    assert answers[3]["result"] == bridge.call("scheduler.calculate_node_imbalance", [reference]) > 0
    bridge.call("scheduler.free", {"scheduler": reference})


def test_a_handle_in_use_is_refused_and_the_servers_own_handles_avoid_the_clients(bridge):
    """A live handle cannot be taken twice (the error names the field, the first object stays);
    once freed it can; the handles the server picks skip any a client holds."""
    bridge.call("scheduler.new", {"mode": "dynamic", "scheduler": "taken"})
    with pytest.raises(RpcError) as refused:
        bridge.call("scheduler.new", {"mode": "static", "scheduler": "taken"})
    assert refused.value.code == -32602
    assert refused.value.message == "Invalid params: scheduler: the handle 'taken' is in use; free it or choose another"
    # Still the dynamic one: it takes a dynamic node's stats.
    bridge.call("scheduler.add_node", ["taken", "n1", node_stats(1.0)])
    assert bridge.call("scheduler.list_nodes", ["taken"]) == ["n1"]
    bridge.call("scheduler.free", {"scheduler": "taken"})
    assert bridge.call("scheduler.new", {"mode": "static", "scheduler": "taken"}) == {"scheduler": "taken"}
    upcoming = int(new(bridge, "static")[1:]) + 1
    claimed = [f"s{upcoming}", f"s{upcoming + 1}"]
    for handle in claimed:
        bridge.call("scheduler.new", {"mode": "static", "scheduler": handle})
    picked = new(bridge, "static")
    assert picked not in claimed and picked.startswith("s")


def test_a_handle_once_used_is_never_handed_out_again():
    """A client's ``s2``, once freed, is not what a later plain ``scheduler.new`` returns: a stale
    reference to it gets the unknown-handle error, not another scheduler."""
    with BridgeClient() as fresh:
        assert fresh.call("scheduler.new", {"mode": "static", "scheduler": "s2"}) == {"scheduler": "s2"}
        assert fresh.call("scheduler.free", {"scheduler": "s2"}) is True
        picked = [new(fresh, "static"), new(fresh, "dynamic")]
        assert "s2" not in picked and len(set(picked)) == 2
        with pytest.raises(RpcError) as stale:
            fresh.call("scheduler.list_nodes", {"scheduler": "s2"})
        assert stale.value.code == -32001 and "s2" in stale.value.message
        # The server's handles stay within the form a client may choose; a longer one is refused.
        with pytest.raises(RpcError) as long:
            fresh.call("scheduler.new", {"mode": "static", "scheduler": "s" + "9" * 19})
        assert long.value.code == -32602 and long.value.data["errors"][0]["loc"] == "scheduler"
        top = "s" + "9" * 18
        assert fresh.call("scheduler.new", {"mode": "static", "scheduler": top}) == {"scheduler": top}
        assert new(fresh, "static") == "s1" + "0" * 18
