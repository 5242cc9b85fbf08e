"""``crs-bridge review``: what HA decided in each recorded round, and what other settings would have.

A flight recorder directory (``CRSBridge::Recorder``; the format is in :mod:`crs_bridge.replay`)
holds one file per scheduler object, and HA builds one object per round. For each round, oldest
first, the review rebuilds the object's state at the point HA judged it (its balancing query,
else its last imbalance query, else its last mutation) on an in-process server (the same
validation and engine as ``crs-bridge serve``), and walks ``load_balance``'s gates in HA's order
(``ha-manager.md`` §7.4):

1. a guest on the move (added with a target node): HA does not balance this round, and its hold
   counter stays as it was;
2. threshold: imbalance at or under it resets the counter;
3. hold: the counter counts rounds above the threshold; HA scores once it reaches the hold
   duration, and starts counting anew;
4. the best move (one ``explain_migrations`` call, the scorer HA calls with limit 1), none
   without candidates;
5. margin: the move's relative gain (imbalance - after) / imbalance must reach the margin.

The threshold and margin rules are :func:`core.explain.explain_batch`'s (through
``explain_migrations``), so the review and ``crs-bridge explain`` cannot disagree; the hold counter
lives here, as it lives in HA's manager and nowhere in the engine.

Candidates are the recorded ones where HA scored in that round; elsewhere (HA stopped before
scoring, but other settings would not have) they are derived from the recorded state: every guest
not on the move, to every other node (HA's affinity rules are not in a recording).

A what-if judges every round on its own recorded state too: a move it would have made does not
change the later recordings. Its hold counter runs over the rounds with its own settings.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from .core.verdicts import MARGIN_NOT_REACHED, MIGRATE, NO_CANDIDATES, NO_IMPROVEMENT, THRESHOLD_REACHED
from .replay import RECORD_KEY
from .review_settings import Settings

#: The gates of a round, in HA's order, by the name a decision carries when that gate decided:
#: ``motion`` (a guest on the move: no balancing), ``threshold``, ``hold``, ``no-candidates``,
#: ``margin`` stopped the round; ``moved``: every gate passed and HA queued the move.
GATES = ("motion", "threshold", "hold", "no-candidates", "margin", "moved")
_FILE_NUMBER = re.compile(r"-(\d+)\.json$")
MODES = ("static", "dynamic")


class Skip(Exception):
    """A file that is not reviewed; the message says why, in a line."""


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """One round's recording: the file, when and by which process it was written, the scheduler
    mode and formula, the mutations up to the point HA judged (``journal``, as JSON text: what
    the engine reads, held as compactly as the file holds it), the recorded balancing query
    (``candidates``, JSON text, ``method``, its best move ``best``) if HA scored, and the
    recorded imbalance answer (``imbalance``) if HA asked for one."""

    path: str
    time: str
    pid: int
    mode: str
    formula: str
    journal: bytes
    nodes: frozenset[str]
    candidates: bytes | None = None
    method: str | None = None
    best: dict | None = None
    imbalance: float | None = None

    @property
    def order(self) -> tuple:
        match = _FILE_NUMBER.search(self.path)
        return (self.time, self.pid, int(match.group(1)) if match else 0, self.path)


def read_recording(path: str) -> Recording:
    """The round recorded in ``path``; :class:`Skip` saying why when it is none."""
    try:
        with open(path, "rb") as file:
            cluster = orjson.loads(file.read())
    except OSError as problem:
        raise Skip(f"cannot read it ({problem.strerror or problem})") from None
    except orjson.JSONDecodeError as problem:
        raise Skip(_json_problem(str(problem))) from None
    record = cluster.get(RECORD_KEY) if isinstance(cluster, dict) else None
    if not (
        isinstance(record, dict) and isinstance(record.get("calls"), list) and isinstance(record.get("journal"), list)
    ):
        raise Skip(f"not a flight recorder file (no '{RECORD_KEY}' with 'calls' and 'journal')")
    if record.get("mode") not in MODES:
        raise Skip(f"not a flight recorder file ('{RECORD_KEY}' has no mode static or dynamic)")
    try:
        return _recording(path, cluster)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as problem:
        raise Skip(f"a malformed recording ({problem!r})") from None


def _json_problem(text: str) -> str:
    if text.startswith("unexpected end of data") or "zero-length" in text:
        return f"truncated: the JSON ends early ({text}); a recorder interrupted, or a copy cut short"
    return f"not JSON ({text}): not a flight recorder file"


def _recording(path: str, cluster: dict) -> Recording:
    record = cluster[RECORD_KEY]
    calls, journal, decision = record["calls"], record["journal"], record.get("decision")
    imbalance_calls = [call for call in calls if call["method"] == "scheduler.calculate_node_imbalance"]
    if decision is not None:
        at = calls[decision]["at"]
    elif imbalance_calls:
        at = imbalance_calls[-1]["at"]
    else:
        at = len(journal)
    judged = journal[:at]
    recording = Recording(
        path=path,
        time=str(record.get("time", "")),
        pid=int(record.get("pid", 0)),
        mode=record["mode"],
        formula=record.get("imbalance", "raw"),
        journal=orjson.dumps(judged),
        nodes=_node_names(judged),
        imbalance=_result(imbalance_calls[-1]) if imbalance_calls else None,
    )
    if decision is None:
        return recording
    call = calls[decision]
    answer = _result(call)
    return replace(
        recording,
        candidates=orjson.dumps(cluster["candidates"]),
        method="topsis" if call["method"].endswith("_topsis") else "bruteforce",
        best=answer[0] if answer else None,
    )


def _result(call: dict) -> Any:
    answer = call.get("answer")
    return answer.get("result") if isinstance(answer, dict) else None


def _node_names(journal: Iterable[list]) -> frozenset[str]:
    names: dict[str, None] = {}
    for entry in journal:
        if entry[0] == "add_node":
            names[entry[1]] = None
        elif entry[0] == "remove_node":
            names.pop(entry[1], None)
    return frozenset(names)


def recording_paths(paths: Sequence[str]) -> list[str]:
    """The files to review: every file in each directory (not the recorder's hidden temporary
    files), and each path that is a file. OSError for a path that is neither."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            names = sorted(name for name in os.listdir(path) if not name.startswith("."))
            files += [os.path.join(path, name) for name in names if os.path.isfile(os.path.join(path, name))]
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise OSError(f"{path}: no such file or directory")
    return files


