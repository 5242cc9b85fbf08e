"""Errors of the method surface that the protocol layer turns into JSON-RPC error codes.

The engine's own errors (:class:`core.errors.SchedulingError` -> -32000,
:class:`core.errors.InvalidInputError` -> -32602) pass through unchanged; these add what only
the bridge can get wrong: params that fail the wire schema, handles, per-mode methods.
"""

from __future__ import annotations

from pydantic import ValidationError

from .models import MUTATION_ARGS
from .records import UNION_TAGS

#: At most this many entries in an error's ``data.errors``.
MAX_ERROR_DETAILS = 20

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
    """Render a pydantic error location as a path: ``usage.nodes[0].maxcpu`` (``params`` if empty).

    Within a ``scheduler.apply`` entry the argument's name replaces its position:
    ``mutations[3].service.stats.maxcpu``, not ``mutations[3].static add_service[2].stats.maxcpu``.
    """
    path = ""
    args: tuple[str, ...] = ()  # argument names of the mutation entry just entered
    for part in loc:
        if isinstance(part, int) and 0 < part <= len(args):
            path += f".{args[part - 1]}"
            args = ()
        elif isinstance(part, int):
            path += f"[{part}]"
        elif part in MUTATION_ARGS:
            args = MUTATION_ARGS[part]
            continue
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
    def from_validation(cls, exc: ValidationError) -> ParamsError:
        """Wrap a pydantic error, each location as :func:`format_loc` writes it."""
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        return cls([(format_loc(err["loc"]), err["msg"]) for err in errors])


class MutationError(Exception):
    """Entry ``index`` (``method``) of a ``scheduler.apply`` failed with ``cause``, the engine's
    :class:`core.SchedulingError` or :class:`core.InvalidInputError`, whose field is then put
    under the entry (``mutations[3].nodename``); nothing of the call was applied."""

    def __init__(self, index: int, method: str, cause: Exception) -> None:
        field = getattr(cause, "field", None)
        if field is not None:
            cause = type(cause)(f"mutations[{index}].{field}", cause.problem)
        super().__init__(f"mutations[{index}] ({method}): {cause}")
        self.index = index
        self.method = method
        self.cause = cause


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

