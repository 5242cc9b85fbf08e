"""``crs-bridge review``: what HA decided in each recorded round, and what other settings would have.

For each round of a flight recorder directory (:mod:`crs_bridge.review_records` reads them),
oldest first, the review rebuilds the scheduler object's state at the point HA judged it on an
in-process server (the same validation and engine as ``crs-bridge serve``) and walks
``load_balance``'s gates in HA's order (:mod:`crs_bridge.review_gates`), with the review's
settings and, if asked, a what-if's beside them.

Candidates are the recorded ones where HA scored in that round; elsewhere (HA stopped before
scoring, but other settings would not have) they are derived from the recorded state: every guest
not on the move, to every other node (HA's affinity rules are not in a recording).

A what-if judges every round on its own recorded state too: a move it would have made does not
change the later recordings. Its hold counter runs over the rounds with its own settings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .review_gates import Decision, decide
from .review_records import Recording, Skip
from .review_settings import Settings

# -- the engine -----------------------------------------------------------------------------


class _Engine:
    """An in-process server (the protocol ``crs-bridge serve`` speaks, without the pipe): the
    recorded mutations go through the same validation as they went on the daemon's server."""

    def __init__(self) -> None:
        from .bridge.protocol import Protocol
        from .bridge.schedulers import State

        self.protocol = Protocol(State())

    def ask(self, method: str, params: dict) -> Any:
        """The result of ``method`` with ``params`` (recorded JSON text in them as
        ``orjson.Fragment``, written as it was read); :class:`Skip` with the server's message for
        an error."""
        request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = orjson.loads(self.protocol.handle(orjson.dumps(request)))
        self.protocol.release()
        if "error" in response:
            error = response["error"]
            data = error.get("data")
            raise Skip(f"the engine refuses it: {error.get('message')}" + (f" ({data})" if data else ""))
        return response["result"]

    def scheduler(self, recording: Recording, formula: str) -> str:
        """A new scheduler of ``recording``'s mode and ``formula`` with its journal applied: its handle."""
        handle = self.ask("scheduler.new", {"mode": recording.mode, "imbalance": formula})["scheduler"]
        try:
            self.ask("scheduler.apply", {"scheduler": handle, "mutations": orjson.Fragment(recording.journal)})
        except Skip:
            self.free(handle)
            raise
        return handle

    def placement(self, handle: str) -> Placement:
        """The nodes and guests of the scheduler behind ``handle``. The one read of a scheduler's
        state past the protocol: no method answers where each guest is, and the review needs it
        (guests on the move, candidates where HA did not score)."""
        usage = self.protocol.state.scheduler(handle).usage
        return Placement(usage.node_names(), {sid: (r.current, r.target) for sid, r in usage.resources().items()})

    def explain(self, handle: str, candidates: bytes, settings: Settings) -> dict:
        """``explain_migrations``' answer for ``candidates`` (JSON text) with HA's checks of ``settings``."""
        params = {
            "scheduler": handle,
            "candidates": orjson.Fragment(candidates),
            "method": settings.method,
            "limit": 1,
            "threshold": settings.threshold,
            "margin": settings.margin,
        }
        return self.ask("explain_migrations", params)

    def free(self, handle: str) -> None:
        """Free the scheduler behind ``handle``, and its memory now (the server does that before it
        waits for input; this one never waits)."""
        self.ask("scheduler.free", {"scheduler": handle})
        self.protocol.state.drop_freed()


@dataclass(frozen=True)
class Placement:
    """A scheduler's node names (its order) and guests: sid -> (current node, target node or None)."""

    nodes: list[str]
    guests: dict[str, tuple[str, str | None]]

    def moving(self) -> list[dict]:
        """The guests on the move: {sid, source, target}."""
        return [
            {"sid": sid, "source": current, "target": target}
            for sid, (current, target) in self.guests.items()
            if target is not None
        ]

    @functools.cached_property
    def derived_candidates(self) -> bytes:
        """Candidates (JSON text): every guest not on the move, alone, to every other node (node
        order). Built once, for all of the round's judges: a round of thousands of guests makes it big."""
        return orjson.dumps(
            [
                {"leader": sid, "resources": [sid], "nodes": [n for n in self.nodes if n != current]}
                for sid, (current, target) in self.guests.items()
                if target is None and current in self.nodes
            ]
        )


# -- the review -----------------------------------------------------------------------------


@dataclass
class RoundReview:
    """A reviewed round: its number (1 = oldest), recording, guest count, every node's load at
    the judged point (``explain_migrations``' ``current.nodes``), the decision under the review's
    settings, under the what-if's, and where the recording contradicts the review's settings."""

    number: int
    recording: Recording
    guests: int
    loads: list[dict]
    real: Decision
    what_if: Decision | None = None
    notes: list[str] = field(default_factory=list)

    def to_wire(self) -> dict:
        r = self.recording
        return {
            "round": self.number,
            "file": r.path,
            "time": r.time,
            "mode": r.mode,
            "imbalance-formula": r.formula,
            "nodes": len(self.loads),
            "guests": self.guests,
            **self.real.to_wire(),
            "node-loads": self.loads,
            "what-if": None if self.what_if is None else self._what_if_wire(),
            "notes": self.notes,
        }

    def _what_if_wire(self) -> dict:
        return {**self.what_if.to_wire(), "differs": self.differs}

    @property
    def differs(self) -> bool:
        """Whether the what-if decides this round otherwise than the settings do."""
        return self.what_if is not None and self.what_if.outcome != self.real.outcome


