"""JSON-RPC 2.0 on top of the method surface: decoding, envelope checks, dispatch, error codes.

:meth:`Protocol.handle` takes one message (bytes, already unframed) and returns the response
bytes, or None when nothing is to be answered (a notification, or a batch of notifications).

* Decoding and encoding use orjson. A message that is not JSON gets -32700 with the position.
  A big request (candidates, expanded or compact, or ``scheduler.apply`` journals) is first
  offered to :mod:`bridge.fastdecode`, which decodes its bulk straight into typed records and
  columns (and gives way to orjson whenever in doubt).
* Envelopes are checked here by :func:`request_problem`, a cheap equivalent of jsonrpcserver's
  JSON-schema request validator (same acceptance rules, plus a message saying what is wrong).
  Batch elements are checked one by one, so a batch answers each invalid element with its own
  -32600, as JSON-RPC 2.0 specifies (an empty batch gets a single -32600).
* Each valid request is dispatched by jsonrpcserver (its ``dispatch_to_serializable``, see :mod:`bridge.dispatch`,
  given the already decoded and checked request, so its own JSON parsing and JSON-schema
  validation are skipped) to :meth:`Bridge.call`, whose exceptions become error codes (see
  :func:`error_for`); a notification's call runs too, and its answer is dropped.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ..core import InvalidInputError, SchedulingError
from . import phases
from .dispatch import NODATA, Error, Method, Success, dispatch_to_serializable
from .errors import MethodUnavailableError, MutationError, ParamsError, UnknownHandleError, shorten
from .fastdecode import TypedRequestDecoder
from .limits import TooDeep, decode, how_to_raise
from .methods import MAX_ERROR_DETAILS, Bridge

log = logging.getLogger("crs-bridge")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SCHEDULING_ERROR = -32000
UNKNOWN_HANDLE = -32001

_MEMBERS = frozenset({"jsonrpc", "method", "id", "params"})


class JsonRpcError(Exception):
    """An error response's ``code``, ``message`` and ``data`` (None: left out)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def request_problem(request: Any) -> str | None:
    """What makes ``request`` an invalid JSON-RPC 2.0 request object, or None if it is valid.

    Same rules as jsonrpcserver's request schema: an object with ``"jsonrpc": "2.0"``, a string
    ``method``, optional ``id`` (string, number or null), optional ``params`` (array or object),
    and no other member.
    """
    if not isinstance(request, dict):
        return f"a request must be an object, got {_json_type(request)}"
    extra = request.keys() - _MEMBERS
    if extra:
        shown = ", ".join(repr(shorten(k)) for k in sorted(extra)[:5])
        return f"unexpected member {shown}" + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    if request.get("jsonrpc") != "2.0":
        return "'jsonrpc' must be \"2.0\"" if "jsonrpc" in request else "missing member 'jsonrpc'"
    if not isinstance(request.get("method"), str):
        return "'method' must be a string" if "method" in request else "missing member 'method'"
    if "id" in request:
        ident = request["id"]
        if isinstance(ident, bool) or not (ident is None or isinstance(ident, (str, int, float))):
            return f"'id' must be a string, a number or null, got {_json_type(ident)}"
    if "params" in request and not isinstance(request["params"], (list, dict)):
        return f"'params' must be an array or an object, got {_json_type(request['params'])}"
    return None


def _has_float_id(decoded: Any) -> bool:
    """Whether a request of ``decoded`` (a request or a batch) has a float ``id``."""
    if type(decoded) is dict:  # the common case, checked once per message: no generator
        return type(decoded.get("id")) is float
    return type(decoded) is list and any(type(r) is dict and type(r.get("id")) is float for r in decoded)


