"""JSON-RPC 2.0 messages over the method tables, dispatched by jsonrpcserver.

:meth:`Protocol.handle` takes one message (bytes, unframed by :mod:`bridge.transport`) and
returns the answer bytes, or None when there is nothing to answer (notifications). It hands the
message to ``jsonrpcserver.dispatch_to_serializable`` with:

1. **the deserializer** :meth:`Protocol._decode`: the one decode of the message. The strict way
   (:meth:`Protocol._strictly`) decodes the envelope of each request and its params straight into
   the structs of its method's params model, and hands a method its params as one argument
   (:class:`Decoded`). A message it does not take whole goes the lax way (:func:`decode_json`:
   orjson within the depth limit, integers beyond 64 bits exact where an id needs them), whose
   params the models validate and word; what it refuses jsonrpcserver answers -32700 "Parse
   error", the decoder's words as ``data``;
2. **the validator** :func:`check_envelope`: JSON-RPC's envelope rules (:func:`request_problem`)
   for the request or every element of a batch; jsonrpcserver answers a refused message -32600
   "Invalid request" as a whole, and the problem is logged;
3. **the methods**: one function per method name (:meth:`Protocol._method`) that takes the params
   as the strict way decoded them, or else as the models validate them, runs the method and gives
   ``Success(result)``, or the ``Error`` that :func:`error_for` makes of what it raised (the one
   place where exceptions become error codes).

The answer is encoded with orjson (:meth:`Protocol.encode`). :meth:`Protocol.answer` is the
handler of :func:`bridge.transport.serve_frames`: a frame's answer, whatever happens.
"""

from __future__ import annotations

import gc
import inspect
import logging
from typing import Annotated, Any, Literal, NamedTuple

import msgspec
import orjson
from jsonrpcserver import Error, Result, Success, dispatch_to_serializable

from ..core import InvalidInputError, SchedulingError
from . import models as m
from . import phases, stateless
from .codes import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
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
from .structs import nesting
from .wire import REFUSED, ParamsDecoder, as_wire, check_call_sizes

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


def check_envelope(decoded: Any) -> None:
    """jsonrpcserver's validator: raise ValueError saying what is wrong when ``decoded`` (a decoded
    message) is not a request or a non-empty batch of requests (:func:`request_problem`).
    jsonrpcserver answers it -32600 with a fixed text, so the problem is logged for the operator."""
    requests = decoded if type(decoded) is list else [decoded]
    problem = None if requests else "empty batch"
    for index, request in enumerate(requests):
        problem = request_problem(request)
        if problem is not None:
            problem = f"batch element {index}: {problem}" if type(decoded) is list else problem
            break
    if problem is not None:
        log.info("invalid request: %s", problem)
        raise ValueError(problem)


#: What the message of an error answered with a null id opens with, by code.
_TITLES = {INVALID_REQUEST: "Invalid request", INTERNAL_ERROR: "Internal error"}


def error_response(code: int, detail: str) -> dict:
    """A JSON-RPC error response object to a message that jsonrpcserver did not answer (too big to
    be read, or failing the server itself): id null, no data, the message the code's title and
    ``detail``."""
    return {"jsonrpc": "2.0", "error": {"code": code, "message": f"{_TITLES[code]}: {detail}"}, "id": None}


def error_for(exc: Exception) -> tuple[int, str, Any]:
    """The JSON-RPC error ``(code, message, data)`` for an exception raised by a call (``data``
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

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON nested deeper than the limit of {max_depth} levels ({how_to_raise('max_json_depth')})")


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


# -- decoding the strict way: the envelopes, then each request's params into its structs ----------


class _Request(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A valid JSON-RPC request, its params left as JSON text. Its id is one that orjson reads as
    sent (a string, null, an int64): a float id, or an integer beyond (orjson reads those beyond
    64 bits as floats), is left to the lax way (:func:`_with_exact_integers`)."""

    jsonrpc: Literal["2.0"]
    method: str
    id: str | Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] | None | msgspec.UnsetType = msgspec.UNSET
    params: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"{}"))


