"""Server limits: how large one message, one call and one JSON value may be.

Each limit has a default, an environment variable and a flag of ``crs-bridge serve`` (the flag
wins over the variable); ``bridge.info`` reports the limits in force. Past a limit a request is
refused with an error that names the limit and how to raise it, and the server goes on serving.

What the defaults cost (measured with the engine of this release, dynamic mode, 1024 nodes): a
100 MB request of 775k expanded candidates peaks at about 1.9 GB of memory in the server, one of
10M candidates as compact bundles at about 3.9 GB. Lower the limits on a small host.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import orjson

from ..core import CandidateColumns, CompactColumns
from .errors import ParamsError
from .transport import DEFAULT_MAX_MESSAGE_BYTES

#: orjson refuses JSON nested deeper than this (in C, without recursion in Python).
ORJSON_MAX_DEPTH = 1024


@dataclass(frozen=True)
class ServerLimits:
    """The limits one server enforces (all counts per message or per call, never per session).

    ``max_message_bytes``: one framed message body (bytes); larger ones get -32600 and are skipped
    without being held in memory. ``max_nodes``: entries of ``usage.nodes``. ``max_resources``:
    entries of ``usage.resources``, and separately the bundle members summed over a call's
    compact candidates. ``max_candidates``: expanded candidates of a call (a compact bundle counts
    once per target node). ``max_json_depth``: nesting of arrays and objects in one message (a
    batch adds one level; valid requests nest at most 7 deep), at most :data:`ORJSON_MAX_DEPTH`.

    The default depth is orjson's own limit, enforced in C while decoding, at no cost; nothing
    in the server walks input deeper than its schema, so no depth reaches Python's recursion
    limit. A lower depth is checked by the parser too, at a cost of about 0.1 ms for each
    message with more brackets than the limit (see :func:`decode`).
    """

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_nodes: int = 100_000
    max_resources: int = 1_000_000
    max_candidates: int = 10_000_000
    max_json_depth: int = ORJSON_MAX_DEPTH

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be a positive integer, got {value!r}")
        if self.max_json_depth > ORJSON_MAX_DEPTH:
            raise ValueError(f"max_json_depth must be at most {ORJSON_MAX_DEPTH}, got {self.max_json_depth}")

    def as_dict(self) -> dict[str, int]:
        """The limits by name, as ``bridge.info`` reports them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: What each limit bounds, for ``crs-bridge serve --help``.
HELP = {
    "max_message_bytes": "refuse larger messages (bytes; -32600)",
    "max_nodes": "most usage.nodes entries per call (-32602)",
    "max_resources": "most usage.resources entries, and bundle members, per call (-32602)",
    "max_candidates": "most expanded candidates per call (-32602)",
    "max_json_depth": f"deepest JSON nesting per message (-32600; at most {ORJSON_MAX_DEPTH})",
}


def flag(name: str) -> str:
    """The ``crs-bridge serve`` option of limit ``name``: ``max_nodes`` -> ``--max-nodes``."""
    return "--" + name.replace("_", "-")


def env_var(name: str) -> str:
    """The environment variable of limit ``name``: ``max_nodes`` -> ``CRS_BRIDGE_MAX_NODES``."""
    return "CRS_BRIDGE_" + name.upper()


def how_to_raise(name: str) -> str:
    """Advice naming the flag and the variable that set limit ``name``."""
    return f"raise it with 'crs-bridge serve {flag(name)} N' or {env_var(name)}=N"


def limits_from_env(environ: Mapping[str, str] = os.environ) -> ServerLimits:
    """Defaults overridden by the ``CRS_BRIDGE_MAX_*`` variables set in ``environ``
    (ValueError naming the variable for a value that is not a positive integer in range)."""
    values: dict[str, int] = {}
    for f in fields(ServerLimits):
        text = environ.get(env_var(f.name), "").strip()
        if text:
            try:
                values[f.name] = int(text)
            except ValueError:
                raise ValueError(f"{env_var(f.name)} must be a positive integer, got {text!r}") from None
    try:
        return ServerLimits(**values)
    except ValueError as exc:
        raise ValueError(f"{exc} (from the environment)") from None


# -- per call ----------------------------------------------------------------------------------


