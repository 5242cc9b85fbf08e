"""What the wire layer's speed choices cost and save, in-process (docs/performance.md cites these).

1. Decoding a score request's params: msgspec straight from JSON into the generated structs (the
   server's way), against orjson then msgspec's conversion of the decoded JSON into them (the way
   before), orjson alone, and orjson followed by the pydantic models (the lax way; expanded
   candidates).
2. Compact candidates' target lists kept as JSON text and decoded once per distinct text (the
   server's way), against decoding every list (48 nodes, 10000 bundles, as an HA round at
   48 x 10000 sends them).
3. ``scheduler.apply``: the copy of a usage that a call works on, and a run of guest adds in one
   engine call (``Usage.add_resources``) against one ``add_resource`` at a time.
4. A small request from its bytes to its answer's (``Protocol.handle``, in process): an imbalance
   query on a scheduler of 4 nodes, the strict way and the lax way (the models), and what
   jsonrpcserver's dispatch takes of it (with the method's work, but not the decode).

Run: ``.venv/bin/python benchmarks/wire_costs.py``; best of several runs, in ms.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import orjson
from jsonrpcserver import dispatch_to_serializable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_e2e import Cluster, score_request  # noqa: E402

from crs_bridge.bridge import models  # noqa: E402
from crs_bridge.bridge.wire import ParamsDecoder  # noqa: E402
from crs_bridge.core import new_scheduler  # noqa: E402
from crs_bridge.core.candidates import numbered  # noqa: E402
from crs_bridge.core.stats import NodeStats, ResourceStats  # noqa: E402
from crs_bridge.core.usage import Resource  # noqa: E402


def best_ms(work: Callable[[], object], runs: int = 5) -> float:
    """The best time of ``runs`` runs of ``work``, with collections paused as the server pauses
    them while it handles a message."""
    best = float("inf")
    for _ in range(runs):
        gc.disable()
        began = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - began)
        gc.enable()
    return best * 1e3


def decoding(nodes: int, count: int) -> None:
    model = models.ScoreMigrationsParams
    decoder = ParamsDecoder(model)
    request = score_request(Cluster(nodes, count, 1), "expanded", "bruteforce")
    params = orjson.dumps(orjson.loads(request)["params"])

    def converted() -> object:
        for kind in decoder.kinds:  # as the decoder tries them
            try:
                return decoder.checked(msgspec.convert(orjson.loads(params), kind))
            except msgspec.ValidationError:
                continue
        raise AssertionError("no struct takes the params")

    straight = best_ms(lambda: decoder.decode(params))
    conversion = best_ms(converted)
    plain = best_ms(lambda: orjson.loads(params))
    validated = best_ms(lambda: model.model_validate(orjson.loads(params)), runs=3)
    print(
        f"decode {nodes}x{count} expanded: msgspec structs from JSON {straight:.1f}, orjson + conversion into "
        f"them {conversion:.1f}, orjson {plain:.1f}, orjson + pydantic {validated:.1f}"
    )


def target_lists() -> None:
    rng = random.Random(1)
    names = [f"node{i}" for i in range(48)]
    bundles = []
    for guest in range(10000):
        own = rng.randrange(48)
        bundles.append(
            {
                "leader": f"vm:{guest}",
                "nodes": [n for i, n in enumerate(names) if i != own],
                "resources": [f"vm:{guest}"],
            }
        )
    data = orjson.dumps(bundles)

    class AsText(msgspec.Struct):
        leader: str
        nodes: msgspec.Raw
        resources: list[str]

    class AsLists(msgspec.Struct):
        leader: str
        nodes: list[str]
        resources: list[str]

    texts, lists = msgspec.json.Decoder(list[AsText]), msgspec.json.Decoder(list[AsLists])
    one = msgspec.json.Decoder(tuple[str, ...])

    def by_text() -> None:
        _, distinct = numbered([bytes(b.nodes) for b in texts.decode(data)])
        [one.decode(text) for text in distinct]

    def by_list() -> None:
        numbered([tuple(b.nodes) for b in lists.decode(data)])

    print(f"10000 bundles' target lists (48 nodes): as text {best_ms(by_text):.1f}, as lists {best_ms(by_list):.1f}")


def applying(nodes: int, guests: int) -> None:
    stats = ResourceStats(0.5, 2.0, 1 << 28, 1 << 30)
    rows = [(f"vm:{i}", Resource(stats, True, f"n{i % nodes}", None)) for i in range(guests)]

    def fresh():
        scheduler = new_scheduler("dynamic", "raw")
        for i in range(nodes):
            scheduler.add_node(f"n{i}", NodeStats(1.0, 64, 1 << 30, 256 << 30))
        return scheduler

    def in_one_call() -> None:
        fresh().usage.add_resources(rows)

    def one_at_a_time() -> None:
        scheduler = fresh()
        for sid, r in rows:
            scheduler.add_resource(sid, r.stats, r.running, r.current, r.target)

    full = fresh()
    full.usage.add_resources(rows)
    print(
        f"apply {nodes}x{guests}: copy of the full usage {best_ms(full.usage.copy):.3f}; {guests} adds "
        f"in one call {best_ms(in_one_call):.2f}, one at a time {best_ms(one_at_a_time):.2f}"
    )


def handling() -> None:
    from crs_bridge.bridge.protocol import Protocol
    from crs_bridge.bridge.schedulers import State

    protocol = Protocol(State())
    protocol.handle(b'{"jsonrpc":"2.0","id":1,"method":"scheduler.new","params":{"mode":"static","scheduler":"s"}}')
    nodes = ",".join(f'["add_node","n{i}",16,68719476736]' for i in range(4))
    protocol.handle(
        b'{"jsonrpc":"2.0","id":2,"method":"scheduler.apply","params":{"scheduler":"s","mutations":[%s]}}'
        % nodes.encode()
    )
    query = b'{"jsonrpc":"2.0","id":3,"method":"scheduler.calculate_node_imbalance","params":{"scheduler":"s"}}'
    decoded = protocol._strictly(query)
    calls = 2000

    def per_call_us(work: Callable[[], object]) -> float:
        return best_ms(lambda: [work() for _ in range(calls)]) * 1e3 / calls

    strict = per_call_us(lambda: protocol.handle(query))
    dispatch = per_call_us(
        lambda: dispatch_to_serializable(
            query, protocol.methods, context=protocol.state, deserializer=lambda _: decoded, validator=lambda _: None
        )
    )
    protocol._strictly = lambda message: None
    lax = per_call_us(lambda: protocol.handle(query))
    print(
        f"a small request in process, us: the strict way {strict:.1f}, the lax way {lax:.1f}; "
        f"jsonrpcserver's dispatch with the call {dispatch:.1f}"
    )


if __name__ == "__main__":
    decoding(64, 10000)
    decoding(256, 100000)
    target_lists()
    applying(4, 300)
    applying(48, 10000)
    handling()