@dataclass
class Review:
    """The rounds reviewed (oldest first), the files skipped (path, why), the settings and the
    what-if's (None: none asked)."""

    settings: Settings
    what_if: Settings | None
    rounds: list[RoundReview]
    skipped: list[tuple[str, str]]

    def summary(self) -> dict:
        """Rounds; rounds above the threshold; moves; the longest stretch of consecutive rounds
        above the threshold (length, first and last round); the what-if's moves and the rounds it
        decides otherwise; rounds whose recording contradicts the settings; files skipped."""
        above = [r.real.imbalance > r.real.threshold for r in self.rounds]
        length, first = 0, None
        run_start = None
        for index, is_above in enumerate(above + [False]):
            if is_above and run_start is None:
                run_start = index
            elif not is_above and run_start is not None:
                if index - run_start > length:
                    length, first = index - run_start, run_start
                run_start = None
        summary = {
            "rounds": len(self.rounds),
            "above-threshold": sum(above),
            "moves": sum(r.real.moved for r in self.rounds),
            "longest-above": {
                "rounds": length,
                "first": None if first is None else first + 1,
                "last": None if first is None else first + length,
            },
            "contradicted": sum(bool(r.notes) for r in self.rounds),
            "skipped": len(self.skipped),
        }
        if self.what_if is not None:
            summary["what-if-moves"] = sum(bool(r.what_if and r.what_if.moved) for r in self.rounds)
            summary["differ"] = len(self.differing())
        return summary

    def differing(self) -> list[RoundReview]:
        """The rounds the what-if decides otherwise than the settings do."""
        return [r for r in self.rounds if r.differs]

    def to_wire(self) -> dict:
        return {
            "settings": self.settings.to_wire(),
            "what-if": None if self.what_if is None else self.what_if.to_wire(),
            "rounds": [r.to_wire() for r in self.rounds],
            "summary": self.summary(),
            "skipped": [{"file": path, "reason": why} for path, why in self.skipped],
        }


class _Judge:
    """One set of settings over the rounds: its hold counter runs from round to round."""

    def __init__(self, engine: _Engine, settings: Settings) -> None:
        self.engine, self.settings, self.counter = engine, settings, 0

    def formula(self, recording: Recording) -> str:
        return self.settings.imbalance or recording.formula

    def judge(self, handle: str, recording: Recording, placement: Placement) -> tuple[Decision, list]:
        """The round's decision, and every node's load (as ``explain_migrations`` gives them)."""
        current = self.engine.explain(handle, b"[]", self.settings)

        def score() -> tuple[dict, str]:
            recorded = recording.candidates is not None
            candidates = recording.candidates if recorded else placement.derived_candidates
            return self.engine.explain(handle, candidates, self.settings), "recorded" if recorded else "derived"

        decision = decide(self.settings, self.counter, current, placement.moving(), score)
        self.counter = decision.counter
        return decision, current["current"]["nodes"]


def review(
    rounds: Sequence[Recording],
    skipped: list[tuple[str, str]],
    settings: Settings,
    what_if: Settings | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Review:
    """Judge ``rounds`` (oldest first) with ``settings`` and, if given, ``what_if``. A round the
    engine refuses (a mutation it rejects) joins ``skipped``. ``progress(done, total)`` is called
    after each round."""
    engine = _Engine()
    judges = [_Judge(engine, settings)] + ([_Judge(engine, what_if)] if what_if is not None else [])
    reviewed: list[RoundReview] = []
    for index, recording in enumerate(rounds, 1):
        try:
            reviewed.append(_round(engine, judges, recording, len(reviewed) + 1))
        except Skip as why:
            skipped.append((recording.path, str(why)))
        if progress is not None:
            progress(index, len(rounds))
    return Review(settings, what_if, reviewed, skipped)


def _round(engine: _Engine, judges: list[_Judge], recording: Recording, number: int) -> RoundReview:
    handles: dict[str, str] = {}
    try:
        for judge in judges:
            formula = judge.formula(recording)
            if formula not in handles:
                handles[formula] = engine.scheduler(recording, formula)
        # One journal places the guests alike under any formula.
        placement = engine.placement(next(iter(handles.values())))
        judged = [judge.judge(handles[judge.formula(recording)], recording, placement) for judge in judges]
    finally:
        for handle in handles.values():
            engine.free(handle)
    (real, loads), what_if = judged[0], (judged[1][0] if len(judged) > 1 else None)
    notes = _contradictions(recording, real, judges[0])
    return RoundReview(number, recording, len(placement.guests), loads, real, what_if, notes)


def _contradictions(recording: Recording, real: Decision, judge: _Judge) -> list[str]:
    """Where the recording says HA did otherwise than these settings: HA scored where they stop
    before scoring, or the reverse (HA asked for the imbalance and did not score); HA scored with
    another method; or its imbalance answer differs from the one recomputed."""
    notes = []
    scored = real.gate in ("no-candidates", "margin", "moved")
    if recording.candidates is not None and not scored:
        notes.append(f"HA scored a move in this round, these settings stop at the {real.gate} gate")
    elif recording.candidates is None and scored and recording.imbalance is not None:
        notes.append(f"HA did not score in this round, these settings get to the {real.gate} gate")
    if recording.method is not None and recording.method != judge.settings.method:
        notes.append(f"HA scored with {recording.method}, these settings with {judge.settings.method}")
    if (
        recording.imbalance is not None
        and judge.formula(recording) == recording.formula
        and recording.imbalance != real.imbalance
    ):
        notes.append(f"HA's imbalance {recording.imbalance!r} differs from the recomputed {real.imbalance!r}")
    return notes
