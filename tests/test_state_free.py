"""scheduler.free: the handle is gone at once, the scheduler's memory only when the server next
waits for input (State.drop_freed, from serve), and a client that never lets it wait does not
make it keep more than a few."""

from __future__ import annotations

import gc
import weakref

import orjson

from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.protocol import Protocol
from crs_bridge.bridge.schedulers import State


def call(protocol: Protocol, method: str, params: dict) -> dict:
    message = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return orjson.loads(protocol.handle(message))


def new_and_free(protocol: Protocol, handle: str) -> weakref.ref:
    call(protocol, "scheduler.new", {"mode": "static", "scheduler": handle})
    scheduler = weakref.ref(protocol.state.schedulers[handle])
    assert call(protocol, "scheduler.free", {"scheduler": handle})["result"] is True
    return scheduler


def test_a_freed_handle_is_unknown_at_once_and_its_scheduler_goes_when_dropped():
    gc.collect()
    protocol = Protocol(State(limits=ServerLimits()))
    scheduler = new_and_free(protocol, "a")
    answer = call(protocol, "scheduler.list_nodes", {"scheduler": "a"})
    assert answer["error"]["code"] == -32001 and "'a'" in answer["error"]["message"]
    assert scheduler() is not None  # kept until the server waits
    protocol.state.drop_freed()
    assert scheduler() is None


def test_freed_schedulers_kept_for_later_are_a_few_at_most():
    protocol = Protocol(State(limits=ServerLimits()))
    freed, most_alive = [], 0
    for i in range(20):
        freed.append(new_and_free(protocol, f"h{i}"))
        most_alive = max(most_alive, sum(ref() is not None for ref in freed))
    assert 1 < most_alive <= 5
    protocol.state.drop_freed()
    assert all(ref() is None for ref in freed)