def check_call_sizes(params: Mapping[str, Any], limits: ServerLimits) -> None:
    """Refuse a call whose ``usage`` or ``candidates`` (raw, not yet validated) exceed ``limits``:
    ParamsError naming the field, the count, the limit and how to raise it. Cheap: it counts
    list lengths only, before the params are validated entry by entry."""
    usage = params.get("usage")
    if type(usage) is dict:
        _at_most(_length(usage.get("nodes")), "usage.nodes", "nodes", "max_nodes", limits.max_nodes)
        _at_most(_length(usage.get("resources")), "usage.resources", "resources", "max_resources", limits.max_resources)
    candidates = params.get("candidates")
    if type(candidates) is CandidateColumns:  # decoded by bridge.fastdecode
        _at_most(len(candidates), "candidates", "expanded candidates", "max_candidates", limits.max_candidates)
    elif type(candidates) is CompactColumns or (type(candidates) is list and candidates):
        expanded, members = candidate_counts(candidates)
        _at_most(expanded, "candidates", "expanded candidates", "max_candidates", limits.max_candidates)
        _at_most(members, "candidates", "bundle members", "max_resources", limits.max_resources)


def candidate_counts(candidates: list | CompactColumns) -> tuple[int, int]:
    """(expanded candidates, bundle members) of a raw candidate list (or of bundles that
    :mod:`bridge.fastdecode` decoded): a compact bundle counts once per entry of its ``nodes``;
    an expanded candidate (a record with ``sid`` and no ``leader`` first in the list, as the
    models decide the form) counts once."""
    if type(candidates) is CompactColumns:
        return sum(map(len, candidates.nodes)), sum(map(len, candidates.resources))
    first = candidates[0]
    if type(first) is dict and "leader" not in first and "sid" in first:
        return len(candidates), 0
    expanded = members = 0
    for bundle in candidates:
        if type(bundle) is dict:
            targets, resources = bundle.get("nodes"), bundle.get("resources")
            expanded += len(targets) if type(targets) is list else 0
            members += len(resources) if type(resources) is list else 0
    return expanded, members


def _length(value: Any) -> int:
    # Anything but a list is the models' to refuse, whatever its value.
    return len(value) if type(value) is list else 0


def _at_most(count: int, loc: str, what: str, name: str, limit: int) -> None:
    if count > limit:
        raise ParamsError([(loc, f"{count} {what} exceed the limit of {limit} per call ({how_to_raise(name)})")])


# -- nesting -----------------------------------------------------------------------------------


class TooDeep(ValueError):
    """A message nested deeper than the configured limit (it is valid JSON otherwise)."""


#: Messages up to this size (bytes) are decoded unpadded when their brackets are few.
_COUNT_BRACKETS_UP_TO = 1 << 16


def decode(message: bytes, max_depth: int) -> Any:
    """Decode one JSON message, refusing nesting deeper than ``max_depth`` (TooDeep).

    No Python recursion anywhere: orjson parses in C and refuses depth > 1024 by itself. A lower
    limit is checked by the same parser: the message is wrapped in ``1024 - max_depth`` arrays,
    so that it fails exactly when the message nests deeper than ``max_depth``. Messages with no
    more brackets than ``max_depth`` cannot be that deep and are decoded as they are (the usual
    small request pays two byte counts). Raises orjson.JSONDecodeError for invalid JSON, with the
    position in ``message`` itself.
    """
    pad = ORJSON_MAX_DEPTH - max_depth
    # A big message has more brackets than any depth limit: counting them (some 10 ms for 16 MB)
    # would only delay the padded decode.
    few_brackets = len(message) <= _COUNT_BRACKETS_UP_TO and message.count(b"[") + message.count(b"{") <= max_depth
    if pad == 0 or few_brackets:
        return _loads(message, max_depth)
    try:
        value = orjson.loads(b"".join((b"[" * pad, message, b"]" * pad)))
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise TooDeep(max_depth) from None
        return orjson.loads(message)  # raises again, with the position in the message itself
    for _ in range(pad):
        # A single element at every level, else the padding paired up with brackets of an
        # invalid message (``1],[2``): decode it alone to raise its own error.
        if len(value) != 1:
            return orjson.loads(message)
        value = value[0]
    return value


def _loads(message: bytes, max_depth: int) -> Any:
    try:
        return orjson.loads(message)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise TooDeep(max_depth) from None
        raise
