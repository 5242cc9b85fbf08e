"""``crs-bridge replay FILE``: re-run a flight recorder file on a fresh server, answer by answer;
and ``plan``/``explain`` of a flight recorder file: the decision on the state the daemon had.

The Perl drop-in's flight recorder (``CRSBridge::Recorder``, on with ``CRS_BRIDGE_RECORD=DIR``)
writes one file per scheduler object: a CLUSTER for ``crs-bridge plan`` and ``explain`` whose
``candidates`` are those of the object's last balancing query (the decision), with its
``method``, ``limit`` and the object's ``imbalance`` formula, and whose ``record`` holds the rest:

``mode``, ``imbalance``
    the object's mode and formula (``scheduler.new``);
``journal``
    the object's mutations in order, as ``scheduler.apply`` entries ``[method, args...]``;
``calls``
    each query in order: ``at`` (mutations applied before it), ``method`` (the server's full
    name), ``params`` (without the handle; ``"candidates": "@candidates"`` stands for the file's
    ``candidates``) and ``answer``, the response as the server wrote it (or, for ``list_nodes``
    and ``contains_node``, which the client answers itself, ``{"result": ...}``); a call that
    got no answer (the server died or hung) has ``no-answer`` instead and is not compared;
``decision``
    the index in ``calls`` of the decision (null: none; the state is then the whole journal).

Instead of a ``usage`` snapshot, plan and explain build the object's state at the decision on
their server from the journal (:func:`remote_call`): the very state the daemon's server had,
to the last bit, removals and legacy adds included, at no cost to the daemon's round.

Replay applies the mutations and sends every call to a new server, and compares each answer
with the recorded one bit for bit: the same JSON types, floats with the same bits (``-0.0`` is
not ``0.0``), errors with the same code, message and data. Exit 0 when all match; 1 at the first
difference (or a mutation the server refuses), which is shown; 2 for a file that cannot be read
or is no recording.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .remote import (
    EXIT_NO_ANSWER,
    EXIT_OK,
    EXIT_RPC_ERROR,
    EXIT_USAGE,
    Server,
    call_fresh_server,
    common_options,
    json_dumps,
    read_params,
    say,
)

#: ``request(method, params) -> response``: one request to the command's server.
Request = Callable[[str, Any], dict]

#: The key of a cluster file that holds the recording (plan and explain leave it aside).
RECORD_KEY = "record"
#: Stands for the file's top-level ``candidates`` in a call's params.
CANDIDATES_REF = "@candidates"
#: Most mutations sent in one ``scheduler.apply``.
_APPLY_CHUNK = 1000
#: The modes of a scheduler.
_MODES = ("static", "dynamic")
#: What reading a recording that lacks a key or has one of the wrong type raises.
_MALFORMED = (KeyError, IndexError, TypeError, AttributeError)


def add_replay_command(commands: Any) -> None:
    """Register ``replay`` on the CLI's subcommands."""
    replay = commands.add_parser(
        "replay", help="re-run a flight recorder file on a fresh server and check every answer is bit-identical"
    )
    replay.add_argument("file", help="a file the Perl drop-in's flight recorder wrote (FILE or @FILE)")
    common_options(replay)
    replay.set_defaults(run=_replay_command)


class Difference(Exception):
    """A replayed answer (or mutation) that differs from the recording; the message says where."""


def _replay_command(args: argparse.Namespace) -> int:
    try:
        recording = load(args.file)
    except (OSError, ValueError) as exc:
        say(args, f"cannot read {args.file}: {exc}")
        return EXIT_USAGE
    try:
        compared, local = replay(recording, args.trace)
    except Difference as difference:
        say(args, str(difference))
        return EXIT_RPC_ERROR
    except _MALFORMED as problem:
        say(args, f"cannot read {args.file}: a malformed recording ({problem!r})")
        return EXIT_USAGE
    calls = len(recording[RECORD_KEY]["calls"])
    print(f"{args.file}: {compared} of {calls} answers replayed, all bit-identical ({local} answered by the client)")
    return EXIT_OK


def load(path: str) -> dict:
    """The recording in ``path`` (``@`` in front is allowed); ValueError when it is none."""
    cluster = read_params(path if path.startswith("@") else "@" + path)
    record = cluster.get(RECORD_KEY) if isinstance(cluster, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("calls"), list):
        raise ValueError(f"not a flight recorder file (no '{RECORD_KEY}' with 'calls')")
    if record.get("mode") not in _MODES or not isinstance(record.get("journal"), list):
        raise ValueError(f"'{RECORD_KEY}' needs 'mode' (static or dynamic) and 'journal'")
    return cluster