def read_rounds(paths: Sequence[str]) -> tuple[list[Recording], list[tuple[str, str]]]:
    """The recordings in ``paths`` (files, directories) of one cluster and one mode, oldest first,
    and the files left out with why: not a recording, truncated, another mode than most rounds'
    (mode of most rounds; a tie, the oldest round's), another cluster (no node shared, directly
    or through other rounds, with the cluster of most rounds)."""
    rounds, skipped = [], []
    for path in recording_paths(paths):
        try:
            rounds.append(read_recording(path))
        except Skip as why:
            skipped.append((path, str(why)))
    rounds.sort(key=lambda r: r.order)
    if not rounds:
        return [], skipped
    modes = Counter(r.mode for r in rounds)
    mode = max(modes, key=lambda m: (modes[m], m == rounds[0].mode))
    kept = []
    for r in rounds:
        if r.mode == mode:
            kept.append(r)
        else:
            skipped.append(
                (r.path, f"a {r.mode} round among {modes[mode]} {mode} rounds (mixed modes: reviewed {mode})")
            )
    cluster = _main_cluster(kept)
    reviewed = [r for r in kept if r.nodes & cluster or not r.nodes]
    for r in kept:
        if not (r.nodes & cluster or not r.nodes):
            skipped.append(
                (r.path, f"another cluster's round: its nodes ({_names(r.nodes)}) share none with {_names(cluster)}")
            )
    return reviewed, skipped


def _main_cluster(rounds: list[Recording]) -> frozenset[str]:
    """The node names of the largest group of rounds linked by shared nodes (a tie: the oldest's)."""
    groups: list[tuple[set[str], list[int]]] = []
    for index, r in enumerate(rounds):
        joined = [g for g in groups if g[0] & r.nodes]
        nodes, members = set(r.nodes), [index]
        for g in joined:
            nodes |= g[0]
            members += g[1]
            groups.remove(g)
        groups.append((nodes, members))
    nodes, _ = max(groups, key=lambda g: (len(g[1]), -min(g[1])))
    return frozenset(nodes)


def _names(nodes: Iterable[str], most: int = 4) -> str:
    names = sorted(nodes)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


