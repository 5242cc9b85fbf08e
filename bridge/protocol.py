"""JSON-RPC 2.0 messages over the method tables: decode, check, call, answer.

:meth:`Protocol.handle` takes one message (bytes, unframed by :mod:`bridge.transport`) and
returns the answer bytes, or None when there is nothing to answer (notifications). Its steps:

1. **Decode** the message once, into the typed structs of :mod:`bridge.wire`: envelope, params and
   records, generated from the models of :mod:`bridge.models` and checked as they are parsed. A
   message those strict types refuse is decoded as plain JSON instead (orjson, within the depth
   limit); one that is not JSON is answered -32700.
2. **Check** each request: a plain JSON one against JSON-RPC's envelope rules (-32600 saying what
   is wrong, each batch element on its own); params the strict types did not settle against the
   method's params model (pydantic accepts the lax forms and words every error), which gives the
   same structs.
3. **Call** the method with its params struct and **answer**: its result, or the error that
   :func:`error_for` makes of what it raised (the one place where exceptions become error codes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from ..core import InvalidInputError, SchedulingError
from . import models as m
from . import phases, stateless
from .codes import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SCHEDULING_ERROR,
    UNKNOWN_HANDLE,
)
from .errors import (
    MAX_ERROR_DETAILS,
    MethodUnavailableError,
    MutationError,
    ParamsError,
    UnknownHandleError,
    UnknownMethodError,
    shorten,
)
from .limits import ORJSON_MAX_DEPTH, how_to_raise
from .registry import ANY_MODE, MethodSpec, Variant
from .schedulers import STAGING_METHODS, State
from .wire import MessageDecoder, ParamsDecoder, as_wire, check_call_sizes

log = logging.getLogger("crs-bridge")

_MEMBERS = frozenset({"jsonrpc", "method", "id", "params"})


def request_problem(request: Any) -> str | None:
    """What makes ``request`` an invalid JSON-RPC 2.0 request object, or None if it is valid.

    JSON-RPC 2.0's rules for a request object: ``"jsonrpc": "2.0"``, a string
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


#: The JSON type of each Python type a JSON decoder gives, but dict: an object.
_JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string", list: "array"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "object")


#: What the message of an error answered with a null id opens with, by code.
_TITLES = {PARSE_ERROR: "Parse error", INVALID_REQUEST: "Invalid request", INTERNAL_ERROR: "Internal error"}


def error_response(code: int, detail: str) -> dict:
    """A JSON-RPC error response object to a message that names no request it could be the answer
    to (not JSON, not a request, too big, or failing the server itself): id null, no data, the
    message the code's title and ``detail``."""
    return {"jsonrpc": "2.0", "error": {"code": code, "message": f"{_TITLES[code]}: {detail}"}, "id": None}


def error_for(exc: Exception) -> tuple[int, str, Any]:
    """The JSON-RPC error ``(code, message, data)`` for an exception raised by a call (``data``
    None: left out)."""
    if isinstance(exc, UnknownMethodError):
        return METHOD_NOT_FOUND, f"Method not found: '{exc.method}'", exc.method
    if isinstance(exc, MutationError):  # the entry's own error, saying which entry it was
        code, message, data = error_for(exc.cause)
        return code, message, {**(data or {}), "index": exc.index, "method": exc.method}
    if isinstance(exc, ParamsError):
        return _invalid_params(exc.errors)
    if isinstance(exc, InvalidInputError):
        return _invalid_params([(exc.field, exc.problem)])
    if isinstance(exc, SchedulingError):
        return SCHEDULING_ERROR, str(exc).rstrip("\n"), None
    if isinstance(exc, UnknownHandleError):
        return UNKNOWN_HANDLE, str(exc), {"scheduler": exc.handle}
    if isinstance(exc, MethodUnavailableError):
        return METHOD_NOT_FOUND, str(exc), {"method": exc.method, "mode": exc.mode}
    log.error("internal error (a bug in crs-bridge)", exc_info=exc)
    return INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}", None


def _invalid_params(errors: list[tuple[str, str]]) -> tuple[int, str, dict]:
    shown = errors[:MAX_ERROR_DETAILS]
    message = "Invalid params: " + "; ".join(f"{loc}: {msg}" for loc, msg in shown)
    data: dict[str, Any] = {"errors": [{"loc": loc, "msg": msg} for loc, msg in shown]}
    if len(errors) > len(shown):
        message += f"; and {len(errors) - len(shown)} more"
        data["omitted"] = len(errors) - len(shown)
    return INVALID_PARAMS, message, data


# -- decoding JSON the lax way, within the depth limit ----------------------------------------------


class TooDeep(ValueError):
    """A message nested deeper than the configured limit (it is valid JSON otherwise)."""


#: Messages up to this size (bytes) are decoded unpadded when their brackets are few.
_COUNT_BRACKETS_UP_TO = 1 << 16


