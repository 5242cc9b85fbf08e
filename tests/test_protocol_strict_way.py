"""The strict way (envelopes and params decoded straight into the structs) answers every message as
the lax way (orjson, then the models) does, and takes what a client sends in a round.

Each message is handled by two protocols with the same live schedulers: the server's, and one that
never takes the strict way. Besides the answers, each case says whether the strict way must take
the message: a message it cannot read exactly as the lax way does (float ids, integers beyond 64
bits, lax values, positional params, invalid envelopes, nesting it cannot bound) goes the lax way
whole, a batch too.
"""

from __future__ import annotations

import json

import pytest

from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State

STATS = {"maxcpu": 2, "maxmem": 4 << 30}
SERVICE = {"stats": STATS, "running": True, "current-node": "A"}
DYNAMIC_STATS = {"cpu": 1.5, "maxcpu": 2, "mem": 1 << 30, "maxmem": 4 << 30}
NODE = {"cpu": 0.5, "maxcpu": 16, "mem": 1 << 30, "maxmem": 64 << 30}


def request(method: str, params: object = None, ident: object = 1) -> dict:
    message = {"jsonrpc": "2.0", "method": method}
    if ident is not None:
        message["id"] = ident
    if params is not None:
        message["params"] = params
    return message


def text(message: object) -> bytes:
    return json.dumps(message).encode()


#: A static scheduler s1 and a dynamic one d1, two nodes each, a guest on s1.
SETUP = [
    request("scheduler.new", {"mode": "static", "scheduler": "s1"}),
    request(
        "scheduler.apply",
        {
            "scheduler": "s1",
            "mutations": [
                ["add_node", "A", 16, 64 << 30],
                ["add_node", "B", 16, 64 << 30],
                ["add_service", "vm:1", SERVICE],
            ],
        },
    ),
    request("scheduler.new", {"mode": "dynamic", "scheduler": "d1"}),
    request("scheduler.apply", {"scheduler": "d1", "mutations": [["add_node", "A", NODE], ["add_node", "B", NODE]]}),
]

BUNDLES = [{"leader": "vm:1", "resources": ["vm:1"], "nodes": ["B"]}]
USAGE = {
    "mode": "static",
    "nodes": [{"name": "A", "maxcpu": 16, "maxmem": 64 << 30}, {"name": "B", "maxcpu": 16, "maxmem": 64 << 30}],
    "resources": [{"sid": "vm:1", **SERVICE}],
}


def protocols(limits: ServerLimits | None = None) -> tuple[Protocol, Protocol]:
    """The server's protocol and one that only goes the lax way, both with :data:`SETUP` done."""
    strict, lax = Protocol(State(limits=limits or ServerLimits())), Protocol(State(limits=limits or ServerLimits()))
    lax._strictly = lambda message: None
    for message in SETUP:
        assert strict.handle(text(message)) == lax.handle(text(message))
    return strict, lax


def answered_alike(message: bytes, taken: bool, limits: ServerLimits | None = None) -> bytes | None:
    """``message``'s answer, the same both ways; the strict way takes it iff ``taken``."""
    strict, lax = protocols(limits)
    assert (strict._strictly(message) is not None) is taken
    answer = strict.handle(message)
    assert answer == lax.handle(message)
    return answer


ROUND = [
    # What a Perl client's round sends: a batch creating a scheduler under its own handle and
    # adding nodes and guests (and freeing the last round's), the imbalance, the scoring.
    (
        [
            request("scheduler.new", {"mode": "static", "imbalance": "raw", "scheduler": "r1"}, 10),
            request(
                "scheduler.apply",
                {"scheduler": "r1", "mutations": [["add_node", "A", 8, 1 << 34], ["add_service", "vm:7", SERVICE]]},
                11,
            ),
            request("scheduler.free", {"scheduler": "s1"}, 12),
        ]
    ),
    request("scheduler.calculate_node_imbalance", {"scheduler": "s1"}),
    request(
        "scheduler.score_best_balancing_migration_candidates", {"scheduler": "s1", "candidates": BUNDLES, "limit": 1}
    ),
    request(
        "scheduler.apply",
        {
            "scheduler": "d1",
            "mutations": [["add_resource", "ct:1", {"stats": DYNAMIC_STATS, "running": True, "current-node": "A"}]],
        },
    ),
    request("score_best_balancing_migrations", {"usage": USAGE, "candidates": BUNDLES, "limit": 2}),
    request("bridge.info"),
    request("scheduler.list_nodes", {"scheduler": "d1"}, None),  # a notification
]


