"""HA's ``load_balance`` gates on one recorded round, for ``crs-bridge review`` (:mod:`crs_bridge.review`).

In HA's order (``ha-manager.md`` §7.4): a guest on the move (added with a target node) means no
balancing that round, and the hold counter stays as it was; an imbalance at or under the
threshold resets the counter; above it the counter counts rounds, and HA scores once it reaches
the hold duration (and counts anew); the best move (the scorer HA calls, with limit 1), none
without candidates; the margin, which the move's relative gain (imbalance - after) / imbalance
must reach. The threshold and margin rules are :func:`core.explain.explain_batch`'s (through
``explain_migrations``' answers), so a review and ``crs-bridge explain`` cannot disagree; the hold
counter lives here, as it lives in HA's manager and nowhere in the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .core.verdicts import MIGRATE, NO_CANDIDATES, NO_IMPROVEMENT, THRESHOLD_REACHED
from .review_settings import Settings

#: The gates of a round, in HA's order, by the name a decision carries when that gate decided:
#: ``motion`` (a guest on the move: no balancing), ``threshold``, ``hold``, ``no-candidates``,
#: ``margin`` stopped the round; ``moved``: every gate passed and HA queued the move.
GATES = ("motion", "threshold", "hold", "no-candidates", "margin", "moved")


@dataclass
class Decision:
    """One round under one set of settings: the gate that decided (:data:`GATES`), the imbalance
    (fraction, the formula used), the threshold, the hold counter as HA keeps it after this round
    (``counter``) and the count it reached at the hold gate (``held``, None when the round did not
    get there), the best move scored (``best``: sid, source, target, imbalance after (the
    scorer's, truncated), relative gain) if the round got to scoring, where its candidates came
    from (recorded|derived), the guests on the move, and the sentence saying it."""

    gate: str
    imbalance: float
    threshold: float
    margin: float
    hold: float
    counter: int
    held: int | None = None
    best: dict | None = None
    candidates: str | None = None
    moving: list[dict] = field(default_factory=list)
    message: str = ""

    @property
    def moved(self) -> bool:
        return self.gate == "moved"

    @property
    def outcome(self) -> tuple:
        """What the round came to: the gate, and the move when one was made."""
        return self.gate, (self.best["sid"], self.best["target"]) if self.moved else None

    def to_wire(self) -> dict:
        return {
            "decision": self.gate,
            "imbalance": self.imbalance,
            "threshold": self.threshold,
            "margin": self.margin,
            "hold": self.hold,
            "counter": self.counter,
            "held": self.held,
            "best": self.best,
            "candidates": self.candidates,
            "moving": self.moving,
            "message": self.message,
        }


def decide(
    settings: Settings,
    counter: int,
    current: dict,
    moving: list[dict],
    score: Callable[[], tuple[dict, str]],
) -> Decision:
    """HA's ``load_balance`` on one round: ``current`` is ``explain_migrations``' answer without
    candidates (the imbalance, and the threshold rule's verdict), ``counter`` the hold counter
    before the round, ``score()`` the answer with the candidates and where they came from."""
    imbalance = current["current"]["imbalance"]
    base = {"imbalance": imbalance, "threshold": settings.threshold, "margin": settings.margin, "hold": settings.hold}
    if moving:
        names = ", ".join(f"{m['sid']} {m['source']} -> {m['target']}" for m in moving[:3])
        more = f" and {len(moving) - 3} more" if len(moving) > 3 else ""
        message = f"a motion queued or running ({names}{more}): HA does not balance in this round"
        return Decision("motion", counter=counter, moving=moving, message=message, **base)
    if current["reason"] == THRESHOLD_REACHED:
        under = settings.threshold - imbalance
        message = f"imbalance {imbalance:.4f} at or under the threshold {settings.threshold:.4f} (by {under:.4f})"
        return Decision("threshold", counter=0, message=message, **base)
    held = counter + 1
    if held < settings.hold:
        message = (
            f"above the threshold (by {imbalance - settings.threshold:.4f}), round {held} of {settings.hold:g} held"
        )
        return Decision("hold", counter=held, held=held, message=message, **base)
    explanation, origin = score()
    if explanation["reason"] == NO_CANDIDATES:
        return Decision(
            "no-candidates", counter=0, held=held, candidates=origin, message="no candidate to move", **base
        )
    best = _best(explanation)
    if _stopped_by_margin(explanation, settings.margin):
        message = f"best move {_move(best)} gains {best['relative']:.1%}, under the margin of {settings.margin:.1%}"
        return Decision("margin", counter=0, held=held, best=best, candidates=origin, message=message, **base)
    message = f"moved {_move(best)}: imbalance {imbalance:.4f} -> {best['imbalance']:.4f} ({-best['relative']:+.1%})"
    return Decision("moved", counter=0, held=held, best=best, candidates=origin, message=message, **base)


def _stopped_by_margin(explanation: dict, margin: float) -> bool:
    """Whether HA's margin gate stops the scored move. The explanation's verdict, but for one
    case: no move lowers the imbalance and the best keeps it equal (a relative gain of exactly
    0), which HA, comparing the gain with the margin only, still makes at a margin of 0."""
    reason = explanation["reason"]
    if reason == NO_IMPROVEMENT:
        return not explanation["relative-improvement"] >= margin
    return reason != MIGRATE  # MARGIN_NOT_REACHED


def _best(explanation: dict) -> dict:
    chosen = explanation["chosen"][0]
    migration = chosen["migration"]
    return {
        "sid": migration["sid"],
        "source": migration["source-node"],
        "target": migration["target-node"],
        "imbalance": chosen["imbalance"],
        "relative": explanation["relative-improvement"],
    }


def _move(best: dict) -> str:
    return f"{best['sid']} {best['source']} -> {best['target']}"
