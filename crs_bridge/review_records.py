"""Reading a flight recorder directory for ``crs-bridge review`` (:mod:`crs_bridge.review`).

A directory holds one file per scheduler object (``CRSBridge::Recorder``; the format is in
:mod:`crs_bridge.replay`); HA builds one object per round. Each file is read once: its metadata,
the recorded answers ``review`` compares with, and the mutations up to the point HA judged the
round (its balancing query, else its last imbalance query, else its last mutation) kept as JSON
text for the engine. Files that are no round of the directory's cluster are left out, with why.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from .replay import RECORD_KEY

_FILE_NUMBER = re.compile(r"-(\d+)\.json$")
MODES = ("static", "dynamic")


class Skip(Exception):
    """A file that is not reviewed; the message says why, in a line."""


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
