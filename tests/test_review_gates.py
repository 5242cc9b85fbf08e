"""HA's gates on one round (crs_bridge/review_gates.py), on ``explain_migrations`` answers of the
real engine (tests/test_review_ha.py checks whole recorded runs against HA's own logic): the order
of the gates, the hold counter across rounds, and the one place where HA's margin rule and the
explanation's verdict part (a best move that keeps the imbalance as it is, at a margin of 0)."""

from __future__ import annotations

import pytest

from crs_bridge.bridge.results import Explanation
from crs_bridge.bridge.wire import as_wire
from crs_bridge.core.candidates import CompactCandidate
from crs_bridge.core.explain import explain_migrations
from crs_bridge.core.modes import new_scheduler
from crs_bridge.core.stats import NodeStats, ResourceStats
from crs_bridge.review_gates import decide
from crs_bridge.review_settings import Settings
from tests import columns

GIB = 2**30


def scheduler(loads: dict[str, float]):
    """A dynamic scheduler of nodes with these cpu loads (cores of 16), a guest of 1 core on each
    loaded node per core."""
    s = new_scheduler("dynamic", "raw")
    for name, cpu in loads.items():
        s.add_node(name, NodeStats.checked(cpu, 16, 4 * GIB, 64 * GIB, where="node"))
    for name, cpu in loads.items():
        for i in range(int(cpu)):
            s.add_resource(f"vm:{name}-{i}", ResourceStats.checked(1.0, 4, GIB, 4 * GIB, where="r"), True, name)
    return s


def answers(s, settings: Settings):
    """(current, score): the answers ``decide`` reads, from the engine's explanation."""
    names = s.list_nodes()
    candidates = [
        CompactCandidate(sid, (sid,), tuple(n for n in names if n != r.current))
        for sid, r in s.usage.resources().items()
    ]

    def wire(cands) -> dict:
        explained = explain_migrations(s, columns(cands), settings.method, 1, settings.threshold, settings.margin)
        return as_wire(Explanation, explained)

    return wire([]), lambda: (wire(candidates), "derived")


def test_the_gates_in_ha_s_order_and_the_hold_counter():
    settings = Settings().changed({"hold": 2, "threshold": 0.3, "margin": 0.1}, "test")
    s = scheduler({"n1": 8, "n2": 0, "n3": 0})
    current, score = answers(s, settings)
    moving = [{"sid": "vm:x", "source": "n1", "target": "n2"}]
    assert decide(settings, 1, current, moving, score).gate == "motion"
    assert decide(settings, 1, current, moving, score).counter == 1  # kept, as HA skips load_balance
    first = decide(settings, 0, current, [], score)
    assert (first.gate, first.counter, first.held, first.best) == ("hold", 1, 1, None)
    second = decide(settings, first.counter, current, [], score)
    assert (second.gate, second.counter, second.held) == ("moved", 0, 2)
    assert second.best["source"] == "n1" and second.best["imbalance"] < current["current"]["imbalance"]
    balanced = scheduler({"n1": 2, "n2": 2, "n3": 2})
    current, score = answers(balanced, settings)
    under = decide(settings, 1, current, [], score)
    assert (under.gate, under.counter) == ("threshold", 0)


def test_a_gain_under_the_margin_stops_the_move():
    s = scheduler({"n1": 8, "n2": 0, "n3": 0})
    settings = Settings().changed({"hold": 1, "margin": 0.9}, "test")
    current, score = answers(s, settings)
    decision = decide(settings, 0, current, [], score)
    assert decision.gate == "margin" and 0 < decision.best["relative"] < 0.9


@pytest.mark.parametrize(("margin", "gate"), [(0.0, "moved"), (0.1, "margin")])
def test_a_move_that_keeps_the_imbalance_is_made_at_a_margin_of_0(margin, gate):
    """HA stops only when the relative gain is under the margin: a gain of exactly 0 passes a
    margin of 0, where the explanation says no move lowers the imbalance."""
    settings = Settings().changed({"hold": 1, "margin": margin}, "test")
    current = {"reason": "no-candidates", "current": {"imbalance": 0.5, "nodes": []}}
    explanation = {
        "reason": "no-improvement",
        "relative-improvement": 0.0,
        "chosen": [{"migration": {"sid": "vm:1", "source-node": "a", "target-node": "b"}, "imbalance": 0.5}],
    }
    decision = decide(settings, 0, current, [], lambda: (explanation, "recorded"))
    assert decision.gate == gate