@pytest.mark.parametrize("message", ROUND)
def test_a_rounds_messages_take_the_strict_way(message):
    answered_alike(text(message), taken=True)


LAX_WHOLE = {
    "float id": request("scheduler.list_nodes", {"scheduler": "s1"}, 1.5),
    "integral float id": request("scheduler.list_nodes", {"scheduler": "s1"}, 100.0),
    "id beyond 64 bits": request("scheduler.list_nodes", {"scheduler": "s1"}, 2**64 + 1),
    "id beyond int64": request("scheduler.list_nodes", {"scheduler": "s1"}, 2**63),
    "positional params": request("scheduler.contains_node", ["s1", "A"]),
    "empty positional params": request("bridge.info", []),
    "integral float bytes": request(
        "scheduler.add_node", {"scheduler": "s1", "nodename": "C", "maxcpu": 4, "maxmem": 8.0}
    ),
    "running as a number": request(
        "scheduler.add_service", {"scheduler": "s1", "sid": "vm:9", "service": {**SERVICE, "running": 1}}
    ),
    "an unknown key": request("scheduler.list_nodes", {"scheduler": "s1", "verbose": True}),
    "a count beyond 64 bits": request(
        "scheduler.score_staged_candidates", {"scheduler": "s1", "count": 2**64 + 1, "limit": 1}
    ),
    "unknown method": request("scheduler.frobnicate", {"scheduler": "s1"}),
    "invalid envelope": {"jsonrpc": "2.0", "method": "bridge.info", "id": 1, "extra": 0},
    "wrong jsonrpc": {"jsonrpc": "1.0", "method": "bridge.info", "id": 1},
    "params not a container": request("bridge.info", 5),
    "empty batch": [],
    "a batch with a lax request": [
        request("scheduler.add_node", {"scheduler": "s1", "nodename": "C", "maxcpu": 4, "maxmem": 1 << 30}, 1),
        request("scheduler.add_node", {"scheduler": "s1", "nodename": "D", "maxcpu": 4.0, "maxmem": 1 << 30}, 2),
        request("scheduler.list_nodes", {"scheduler": "s1"}, 3),
    ],
    "a batch with a float id": [request("bridge.info", None, 1), request("bridge.info", None, 2.5)],
    "a batch with an invalid request": [request("bridge.info", None, 1), {"jsonrpc": "2.0", "id": 2}],
    "a batch with a positional request": [request("bridge.info", None, 1), request("scheduler.list_nodes", ["s1"], 2)],
    "wrong params, one field": request(
        "scheduler.add_node", {"scheduler": "s1", "nodename": "", "maxcpu": 0, "maxmem": 1}
    ),
    "the wrong mode's add": request("scheduler.add_resource", {"scheduler": "s1", "sid": "ct:2", "resource": SERVICE}),
}


@pytest.mark.parametrize("name", LAX_WHOLE)
def test_what_the_strict_way_cannot_read_exactly_goes_the_lax_way_whole(name):
    answered_alike(text(LAX_WHOLE[name]), taken=False)


def test_a_count_beyond_64_bits_is_read_as_orjson_reads_it():
    """orjson reads 2**64 + 1 as a float, 2**64: the strict way, which reads every digit, leaves
    such a count to the lax way (the error echoes it)."""
    answer = answered_alike(text(LAX_WHOLE["a count beyond 64 bits"]), taken=False)
    assert f"not {2**64}" in json.loads(answer)["error"]["message"]


@pytest.mark.parametrize(
    "message",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"scheduler.list_nodes","params":{"scheduler":"s1","scheduler":"d1"}}',
        b'{"jsonrpc":"2.0","id":1,"id":"two","method":"bridge.info"}',
        b'{"jsonrpc":"2.0","id":"\\u00e4\\ud83d\\ude00","method":"scheduler.contains_node",'
        b'"params":{"\\u0073cheduler":"s1","nodename":"\\u0041"}}',
        b' {"jsonrpc" : "2.0" ,"id":-0,\n"method":"bridge.info", "params" : { } }\r\n',
        b'{"jsonrpc":"2.0","id":9223372036854775807,"method":"bridge.info"}',
        b'{"jsonrpc":"2.0","id":null,"method":"scheduler.score_staged_candidates",'
        b'"params":{"scheduler":"s1","count":18446744073709551615,"limit":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"scheduler.add_service_usage_to_node",'
        b'"params":{"scheduler":"s1","nodename":"B","sid":"vm:5","service_stats":{"maxcpu":1e-400,"maxmem":0}}}',
    ],
)
def test_odd_spellings_the_strict_way_reads_exactly_are_answered_alike(message):
    answered_alike(message, taken=True)