#: A request or a batch of them, as the strict way reads a message.
_REQUESTS = msgspec.json.Decoder(list[_Request] | _Request)


class Decoded(NamedTuple):
    """A request's params as the strict way hands them to its method: the JSON ``text``, and the
    ``struct`` the first of the method's params models took it as (for a ``scheduler.*`` method
    whose models differ by mode, maybe another mode's: the text is decoded again)."""

    text: msgspec.Raw
    struct: Any


# -- the protocol ---------------------------------------------------------------------------------


class Protocol:
    """JSON-RPC 2.0 message handling over the methods of :data:`bridge.stateless.METHODS` (and
    ``debug.raise`` with ``debug_methods``) and the server state ``state``."""

    def __init__(self, state: State, debug_methods: bool = False) -> None:
        self.state = state
        state.methods = {spec.name: spec for spec in stateless.METHODS}
        if debug_methods:
            state.methods[stateless.DEBUG_RAISE.name] = stateless.DEBUG_RAISE
        #: Method name -> the decoders of its params models, in the order of its variants.
        self._decoders: dict[str, list[ParamsDecoder]] = {}
        self._params: dict[type, ParamsDecoder] = {}
        for name, spec in state.methods.items():
            models = dict.fromkeys(variant.params for variant in spec.variants.values())
            self._decoders[name] = [self._params.setdefault(model, ParamsDecoder(model)) for model in models]
        #: The deepest message the strict way can take: a batch of requests with the deepest params.
        self._deepest = 2 + max(nesting(kind) for decoder in self._params.values() for kind in decoder.kinds)
        #: jsonrpcserver's methods table: method name -> ``(state, *args, **kwargs) -> Result``.
        self.methods = {name: self._method(spec) for name, spec in state.methods.items()}
        self._decoded: Any = None

    def handle(self, message: bytes) -> bytes | None:
        """Answer one message (a request or a batch); None when there is nothing to answer.

        The decoded message is kept until :meth:`release` (or the next message): freeing the
        objects of a big request takes tens of ms, better spent after its answer is sent.
        """
        answer = dispatch_to_serializable(
            message, self.methods, context=self.state, deserializer=self._decode, validator=check_envelope
        )
        return None if answer is None else self.encode(answer)

    def answer(self, frame: Any) -> bytes | None:
        """The answer to a frame of :mod:`bridge.transport` (None: nothing to answer): to its
        message (:meth:`handle`), the refusal of one over the size limit, or -32603 with a null id
        if the server itself fails on it (logged; methods' own errors are their answers).
        Collections wait until :meth:`release`."""
        # A large message decodes into hundreds of thousands of containers, none of them cyclic;
        # collecting while they are built costs more than the work itself, so collect afterwards.
        gc.disable()
        try:
            answer = self.oversize(frame.size) if frame.body is None else self.handle(frame.body)
        except Exception as exc:
            log.error("internal error handling a message (a bug in crs-bridge)", exc_info=exc)
            answer = self.encode(error_response(INTERNAL_ERROR, f"{type(exc).__name__}: {shorten(exc, 500)}"))
        if phases.timing:
            phases.mark("encode")
        return answer

    def release(self) -> None:
        """Free the last message's decoded objects (see :meth:`handle`), then let collections
        resume (one would walk them all)."""
        self._decoded = None
        gc.enable()

    def idle(self) -> None:
        """Tidy up while no request waits: deallocate the schedulers freed meanwhile."""
        self.state.drop_freed()

    @property
    def finished(self) -> bool:
        """Whether a ``shutdown`` request was answered: no further message is to be read."""
        return self.state.shutdown_requested

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

    def _decode(self, message: bytes) -> Any:
        """jsonrpcserver's deserializer: the message the strict way (:meth:`_strictly`), else as
        decoded JSON (orjson.JSONDecodeError, TooDeep); kept until :meth:`release`."""
        self._decoded = None
        decoded = self._strictly(message)
        if decoded is None:
            try:
                decoded = decode_json(message, self.state.limits.max_json_depth)
            except ValueError as exc:
                log.info("parse error: %s", exc)
                raise
            decoded = _with_exact_integers(message, decoded)
        self._decoded = decoded
        if phases.timing:
            phases.mark("decode")
        return decoded

    def _strictly(self, message: bytes) -> Any:
        """The request or batch in ``message`` for jsonrpcserver, each request's params one
        argument (:class:`Decoded`); None unless every request is valid and its params are taken
        by its method's structs.

        A message is taken whole or not at all: then nothing it holds nests deeper than the
        structs (:attr:`_deepest`), so its depth is known to be within the limit before any of its
        requests runs; the lax way decides the rest (the depth limit, and every error's words)."""
        if self.state.limits.max_json_depth < self._deepest:
            return None
        try:
            decoded = _REQUESTS.decode(message)
        except REFUSED:
            return None
        requests = [self._request(request) for request in (decoded if type(decoded) is list else [decoded])]
        if not requests or None in requests:
            return None
        return requests if type(decoded) is list else requests[0]

    def _request(self, request: _Request) -> dict | None:
        """``request`` as jsonrpcserver reads it, its params :class:`Decoded`; None if no params
        model of its method takes them."""
        for decoder in self._decoders.get(request.method, ()):
            struct = decoder.decode(request.params)
            if struct is not None:
                found = {"jsonrpc": "2.0", "method": request.method, "params": [Decoded(request.params, struct)]}
                if request.id is not msgspec.UNSET:
                    found["id"] = request.id
                return found
        return None

    def _method(self, spec: MethodSpec) -> Any:
        """The entry of :attr:`methods` for ``spec``: jsonrpcserver passes its context (the state
        this protocol holds) and the params (the strict way's :class:`Decoded`, an array's
        elements, or an object's members); the answer is a jsonrpcserver Result."""

        def method(state: State, /, *args: Any, **kwargs: Any) -> Result:
            try:
                return Success(self._call(spec, _params(args, kwargs)))
            except Exception as exc:  # bugs are logged by error_for
                code, message, data = error_for(exc)
                return Error(code, message) if data is None else Error(code, message, data)

        # jsonrpcserver binds the arguments to the method's signature at every call: read it once.
        method.__signature__ = inspect.signature(method)
        return method

    def _call(self, spec: MethodSpec, params: Decoded | list | dict) -> Any:
        """Run method ``spec`` with ``params`` (as the strict way decoded them, or decoded JSON).
        Changes state only once the params passed every check."""
        if spec.stateful:
            handle = _handle(params)
            variant = self._variant(spec, handle)
        else:
            variant = spec.variants[ANY_MODE]
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

    def _validated(self, spec: MethodSpec, variant: Variant, params: Decoded | list | dict) -> Any:
        """The params as a struct of the variant's model, size limits checked: as the strict way
        decoded them, else as the models validate them (they word every error)."""
        decoder = self._params[variant.params]
        if type(params) is Decoded:
            struct = params.struct if type(params.struct) in decoder.kinds else decoder.decode(params.text)
            if struct is not None:
                check_call_sizes(struct, self.state.limits)
                return struct
            params = orjson.loads(memoryview(params.text))  # taken by another mode's structs only
        elif type(params) is list:
            params = _named(spec, variant, params)
        check_call_sizes(params, self.state.limits)  # before the models spend time and memory
        return decoder.from_models(params)


def _params(args: tuple, kwargs: dict) -> Decoded | list | dict:
    """A method's params from jsonrpcserver's arguments: the one the strict way gives, else the
    elements of an array or the members of an object."""
    if len(args) == 1 and type(args[0]) is Decoded:
        return args[0]
    return list(args) if args else kwargs


def _handle(params: Decoded | list | dict) -> Any:
    """The handle among the params (None if there is none)."""
    if type(params) is Decoded:
        return params.struct.scheduler
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
