"""Errors of the method surface that the protocol layer turns into JSON-RPC error codes.

The engine's own errors (:class:`core.errors.SchedulingError` -> -32000,
:class:`core.errors.InvalidInputError` -> -32602) pass through unchanged; these add what only
the bridge can get wrong: params that fail the wire schema, handles, per-mode methods.
"""

from __future__ import annotations

from pydantic import ValidationError

from .models import UNION_TAGS

#: Names echoed in error messages (fields, methods, handles) are cut to this many characters.
MAX_ECHOED_NAME = 100


def shorten(name: object, limit: int = MAX_ECHOED_NAME) -> str:
    """``name`` as text, cut to ``limit`` characters with a note of its length: an error must not
    echo a 100 MB key back."""
    text = name if isinstance(name, str) else str(name)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} characters)"


def format_loc(loc: tuple) -> str:
    """Render a pydantic error location as a path: ``usage.nodes[0].maxcpu`` (``params`` if empty)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in UNION_TAGS:
            part = shorten(part)
            path += f".{part}" if path else part
    return path or "params"


class ParamsError(Exception):
    """Params that fail validation: ``errors`` lists ``(loc, msg)`` pairs, each naming a field."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))
        self.errors = errors

    @classmethod
    def from_validation(cls, exc: ValidationError, prefix: str = "") -> ParamsError:
        """Wrap a pydantic error; ``prefix`` (e.g. ``stats``) is put before every location."""
        errors = []
        for err in exc.errors(include_url=False, include_input=False, include_context=False):
            loc = format_loc(err["loc"])
            if prefix:
                loc = prefix if loc == "params" else f"{prefix}.{loc}"
            errors.append((loc, err["msg"]))
        return cls(errors)


class UnknownHandleError(LookupError):
    """A scheduler handle that was never issued or was freed."""

    def __init__(self, handle: str) -> None:
        handle = shorten(handle)
        super().__init__(f"unknown scheduler handle '{handle}' (never created or already freed)")
        self.handle = handle


class MethodUnavailableError(LookupError):
    """A ``scheduler.*`` method the handle's mode does not have (e.g. ``add_service`` on dynamic)."""

    def __init__(self, method: str, mode: str, handle: str) -> None:
        super().__init__(f"method '{method}' is not available for {mode} scheduler '{handle}'")
        self.method = method
        self.mode = mode
        self.handle = handle