@pytest.mark.parametrize(
    "message",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node","params":{"scheduler":"s1","nodename":"C",'
        b'"maxcpu":4,"maxmem":1e400}}',
        b'{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node","params":{"scheduler":"s1","nodename":"C\xff",'
        b'"maxcpu":4,"maxmem":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"scheduler.add_node","params":{"scheduler":"s1","nodename":"\\ud800",'
        b'"maxcpu":4,"maxmem":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"bridge.info"} {}',
        b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"bridge.info"}',
        b'{"jsonrpc":"2.0","id":1,"method":"bridge.info","params":{"x":[01]}}',
    ],
)
def test_what_is_not_json_gets_the_lax_ways_parse_error(message):
    answer = answered_alike(message, taken=False)
    assert json.loads(answer)["error"]["code"] == -32700


def test_an_apply_another_modes_structs_take_is_decoded_for_its_schedulers_mode():
    """Removals alone are valid mutations of either mode: taken as a static scheduler's, they run
    on the dynamic scheduler as its own (and a lax one after them goes the models' way there)."""
    removals = request("scheduler.apply", {"scheduler": "d1", "mutations": [["remove_node", "B"]]})
    answered_alike(text(removals), taken=True)
    lax_after = [
        removals,
        request("scheduler.add_node", {"scheduler": "d1", "nodename": "C", "stats": {**NODE, "maxcpu": 2.0}}, 2),
        request("scheduler.list_nodes", {"scheduler": "d1"}, 3),
    ]
    answered_alike(text(lax_after), taken=False)
    empty = request("scheduler.apply", {"scheduler": "d1", "mutations": []})
    assert json.loads(answered_alike(text(empty), taken=True))["result"] is None


def _nested(levels: int) -> bytes:
    """A list call on s1 with an unknown key nesting ``levels`` arrays (the message: one more)."""
    return b'{"jsonrpc":"2.0","id":1,"method":"scheduler.list_nodes","params":{"scheduler":"s1","x":%s}}' % (
        b"[" * (levels - 2) + b"]" * (levels - 2)
    )


@pytest.mark.parametrize("levels", [7, 1023, 1024, 1025, 1100, 3000])
def test_nesting_under_the_default_limit_is_answered_alike(levels):
    """Below and past msgspec's recursion limit (which differs between Python versions) and
    orjson's depth limit alike: the lax way decides, refusing what nests deeper than the limit."""
    answer = answered_alike(_nested(levels), taken=False)
    assert (json.loads(answer)["error"]["code"] == -32700) is (levels > 1024)


@pytest.mark.parametrize("max_depth", [6, 7, 8])
def test_a_batch_as_deep_as_valid_ones_go_is_taken_strictly_only_within_the_limit(max_depth):
    """A batch of adds nests 7 levels (batch, request, params, mutations, entry, service, stats):
    the strict way takes it when the depth limit allows that much, else the lax way refuses it."""
    batch = [request("scheduler.apply", {"scheduler": "s1", "mutations": [["add_service", "vm:2", SERVICE]]})]
    answer = answered_alike(text(batch), taken=max_depth >= 7, limits=ServerLimits(max_json_depth=max_depth))
    assert ('"error"' in answer.decode()) is (max_depth < 7)


def test_size_limits_refuse_what_the_strict_way_took_in_the_same_words():
    limits = ServerLimits(max_nodes=1, max_candidates=1)
    answer = answered_alike(
        text(request("score_best_balancing_migrations", {"usage": USAGE, "candidates": BUNDLES, "limit": 1})),
        taken=True,
        limits=limits,
    )
    assert "2 nodes exceed the limit of 1" in answer.decode()
    bundles = [{"leader": "vm:1", "resources": ["vm:1"], "nodes": ["A", "B"]}]
    scoring = request(
        "scheduler.score_best_balancing_migration_candidates", {"scheduler": "s1", "candidates": bundles, "limit": 1}
    )
    answer = answered_alike(text(scoring), taken=True, limits=limits)
    assert "2 expanded candidates exceed the limit of 1" in answer.decode()