def replay(recording: dict, trace: str | None = None) -> tuple[int, int]:
    """Re-run the recording on a new server (``trace``: its ``--trace``): (answers compared, of
    which the client answered itself). Raises :class:`Difference` at the first answer that differs."""
    record = recording[RECORD_KEY]
    mutations = record["journal"]
    compared = local = applied = 0
    with _server(trace) as request:
        handle = _new(request, record)
        for number, call in enumerate(record["calls"], 1):
            at = call["at"]
            _apply(request, handle, mutations, applied, at)
            applied = max(applied, at)
            params = {"scheduler": handle, **call["params"]}
            if params.get("candidates") == CANDIDATES_REF:
                params["candidates"] = recording["candidates"]
            got = request(call["method"], params)
            if "answer" not in call:
                continue
            difference = _answer_difference(call["answer"], got)
            if difference:
                raise Difference(f"call {number} ({call['method']}, after {at} mutations): {difference}")
            compared += 1
            local += "jsonrpc" not in call["answer"]
        _apply(request, handle, mutations, applied, len(mutations))
    return compared, local


def remote_call(args: argparse.Namespace, method: str, params: dict) -> tuple[int, Any]:
    """``remote.call_fresh_server`` for plan and explain: a cluster with a recording (``params`` hold
    its ``record``) is the recorded object at its decision, built on the server from its journal
    and named by its handle; any other cluster goes as it is."""
    record = params.pop(RECORD_KEY, None)
    if record is None or "usage" in params:
        return call_fresh_server(args, method, params)

    def rebuilt(server: Server) -> dict:
        decision = record["decision"]
        at = record["calls"][decision]["at"] if decision is not None else len(record["journal"])
        request = _requester(server)
        handle = _new(request, record)
        _apply(request, handle, record["journal"], 0, at)
        return {"scheduler": handle}

    try:
        return call_fresh_server(args, method, params, prepare=rebuilt)
    except Difference as problem:
        say(args, f"cannot rebuild the recorded object: {problem}")
        return EXIT_NO_ANSWER, None
    except _MALFORMED as problem:
        say(args, f"a malformed flight recorder file ({problem!r})")
        return EXIT_USAGE, None


def recorded_node_count(cluster: dict) -> int | None:
    """How many nodes a recording's object has at its decision (None: no readable recording)."""
    try:
        record = cluster[RECORD_KEY]
        decision = record["decision"]
        at = record["calls"][decision]["at"] if decision is not None else len(record["journal"])
        methods = [entry[0] for entry in record["journal"][:at]]
    except _MALFORMED:
        return None
    return methods.count("add_node") - methods.count("remove_node")


def _new(request: Request, record: dict) -> str:
    formula = {"imbalance": record["imbalance"]} if "imbalance" in record else {}
    response = request("scheduler.new", {"mode": record["mode"], **formula})
    if "error" in response:
        raise Difference(f"scheduler.new failed: {response['error'].get('message')}")
    return response["result"]["scheduler"]


def _answer_difference(expected: dict, got: dict) -> str | None:
    """Where a replayed response differs from the recorded one: their results, or their errors."""
    member = "result" if "result" in expected else "error"
    if member not in got:
        return f"expected {member} {_short(expected.get(member))}, got {_short(got)}"
    return _difference(expected[member], got[member], member)


def _apply(request: Request, handle: str, mutations: list, start: int, end: int) -> None:
    for first in range(start, end, _APPLY_CHUNK):
        chunk = mutations[first : min(first + _APPLY_CHUNK, end)]
        response = request("scheduler.apply", {"scheduler": handle, "mutations": chunk})
        if "error" in response:
            error = response["error"]
            index = first + ((error.get("data") or {}).get("index") or 0)
            raise Difference(f"mutation {index + 1} ({_short(mutations[index])}) refused: {error.get('message')}")


def _difference(expected: Any, got: Any, where: str) -> str | None:
    """The first place where ``got`` is not bit-identical to ``expected`` (None: identical)."""
    if type(expected) is not type(got):
        return f"{where}: expected {_short(expected)}, got {_short(got)}"
    if isinstance(expected, float):
        same = expected.hex() == got.hex()  # bits, not value: -0.0 differs from 0.0, NaN matches NaN
    elif isinstance(expected, dict):
        for key in [*expected, *(key for key in got if key not in expected)]:
            found = _difference(expected.get(key), got.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    elif isinstance(expected, list):
        if len(expected) != len(got):
            return f"{where}: expected {len(expected)} entries, got {len(got)}"
        for index, (one, other) in enumerate(zip(expected, got)):
            found = _difference(one, other, f"{where}[{index}]")
            if found:
                return found
        return None
    else:
        same = expected == got
    return None if same else f"{where}: expected {_short(expected)}, got {_short(got)}"


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, float) else json_dumps(value)
    return text if len(text) <= 200 else text[:200] + "..."


@contextmanager
def _server(trace: str | None) -> Iterator[Request]:
    """A fresh server (the CLI's); yields its :data:`Request`."""
    with Server(trace) as server:
        yield _requester(server)


def _requester(server: Server) -> Request:
    """``server``'s requests; a server that ends without answering is a :class:`Difference`."""

    def request(method: str, params: Any) -> dict:
        response = server.ask(method, params)
        if response is None:
            raise Difference(f"the server ended during {method} (exit status {server.client.close()})")
        return response

    return request
