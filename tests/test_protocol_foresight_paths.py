"""Foresight against the paths around a call (review): notifications, positional params, batches
with invalid or unknown requests, ``debug.raise``, batches of adds refused midway (taken back in
place), a static scheduler's start scoring, the same query written otherwise (key order, spaces,
duplicate keys): every answer is a server's without foresight, byte for byte."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State
from tests.test_protocol_foresight import IMBALANCE, NODES, GiB, candidates, usage

HANDLES = ["a", "b"]
QUERIES = [
    ("scheduler.score_best_balancing_migration_candidates", {"candidates": candidates(), "limit": 2}),
    ("scheduler.score_best_balancing_migration_candidates_topsis", {"candidates": candidates(12), "limit": 1}),
    ("scheduler.select_best_balancing_migration", {"candidates": candidates(), "imbalance_threshold": 0.01}),
    ("scheduler.select_best_balancing_migration_topsis", {"candidates": candidates(6)}),
    (IMBALANCE, {}),
]


def static_usage() -> list:
    nodes = [["add_node", n, 16, 64 * GiB] for n in NODES]
    guests = [
        [
            "add_service",
            f"vm:{100 + i}",
            {
                "stats": {"maxcpu": 1 + i % 3, "maxmem": GiB},
                "running": True,
                "current-node": NODES[0] if i % 3 == 0 else NODES[i % 4],
            },
        ]
        for i in range(24)
    ]
    return nodes + guests


def written(method: str, params: dict, ident, form: str) -> bytes:
    """The request in one of several texts that decode alike (or, positional, to another kind)."""
    if form == "positional":
        params = list(params.values())
    request = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        request["id"] = ident
    text = orjson.dumps(request)
    if form == "spaced":
        text = orjson.dumps(request, option=orjson.OPT_INDENT_2)
    elif form == "reordered":
        envelope = {key: value for key, value in request.items() if key != "params"}
        reordered = dict(reversed(list(params.items()))) if isinstance(params, dict) else params
        text = orjson.dumps({"params": reordered, **envelope})
    elif form == "duplicate" and isinstance(params, dict):
        # an earlier "scheduler" that the later one overrides
        inner = orjson.dumps(params)
        text = text.replace(inner, b'{"scheduler":"nobody",' + inner[1:])
    return text


@st.composite
def step(draw) -> tuple[list[bytes], bool]:
    handle = draw(st.sampled_from(HANDLES))
    kind = draw(
        st.sampled_from(
            [
                "query",
                "query",
                "query",
                "imbalance",
                "renew",
                "remove-note",
                "bad-adds",
                "adds",
                "batch-invalid",
                "unknown",
                "debug",
                "start",
            ]
        )
    )
    form = draw(st.sampled_from(["plain", "plain", "positional", "spaced", "reordered", "duplicate"]))
    ident = draw(st.sampled_from([1, "x", None])) if kind in ("query", "imbalance") else 7
    if kind == "query":
        method, params = draw(st.sampled_from(QUERIES))
        texts = [written(method, {"scheduler": handle, **params}, ident, form)]
    elif kind == "imbalance":
        texts = [written(IMBALANCE, {"scheduler": handle}, ident, form)]
    elif kind == "renew":
        mode = draw(st.sampled_from(["static", "dynamic"]))
        shift = draw(st.sampled_from([0.0, 0.5]))
        texts = [
            written("scheduler.free", {"scheduler": handle}, 1, "plain"),
            written("scheduler.new", {"mode": mode, "scheduler": handle}, 2, "plain"),
            written(
                "scheduler.apply",
                {"scheduler": handle, "mutations": static_usage() if mode == "static" else usage(shift)},
                3,
                "plain",
            ),
        ]
    elif kind == "remove-note":  # a notification that changes the scheduler
        sid = f"vm:{draw(st.integers(100, 110))}"
        texts = [
            written("scheduler.remove_resource", {"scheduler": handle, "sid": sid}, None, "plain"),
            written("scheduler.remove_service_usage", {"scheduler": handle, "sid": sid}, None, "plain"),
        ]
    elif kind in ("adds", "bad-adds"):
        name = f"n{draw(st.integers(5, 7))}"
        adds = [
            ["add_node", name, {"cpu": 0.0, "maxcpu": 64, "mem": 0, "maxmem": 256 * GiB}],
            [
                "add_resource",
                f"vm:{draw(st.integers(200, 203))}",
                {"stats": {"cpu": 3.0, "maxcpu": 4, "mem": GiB, "maxmem": GiB}, "running": True, "current-node": name},
            ],
        ]
        if kind == "bad-adds":
            adds.append(
                [
                    "add_resource",
                    "vm:100",
                    {
                        "stats": {"cpu": 1.0, "maxcpu": 4, "mem": GiB, "maxmem": GiB},
                        "running": True,
                        "current-node": "n1",
                    },
                ]
            )
        texts = [written("scheduler.apply", {"scheduler": handle, "mutations": adds}, 5, "plain")]
    elif kind == "batch-invalid":
        method, params = draw(st.sampled_from(QUERIES))
        query = orjson.loads(written(method, {"scheduler": handle, **params}, 9, "plain"))
        texts = [orjson.dumps([1, {"jsonrpc": "2.0"}, query, {"jsonrpc": "2.0", "method": "nope", "id": 3}])]
    elif kind == "unknown":
        texts = [b'{"jsonrpc":"2.0","method":"scheduler.nothing","id":4,"params":{"scheduler":"a"}}', b"{oops"]
    elif kind == "debug":
        texts = [b'{"jsonrpc":"2.0","method":"debug.raise","id":6}']
    else:
        texts = [
            written(
                "scheduler.score_nodes_to_start_service",
                {"scheduler": handle, "service_stats": {"maxcpu": 1, "maxmem": GiB}},
                8,
                form,
            )
        ]
    return texts, draw(st.booleans())


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(step(), max_size=16))
def test_every_path_is_answered_as_without_foresight(steps):
    foreseeing, reference = Protocol(State(), True, foresight=True), Protocol(State(), True)
    setup = [written("scheduler.new", {"mode": "dynamic", "scheduler": h}, 1, "plain") for h in HANDLES]
    setup += [written("scheduler.apply", {"scheduler": h, "mutations": usage(0.0)}, 2, "plain") for h in HANDLES]
    for texts, idle in [(setup, True), *steps, *steps]:  # twice: the second time, guesses are made
        for text in texts:
            assert foreseeing.handle(text) == reference.handle(text), text[:200]
            if idle:
                foreseeing.foresee()
