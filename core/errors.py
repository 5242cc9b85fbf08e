"""Errors raised by the scheduling engine.

Two families, kept apart because callers answer them differently:

* :class:`SchedulingError` carries upstream's own message text (``node 'n1' already
  exists``); the bridge forwards it verbatim (JSON-RPC code -32000).
* :class:`InvalidInputError` is crs-bridge's own: a value upstream would have turned into
  NaN or garbage (product decision 4). It names the offending field (code -32602).
"""

from __future__ import annotations


class SchedulingError(Exception):
    """A semantic error with upstream's exact message (duplicate node, unknown node, ...)."""


class InvalidInputError(ValueError):
    """A value the engine refuses; ``field`` names it, ``problem`` says what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
