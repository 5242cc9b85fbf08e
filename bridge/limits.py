"""Server limits: how large one message, one call and one JSON value may be.

Each limit has a default, an environment variable and a flag of ``crs-bridge serve`` (named here,
read by :mod:`crs_bridge.cli`: the flag wins over the variable); ``bridge.info`` reports the
limits in force. Past a limit a request is refused with an error that names the limit and how to
raise it, and the server goes on serving.

What the defaults cost (measured with the engine of this release, dynamic mode, 1024 nodes): a
100 MB request of 775k expanded candidates peaks at about 1.9 GB of memory in the server, one of
10M candidates as compact bundles at about 3.9 GB. Lower the limits on a small host.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .transport import DEFAULT_MAX_MESSAGE_BYTES

#: orjson refuses JSON nested deeper than this (in C, without recursion in Python).
ORJSON_MAX_DEPTH = 1024
#: orjson reads integers up to this exactly, larger ones as floats.
ORJSON_MAX_INT = 2**64 - 1


#: What each limit of :class:`ServerLimits` bounds: ``bridge.info``'s schema and ``crs-bridge serve
#: --help`` say it in these words.
LIMITS = {
    "max_message_bytes": "bytes of one message; larger ones are answered with -32600",
    "max_nodes": "most entries of usage.nodes in one call (more: -32602)",
    "max_resources": "most entries of usage.resources, and most bundle members over all candidates, in one call"
    " (more: -32602)",
    "max_candidates": "most expanded candidates in one call (a bundle counts once per target; more: -32602)",
    "max_json_depth": "deepest nesting of arrays and objects in one message"
    f" (more: -32600; at most {ORJSON_MAX_DEPTH})",
}


@dataclass(frozen=True)
class ServerLimits:
    """The limits one server enforces (all counts per message or per call, never per session;
    what each bounds: :data:`LIMITS`). A message over ``max_message_bytes`` is skipped without
    being held in memory.

    The default depth is orjson's own limit, enforced in C while decoding, at no cost; nothing
    in the server walks input deeper than its schema (a valid request nests at most 6 levels, a
    batch 7: what the strict way takes, see :meth:`bridge.protocol.Protocol._strictly`), so no
    depth reaches Python's recursion limit. A lower depth is checked by the parser too, which
    costs a message with more brackets than the limit a second pass (see
    :func:`bridge.protocol.decode_json`).
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


def flag(name: str) -> str:
    """The ``crs-bridge serve`` option of limit ``name``: ``max_nodes`` -> ``--max-nodes``."""
    return "--" + name.replace("_", "-")


def env_var(name: str) -> str:
    """The environment variable of limit ``name``: ``max_nodes`` -> ``CRS_BRIDGE_MAX_NODES``."""
    return "CRS_BRIDGE_" + name.upper()


def how_to_raise(name: str) -> str:
    """Advice naming the flag and the variable that set limit ``name``."""
    return f"raise it with 'crs-bridge serve {flag(name)} N' or {env_var(name)}=N"
