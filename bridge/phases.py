"""Opt-in timing of a message's phases, for ``crs-bridge serve --trace``.

The code that handles a message calls :func:`mark` at the end of each phase (``decode``,
``validate``, ``snapshot``, ``candidates``, ``score``, ``run``: the rest of the method's work,
``encode``) when
:data:`timing` is true; the tracer brackets a message with :func:`start` and :func:`take`.
Without a tracer the timing costs a global lookup and a test per phase, and no call (a message's
way through the wire layer stays as short as its work). One message at a time (the server is
single-threaded).
"""

from __future__ import annotations

import time

_marks: list[tuple[str, float]] | None = None
#: Whether a message is being timed (callers mark phases only then).
timing = False


def start() -> None:
    """Start timing a message: the first phase begins now."""
    global _marks, timing
    _marks, timing = [("", time.perf_counter())], True


def mark(phase: str) -> None:
    """End ``phase`` now (the next phase begins); a no-op unless :data:`timing`."""
    if _marks is not None:
        _marks.append((phase, time.perf_counter()))


def take() -> dict[str, float]:
    """Stop timing; return seconds per phase in the order first seen (a phase marked more than
    once, e.g. in a batch, is summed)."""
    global _marks, timing
    marks, _marks, timing = _marks or [], None, False
    spent: dict[str, float] = {}
    for (_, begin), (phase, end) in zip(marks, marks[1:]):
        spent[phase] = spent.get(phase, 0.0) + end - begin
    return spent