def decode_json(message: bytes, max_depth: int) -> Any:
    """Decode one JSON message, refusing nesting deeper than ``max_depth`` (TooDeep).

    No Python recursion anywhere: orjson parses in C and refuses depth > 1024 by itself. A lower
    limit is checked by the same parser: the message is wrapped in ``1024 - max_depth`` arrays,
    so that it fails exactly when the message nests deeper than ``max_depth``. Messages with no
    more brackets than ``max_depth`` cannot be that deep and are decoded as they are. Raises
    orjson.JSONDecodeError for invalid JSON, with the position in ``message`` itself.
    """
    # A big message has more brackets than any depth limit: counting them would only delay the
    # padded decode.
    few_brackets = len(message) <= _COUNT_BRACKETS_UP_TO and message.count(b"[") + message.count(b"{") <= max_depth
    pad = 0 if few_brackets else ORJSON_MAX_DEPTH - max_depth
    try:
        value = orjson.loads(b"".join((b"[" * pad, message, b"]" * pad)) if pad else message)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise TooDeep(max_depth) from None
        return orjson.loads(message)  # raises again (padded: with the position in the message itself)
    for _ in range(pad):
        # A single element at every level, else the padding paired up with brackets of an
        # invalid message (``1],[2``): decode it alone to raise its own error.
        if len(value) != 1:
            return orjson.loads(message)
        value = value[0]
    return value


def _with_exact_integers(message: bytes, decoded: Any) -> Any:
    """``message`` decoded by the json module when a request of ``decoded`` has a float ``id``: it
    keeps integers beyond 64 bits that orjson reads as floats, and an ``id`` must come back as it
    was sent. ``decoded`` if the json module cannot read it (nesting too deep for its recursion)."""
    requests = decoded if type(decoded) is list else [decoded]
    if not any(type(r) is dict and type(r.get("id")) is float for r in requests):
        return decoded
    import json

    try:
        return json.loads(message)
    except (ValueError, RecursionError):
        return decoded


# -- the protocol ---------------------------------------------------------------------------------