def _with_exact_integers(message: bytes, decoded: Any) -> Any:
    """``message`` decoded by the json module, which keeps integers beyond 64 bits that orjson
    reads as floats: an ``id`` must come back as it was sent. Rare (ids are rarely floats), and
    the same value otherwise; ``decoded`` if the json module cannot read it (nesting too deep
    for its recursion)."""
    import json

    try:
        return json.loads(message)
    except (ValueError, RecursionError):
        return decoded


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def error_response(code: int, message: str, data: Any = None, ident: Any = None) -> dict:
    """A JSON-RPC error response object (``data`` left out when None)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": ident}


def error_for(exc: Exception) -> JsonRpcError:
    """The JSON-RPC error for an exception raised by the method surface."""
    if isinstance(exc, MutationError):  # the entry's own error, saying which entry it was
        error = error_for(exc.cause)
        error.data = {**(error.data or {}), "index": exc.index, "method": exc.method}
        return error
    if isinstance(exc, ParamsError):
        return _invalid_params(exc.errors)
    if isinstance(exc, InvalidInputError):
        return _invalid_params([(exc.field, exc.problem)])
    if isinstance(exc, SchedulingError):
        return JsonRpcError(SCHEDULING_ERROR, str(exc).rstrip("\n"))
    if isinstance(exc, UnknownHandleError):
        return JsonRpcError(UNKNOWN_HANDLE, str(exc), {"scheduler": exc.handle})
    if isinstance(exc, MethodUnavailableError):
        return JsonRpcError(METHOD_NOT_FOUND, str(exc), {"method": exc.method, "mode": exc.mode})
    log.error("internal error (a bug in crs-bridge)", exc_info=exc)
    return JsonRpcError(INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}")


def _invalid_params(errors: list[tuple[str, str]]) -> JsonRpcError:
    shown = errors[:MAX_ERROR_DETAILS]
    message = "Invalid params: " + "; ".join(f"{loc}: {msg}" for loc, msg in shown)
    data: dict[str, Any] = {"errors": [{"loc": loc, "msg": msg} for loc, msg in shown]}
    if len(errors) > len(shown):
        message += f"; and {len(errors) - len(shown)} more"
        data["omitted"] = len(errors) - len(shown)
    return JsonRpcError(INVALID_PARAMS, message, data)


class Protocol:
    """JSON-RPC 2.0 message handling for one :class:`~bridge.methods.Bridge`."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self._decoded: Any = None
        # jsonrpcserver's method table: every method of the bridge, bound to _invoke.
        self._methods = {name: Method(name, self._invoke) for name in bridge.methods}
        self._typed_requests = TypedRequestDecoder(bridge.candidate_params())

    def handle(self, message: bytes) -> bytes | None:
        """Answer one message (a request or a batch); None when there is nothing to answer.

        The decoded message is kept until :meth:`release` (or the next message): freeing the
        objects of a big request takes tens of ms, better spent after its answer is sent.
        """
        self._decoded = None
        max_depth = self.bridge.limits.max_json_depth
        decoded = self._typed_requests.decode(message, max_depth)
        if decoded is None:
            try:
                decoded = decode(message, max_depth)
            except orjson.JSONDecodeError as exc:
                return self.encode(error_response(PARSE_ERROR, f"Parse error: {exc}"))
            except TooDeep as exc:
                problem = f"JSON nested deeper than the limit of {exc} levels ({how_to_raise('max_json_depth')})"
                return self.encode(error_response(INVALID_REQUEST, f"Invalid request: {problem}"))
        if _has_float_id(decoded):
            decoded = _with_exact_integers(message, decoded)
        phases.mark("decode")
        self._decoded = decoded
        if isinstance(decoded, list):
            if not decoded:
                return self.encode(error_response(INVALID_REQUEST, "Invalid request: empty batch"))
            answers = [a for a in map(self._answer, decoded) if a is not None]
            return self.encode(answers) if answers else None
        answer = self._answer(decoded)
        return None if answer is None else self.encode(answer)

    def release(self) -> None:
        """Free the last message's decoded objects (see :meth:`handle`)."""
        self._decoded = None
        self._typed_requests.release()

    def oversize(self, size: int) -> bytes:
        """The answer to a message of ``size`` bytes over the limit (it was not read)."""
        limit = self.bridge.max_message_bytes
        return self.encode(
            error_response(
                INVALID_REQUEST,
                f"Invalid request: message of {size} bytes exceeds the limit of {limit} bytes "
                f"({how_to_raise('max_message_bytes')})",
            )
        )

    @staticmethod
    def encode(response: Any) -> bytes:
        """A response (or batch) as JSON bytes.

        orjson writes integers of up to 64 bits; an answer that echoes a bigger one (an
        explanation's ``limit``, a plan's ``max-steps``: counts of any size) is written by the
        json module instead, with the same bytes for everything else.
        """
        try:
            return orjson.dumps(response)
        except orjson.JSONEncodeError:
            import json

            return json.dumps(response, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()

    def _answer(self, request: Any) -> dict | None:
        problem = request_problem(request)
        if problem is not None:
            return error_response(INVALID_REQUEST, f"Invalid request: {problem}")
        name = request["method"]
        if name not in self._methods:
            if "id" not in request:
                return None
            shown = shorten(name)
            return error_response(METHOD_NOT_FOUND, f"Method not found: '{shown}'", shown, request["id"])
        return dispatch_to_serializable(request, self._methods, deserializer=_checked, validator=_checked)

    def _invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run one method for jsonrpcserver: positional params arrive as ``args``, named ones as
        ``kwargs`` (no params, [] and {} alike); every failure becomes an error result."""
        try:
            result = self.bridge.call(name, list(args) if args else kwargs)
        except Exception as exc:  # bugs are logged by error_for
            error = error_for(exc)
            return Error(error.code, error.message, NODATA if error.data is None else error.data)
        return Success(result)


def _checked(request: Any) -> Any:
    """jsonrpcserver's deserializer and validator: the request arrives decoded and checked."""
    return request