# -- the engine -----------------------------------------------------------------------------


class _Engine:
    """An in-process server (the protocol ``crs-bridge serve`` speaks, without the pipe): the
    recorded mutations go through the same validation as they went on the daemon's server."""

    def __init__(self) -> None:
        from .bridge.protocol import Protocol
        from .bridge.schedulers import State

        self.protocol = Protocol(State())

    def ask(self, method: str, params: dict, raw: tuple[str, bytes] | None = None) -> Any:
        """The result of ``method`` with ``params`` and, if given, ``raw``: a member (name, JSON
        text) added to them as it is; :class:`Skip` with the server's message for an error."""
        encoded = orjson.dumps(params)
        if raw is not None:
            encoded = encoded[:-1] + b"," + orjson.dumps(raw[0]) + b":" + raw[1] + b"}"
        request = b'{"jsonrpc":"2.0","id":1,"method":' + orjson.dumps(method) + b',"params":' + encoded + b"}"
        response = orjson.loads(self.protocol.handle(request))
        self.protocol.release()
        if "error" in response:
            error = response["error"]
            data = error.get("data")
            raise Skip(f"the engine refuses it: {error.get('message')}" + (f" ({data})" if data else ""))
        return response["result"]

    def scheduler(self, recording: Recording, formula: str) -> str:
        handle = self.ask("scheduler.new", {"mode": recording.mode, "imbalance": formula})["scheduler"]
        try:
            self.ask("scheduler.apply", {"scheduler": handle}, ("mutations", recording.journal))
        except Skip:
            self.free(handle)
            raise
        return handle

    def moving(self, handle: str) -> list[dict]:
        """The guests on the move in the scheduler behind ``handle``: {sid, source, target}."""
        resources = self.protocol.state.scheduler(handle).usage.resources()
        return [
            {"sid": sid, "source": res.current, "target": res.target}
            for sid, res in resources.items()
            if res.target is not None
        ]

    def guests(self, handle: str) -> int:
        return len(self.protocol.state.scheduler(handle).usage.resources())

    def derived_candidates(self, handle: str) -> bytes:
        """Candidates derived from the scheduler's guests: every guest not on the move, alone, to
        every other node (node order)."""
        usage = self.protocol.state.scheduler(handle).usage
        nodes = usage.node_names()
        return orjson.dumps(
            [
                {"leader": sid, "resources": [sid], "nodes": [n for n in nodes if n != res.current]}
                for sid, res in usage.resources().items()
                if res.target is None and res.current in nodes
            ]
        )

    def explain(self, handle: str, candidates: bytes, settings: Settings) -> dict:
        """``explain_migrations``' answer for ``candidates`` (JSON text) with HA's checks of ``settings``."""
        params = {"scheduler": handle, "method": settings.method, "limit": 1}
        params |= {"threshold": settings.threshold, "margin": settings.margin}
        return self.ask("explain_migrations", params, ("candidates", candidates))

    def free(self, handle: str) -> None:
        self.ask("scheduler.free", {"scheduler": handle})
        self.protocol.state.drop_freed()


# -- deciding -------------------------------------------------------------------------------


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
    return reason == MARGIN_NOT_REACHED or reason != MIGRATE


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

    def judge(self, handle: str, recording: Recording, moving: list[dict]) -> tuple[Decision, list]:
        """The round's decision, and every node's load (as ``explain_migrations`` gives them)."""
        current = self.engine.explain(handle, b"[]", self.settings)

        def score() -> tuple[dict, str]:
            recorded = recording.candidates is not None
            candidates = recording.candidates if recorded else self.engine.derived_candidates(handle)
            return self.engine.explain(handle, candidates, self.settings), "recorded" if recorded else "derived"

        decision = decide(self.settings, self.counter, current, moving, score)
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
        judged = []
        for judge in judges:
            formula = judge.formula(recording)
            if formula not in handles:
                handles[formula] = engine.scheduler(recording, formula)
            judged.append(judge.judge(handles[formula], recording, engine.moving(handles[formula])))
            guests = engine.guests(handles[formula])
    finally:
        for handle in handles.values():
            engine.free(handle)
    (real, loads), what_if = judged[0], (judged[1][0] if len(judged) > 1 else None)
    notes = _contradictions(recording, real, judges[0])
    return RoundReview(number, recording, guests, loads, real, what_if, notes)


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
