"""JSON-RPC 2.0 over the method tables: decoding, envelope checks, dispatch, error codes.

:meth:`Protocol.handle` takes one message (bytes, already unframed) and returns the response
bytes, or None when nothing is to be answered (a notification, or a batch of notifications).

* A message is decoded once, strictly, into the structs of :mod:`bridge.wire` (envelope, params
  and records together). Where the strict decoder refuses it, orjson decodes it and the envelopes
  are checked here (:func:`request_problem`: jsonrpcserver's request schema, with a message saying
  what is wrong; each batch element on its own, as JSON-RPC 2.0 specifies); each request's params
  then go to the models (:meth:`Protocol._typed`, the one fallback), which word every error.
  A message that is not JSON gets -32700 with the position.
* The requests of a message are dispatched by jsonrpcserver, in one call (its
  ``dispatch_to_response_pure``, given the decoded requests, their methods and params as the
  context, and each request's position in it as its params): it looks each method up, calls it and
  makes the response. A method's exceptions become error codes (:func:`error_for`); a
  notification's call runs too, and its answer is dropped.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import sys
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
    shorten,
)
from .limits import ORJSON_MAX_DEPTH, how_to_raise
from .registry import ANY_MODE, MethodSpec, Variant
from .schedulers import STAGING_METHODS, State
from .wire import MessageDecoder, ParamsDecoder, check_call_sizes


def _import_without_package_init(package: str, *modules: str) -> list[Any]:
    """``package``'s ``modules``, imported without running the package's ``__init__``.

    jsonrpcserver's ``__init__`` imports all it offers: its asyncio dispatcher, an HTTP server
    and the JSON-schema request validator, 85-95 ms of a server start (``python -X importtime -c
    'import jsonrpcserver'``) against a budget of 300 ms. The server needs only the synchronous
    dispatcher, which imports none of them (nor does oslash's ``either``, without the other monads
    oslash's ``__init__`` imports). A later ``import jsonrpcserver`` runs the real ``__init__``,
    which reuses the modules loaded here.
    """
    bare = package not in sys.modules
    if bare:  # a package that knows its path and ran nothing
        sys.modules[package] = importlib.util.module_from_spec(importlib.util.find_spec(package))
    try:
        return [importlib.import_module(f"{package}.{module}") for module in modules]
    finally:
        if bare:
            del sys.modules[package]


_import_without_package_init("oslash", "either")
_dispatcher, _response, _result, _sentinels = _import_without_package_init(
    "jsonrpcserver", "dispatcher", "response", "result", "sentinels"
)
Success, Error, NODATA = _result.Success, _result.Error, _sentinels.NODATA

log = logging.getLogger("crs-bridge")

_MEMBERS = frozenset({"jsonrpc", "method", "id", "params"})


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
    """The JSON-RPC error ``(code, message, data)`` for an exception raised by a method (``data``
    None: left out)."""
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
    # A big message has more brackets than any depth limit: counting them (some 10 ms for 16 MB)
    # would only delay the padded decode.
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


class _Positional(inspect.Signature):
    """A signature of positional-only parameters whose binding checks the count of the arguments
    first: jsonrpcserver binds every call's arguments to its method's signature, to answer those
    that do not fit (a TypeError), and inspect's general binding was a fifth of its cost per request
    (3 of 16 us in a round's imbalance query); any other call is bound the general way."""

    __slots__ = ()

    def bind(self, *args: Any, **kwargs: Any) -> inspect.BoundArguments:
        if len(args) == len(self.parameters) and not kwargs:
            return inspect.BoundArguments(self, dict(zip(self.parameters, args)))
        return super().bind(*args, **kwargs)


#: A method's arguments as jsonrpcserver passes them: the message's calls (its context) and the
#: position of the request's own among them (its params).
_CONTEXT_AND_POSITION = _Positional(
    [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in ("calls", "index")]
)


#: The place in a message's answers of a request that jsonrpcserver answers.
_DISPATCHED = object()


class _Methods(dict):
    """jsonrpcserver's method table: a method for every name; for an unknown one, the method that
    answers so (a notification of one gets no answer, as for any notification)."""

    def __missing__(self, name: str) -> Any:
        shown = shorten(name)
        return lambda calls, index: Error(METHOD_NOT_FOUND, f"Method not found: '{shown}'", shown)


class Protocol:
    """JSON-RPC 2.0 message handling over the methods of :data:`bridge.stateless.METHODS` (and
    ``debug.raise`` with ``debug_methods``) and the server state ``state``."""

    def __init__(self, state: State, debug_methods: bool = False) -> None:
        self.state = state
        state.methods = {spec.name: spec for spec in stateless.METHODS}
        if debug_methods:
            state.methods[stateless.DEBUG_RAISE.name] = stateless.DEBUG_RAISE

        def invoke(calls: list[tuple[str, Any]], index: int) -> Any:  # jsonrpcserver's context, a position
            return self._invoke(*calls[index])

        # jsonrpcserver binds the call's arguments to the method's signature, which it computes
        # anew for every call unless one is given (a third of a small call's time).
        invoke.__signature__ = _CONTEXT_AND_POSITION
        self._methods = _Methods(dict.fromkeys(state.methods, invoke))
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
        decoded = self._messages.decode(message, max_depth)
        self._decoded = decoded
        if decoded is None:
            try:
                self._decoded = decoded = _with_exact_integers(message, decode_json(message, max_depth))
            except orjson.JSONDecodeError as exc:
                return self.encode(error_response(PARSE_ERROR, str(exc)))
            except TooDeep as exc:
                problem = f"JSON nested deeper than the limit of {exc} levels ({how_to_raise('max_json_depth')})"
                return self.encode(error_response(INVALID_REQUEST, problem))
        if phases.timing:
            phases.mark("decode")
        if type(decoded) is list:
            if not decoded:
                return self.encode(error_response(INVALID_REQUEST, "empty batch"))
            answers = self._answers(decoded)
            return self.encode(answers) if answers else None
        answers = self._answers([decoded])
        return self.encode(answers[0]) if answers else None

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

    def _answers(self, requests: list) -> list[dict]:
        """The answers to ``requests`` (structs or decoded JSON) in order, none to a notification.

        jsonrpcserver dispatches the valid ones in one call (its fixed cost once per message): each
        gets the message's ``(method, params)`` calls as the context and the position of its own as
        its params; an invalid request is answered here, in its place.
        """
        envelopes, calls, answers = [], [], []
        for request in requests:
            if not isinstance(request, msgspec.Struct):
                problem = request_problem(request)
                if problem is not None:
                    answers.append(error_response(INVALID_REQUEST, problem))
                    continue
                envelope = {key: value for key, value in request.items() if key != "params"}
                params = request.get("params", {})
            else:
                envelope = {"jsonrpc": "2.0", "method": self._messages.methods[type(request)]}
                if request.id is not msgspec.UNSET:
                    envelope["id"] = request.id
                params = {} if request.params is msgspec.UNSET else request.params
            envelope["params"] = [len(calls)]
            envelopes.append(envelope)
            calls.append((envelope["method"], params))
            if "id" in envelope:
                answers.append(_DISPATCHED)
        if not envelopes:
            return answers
        dispatched = _dispatcher.dispatch_to_response_pure(
            deserializer=_as_it_is,
            validator=_as_it_is,
            post_process=_response.to_serializable_one,
            context=calls,
            methods=self._methods,
            request=envelopes,
        )
        if type(dispatched) is dict:  # jsonrpcserver's answer to a failure of its own (a bug)
            return [dispatched]
        answered = iter(dispatched or ())
        return [next(answered) if answer is _DISPATCHED else answer for answer in answers]

    def _invoke(self, name: str, params: Any) -> Any:
        """Run method ``name`` for jsonrpcserver; every failure becomes an error result."""
        try:
            spec = self.state.methods[name]
            result = self._call(spec, params)
        except Exception as exc:  # bugs are logged by error_for
            code, message, data = error_for(exc)
            return Error(code, message, NODATA if data is None else data)
        return Success(result)

    def _call(self, spec: MethodSpec, params: Any) -> Any:
        """Run ``spec`` with ``params``: a struct (the strict decoder took them) or decoded JSON (an
        array or an object). Changes state only once the params passed every check."""
        typed = type(params) is not list and type(params) is not dict
        if spec.stateful:
            handle = params.scheduler if typed else _handle(params)
            variant = self._variant(spec, handle)
        else:
            variant = spec.variants[ANY_MODE]
        params = self._typed(spec, variant, params, typed)
        if spec.stateful and self.state.staged and spec.name not in STAGING_METHODS:
            # Staged candidates were expanded on the state of their staging: any other valid call
            # on the scheduler (a mutation, say) discards them; a refused one changes nothing.
            self.state.staged.pop(handle, None)
        if phases.timing:
            phases.mark("validate")
        result = variant.run(self.state, params)
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

    def _typed(self, spec: MethodSpec, variant: Variant, params: Any, typed: bool) -> Any:
        """The params as a struct of the variant's model, size limits checked: those the strict
        decoder took as they are (when its model's checks pass them), all others by the models."""
        decoder = self._params[variant.params, spec.positional]
        if not (typed or params):  # none given ([] and {} alike)
            params = decoder.decode(b"{}") or params
            typed = type(params) is not dict
        if typed and type(params) in decoder.structs and decoder.checked(params) is not None:
            check_call_sizes(params, self.state.limits)
            return params
        if typed:  # decoded as another mode's params, or refused by a check left after decoding
            params = msgspec.json.decode(msgspec.json.encode(params))  # JSON texts kept as they came
        if type(params) is list:
            params = _named(spec, variant, params)
        check_call_sizes(params, self.state.limits)  # before the models spend time and memory
        return decoder.from_models(params)


def _handle(params: list | dict) -> Any:
    """The handle among decoded JSON params (None if there is none)."""
    if type(params) is list:
        return params[0] if params else None
    return params.get("scheduler")


def _named(spec: MethodSpec, variant: Variant, params: list) -> dict:
    """Positional params by their names (the model's field order)."""
    names = m.wire_names(variant.params)
    if params and not spec.positional:
        raise ParamsError([("params", f"'{spec.name}' takes named params (an object), not an array")])
    if len(params) > len(names):
        problem = f"too many params for '{spec.name}': {len(params)} given, at most {len(names)} ({', '.join(names)})"
        raise ParamsError([("params", problem)])
    return dict(zip(names, params))


def _as_it_is(request: Any) -> Any:
    """jsonrpcserver's deserializer and validator: the request arrives decoded and checked."""
    return request