class Protocol:
    """JSON-RPC 2.0 message handling over the methods of :data:`bridge.stateless.METHODS` (and
    ``debug.raise`` with ``debug_methods``) and the server state ``state``."""

    def __init__(self, state: State, debug_methods: bool = False) -> None:
        self.state = state
        state.methods = {spec.name: spec for spec in stateless.METHODS}
        if debug_methods:
            state.methods[stateless.DEBUG_RAISE.name] = stateless.DEBUG_RAISE
        self._params = {
            (variant.params, spec.positional): ParamsDecoder(variant.params, spec.positional)
            for spec in state.methods.values()
            for variant in spec.variants.values()
        }
        self._messages = MessageDecoder({spec.name: self._kinds(spec) for spec in state.methods.values()})
        self._decoded: Any = None

    def _kinds(self, spec: MethodSpec) -> list[Any]:
        models = dict.fromkeys(variant.params for variant in spec.variants.values())
        return [kind for model in models for kind in self._params[model, spec.positional].kinds]

    def handle(self, message: bytes) -> bytes | None:
        """Answer one message (a request or a batch); None when there is nothing to answer.

        The decoded message is kept until :meth:`release` (or the next message): freeing the
        objects of a big request takes tens of ms, better spent after its answer is sent.
        """
        max_depth = self.state.limits.max_json_depth
        self._decoded = decoded = self._messages.decode(message, max_depth)
        plain = _PlainJson(message, max_depth)
        if decoded is None:
            try:
                self._decoded = decoded = plain.message()
            except orjson.JSONDecodeError as exc:
                return self.encode(error_response(PARSE_ERROR, str(exc)))
            except TooDeep as exc:
                problem = f"JSON nested deeper than the limit of {exc} levels ({how_to_raise('max_json_depth')})"
                return self.encode(error_response(INVALID_REQUEST, problem))
        if phases.timing:
            phases.mark("decode")
        if type(decoded) is not list:
            answer = self._answer(decoded, plain.params_of)
            return None if answer is None else self.encode(answer)
        if not decoded:
            return self.encode(error_response(INVALID_REQUEST, "empty batch"))
        answers = [self._answer(request, plain.params_of, index) for index, request in enumerate(decoded)]
        answers = [answer for answer in answers if answer is not None]
        return self.encode(answers) if answers else None

    def release(self) -> None:
        """Free the last message's decoded objects (see :meth:`handle`)."""
        self._decoded = None

    def oversize(self, size: int) -> bytes:
        """The answer to a message of ``size`` bytes over the limit (it was not read)."""
        limit = self.state.limits.max_message_bytes
        problem = f"message of {size} bytes exceeds the limit of {limit} bytes ({how_to_raise('max_message_bytes')})"
        return self.encode(error_response(INVALID_REQUEST, problem))

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

    def _answer(self, request: Any, params_of: Callable[[int | None], Any], index: int | None = None) -> dict | None:
        """The response to one request (a struct or decoded JSON); None to a notification.
        ``params_of(index)`` gives the request's params as decoded JSON."""
        if isinstance(request, msgspec.Struct):
            name, ident = self._messages.methods[type(request)], request.id
            params = {} if request.params is msgspec.UNSET else request.params
        else:
            problem = request_problem(request)
            if problem is not None:
                return error_response(INVALID_REQUEST, problem)
            name, ident, params = request["method"], request.get("id", msgspec.UNSET), request.get("params", {})
        try:
            result = self._call(name, params, lambda: params_of(index))
        except Exception as exc:  # bugs are logged by error_for
            code, message, data = error_for(exc)
            error = {"code": code, "message": message}
            if data is not None:
                error["data"] = data
            return None if ident is msgspec.UNSET else {"jsonrpc": "2.0", "error": error, "id": ident}
        return None if ident is msgspec.UNSET else {"jsonrpc": "2.0", "result": result, "id": ident}

    def _call(self, name: str, params: Any, as_json: Callable[[], Any]) -> Any:
        """Run method ``name`` with ``params``: a struct (the strict decoder took them) or decoded
        JSON (an array or an object); ``as_json()`` gives them as decoded JSON. Changes state only
        once the params passed every check."""
        spec = self.state.methods.get(name)
        if spec is None:
            raise UnknownMethodError(name)
        typed = isinstance(params, msgspec.Struct)
        if spec.stateful:
            handle = params.scheduler if typed else _handle(params)
            variant = self._variant(spec, handle)
        else:
            variant = spec.variants[ANY_MODE]
        if typed and not self._settled(spec, variant, params):
            params = as_json()  # another mode's params, or refused by a check left after decoding
        params = self._validated(spec, variant, params)
        if spec.stateful and self.state.staged and spec.name not in STAGING_METHODS:
            # Staged candidates were expanded on the state of their staging: any other valid call
            # on the scheduler (a mutation, say) discards them; a refused one changes nothing.
            self.state.staged.pop(handle, None)
        if phases.timing:
            phases.mark("validate")
        result = variant.run(self.state, params)
        if spec.from_engine:
            result = as_wire(spec.result, result)
        if phases.timing:
            # Without this mark a method that marks no phase of its own would have its work
            # counted as the next phase, "encode" (scoring, for example, under scheduler.*).
            phases.mark("run")
        return result

    def _variant(self, spec: MethodSpec, handle: Any) -> Variant:
        if not isinstance(handle, str):
            problem = "Field required" if handle is None else "Input should be a valid string (a scheduler handle)"
            raise ParamsError([("scheduler", problem)])
        mode = self.state.scheduler(handle).mode
        if mode not in spec.variants:
            raise MethodUnavailableError(spec.name, mode, handle)
        return spec.variants[mode]

    def _settled(self, spec: MethodSpec, variant: Variant, params: msgspec.Struct) -> bool:
        """Whether the strict decoder settled ``params``: they are a struct of the variant's model
        (not another mode's) and pass the checks left after decoding."""
        decoder = self._params[variant.params, spec.positional]
        return type(params) in decoder.structs and decoder.checked(params) is not None

    def _validated(self, spec: MethodSpec, variant: Variant, params: Any) -> Any:
        """The params as a struct of the variant's model, size limits checked: a settled struct
        as it is, decoded JSON by the models."""
        decoder = self._params[variant.params, spec.positional]
        if not (isinstance(params, msgspec.Struct) or params):  # none given: [], {} or no member
            params = decoder.decode(b"{}") or {}  # the models word what is missing
        if isinstance(params, msgspec.Struct):
            check_call_sizes(params, self.state.limits)
            return params
        if type(params) is list:
            params = _named(spec, variant, params)
        check_call_sizes(params, self.state.limits)  # before the models spend time and memory
        return decoder.from_models(params)


class _PlainJson:
    """A message decoded as plain JSON, on first need: the whole message when the strict decoder
    refuses it, or the params of a request whose struct the strict types did not settle."""

    def __init__(self, message: bytes, max_depth: int) -> None:
        self._message = message
        self._max_depth = max_depth
        self._decoded: Any = None

    def message(self) -> Any:
        """The message as decoded JSON (orjson.JSONDecodeError, TooDeep)."""
        if self._decoded is None:
            self._decoded = _with_exact_integers(self._message, decode_json(self._message, self._max_depth))
        return self._decoded

    def params_of(self, index: int | None) -> Any:
        """The params of request ``index`` of a batch (None: of the message, a single request), as
        decoded JSON ({} when none are given)."""
        decoded = self.message()
        request = decoded if index is None else decoded[index]
        return request.get("params", {})


def _handle(params: list | dict) -> Any:
    """The handle among decoded JSON params (None if there is none)."""
    if type(params) is list:
        return params[0] if params else None
    if type(params) is dict:
        return params.get("scheduler")
    return None


def _named(spec: MethodSpec, variant: Variant, params: list) -> dict:
    """Positional params by their names (the model's field order)."""
    names = m.wire_names(variant.params)
    if params and not spec.positional:
        raise ParamsError([("params", f"'{spec.name}' takes named params (an object), not an array")])
    if len(params) > len(names):
        problem = f"too many params for '{spec.name}': {len(params)} given, at most {len(names)} ({', '.join(names)})"
        raise ParamsError([("params", problem)])
    return dict(zip(names, params))
