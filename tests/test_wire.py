"""The strict structs agree with the models: one property, over requests drawn from the schema.

Requests of every method are drawn from its params model (bridge/models.py): valid values, values
at and beyond every bound, the lax forms the models accept (integral floats, Perl truthiness,
negative zero, unknown keys), wrong types, missing and unknown fields, named and positional. For
each, the strict structs (msgspec's decode of the params' JSON) either refuse them (the models
then decide), or take params that the models accept too, with the same values; and the server
answers it the same whether the strict way is taken or not.
"""

from __future__ import annotations

import json
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from crs_bridge.bridge import records as rec
from crs_bridge.bridge.errors import ParamsError
from crs_bridge.bridge.limits import ServerLimits
from crs_bridge.bridge.protocol import Protocol, _named
from crs_bridge.bridge.registry import ANY_MODE
from crs_bridge.bridge.schedulers import State
from crs_bridge.bridge.stateless import METHODS
from crs_bridge.bridge.structs import struct_of
from crs_bridge.bridge.wire import candidate_counts

NAMES = st.sampled_from(["A", "B", "C", "vm:1", "vm:2", "node-0"])
#: What a value may be changed into: another type, an empty name, numbers at and beyond the
#: bounds or in a lax form (integral floats, -0.0, integers beyond 64 bits, which orjson reads as
#: floats).
ODD = st.sampled_from(
    [None, True, False, 0, 1, "", "1", [], {}, -0.0, 2.0, 2.5, -1, 2**53, 2**53 + 1, 2**62, 2**64 - 1, 2**64 + 1, 1e300]
)


def _bounds(metadata: list) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found.update(_bounds(item.metadata))
        elif isinstance(item, (at.Ge, at.Gt, at.Le, at.Lt)):
            found.update({name: getattr(item, name) for name in item.__dataclass_fields__})
    return found


def values(annotation: Any, metadata: list | None = None) -> st.SearchStrategy:
    """Valid JSON values of a model annotation (bounds included)."""
    metadata = list(metadata or [])
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        metadata += extra
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return st.one_of([values(member) for member in get_args(annotation)])
    if origin is tuple:  # a mutation entry: [method, args...]
        method, *args = get_args(annotation)
        return st.tuples(*map(values, args)).map(lambda a: [get_args(method)[0], *a])
    if origin is list:
        return st.lists(values(get_args(annotation)[0]), max_size=3)
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if annotation is str:
        return NAMES
    if annotation is bool:
        return st.booleans()
    if annotation in (int, float):
        bounds = _bounds(metadata)
        low = bounds.get("ge", bounds.get("gt", -1) + 1)
        high = bounds.get("le", bounds.get("lt", low + 10**6))
        numbers = st.integers(int(low), int(min(high, low + 64))) | st.just(int(high))
        if annotation is float:  # -0.0 is within [0, ...] too
            return numbers | st.floats(float(low), float(min(high, low + 64))) | st.just(-0.0)
        return numbers
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return records(annotation)
    raise TypeError(annotation)


def records(model: type[BaseModel]) -> st.SearchStrategy:
    """Objects of ``model``'s fields by wire name, optional ones sometimes left out."""
    fields = {
        info.alias or name: values(info.annotation, info.metadata)
        if info.is_required()
        else st.one_of(values(info.annotation, info.metadata), st.just(msgspec.UNSET))
        for name, info in model.model_fields.items()
    }
    return st.fixed_dictionaries(fields).map(lambda drawn: {k: v for k, v in drawn.items() if v is not msgspec.UNSET})


def _places(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON value (the paths of its arrays' and objects' members)."""
    members = enumerate(value) if type(value) is list else value.items() if type(value) is dict else ()
    return [path, *(place for key, member in members for place in _places(member, (*path, key)))]


@st.composite
def perturbed(draw: Any, value: Any) -> Any:
    """``value``, or a copy with one change: a member replaced by an odd value, left out, or an
    unknown key added to an object."""
    value = json.loads(json.dumps(value))
    places = _places(value)[1:]
    if not places or draw(st.booleans()):
        return value
    *parent_path, key = draw(st.sampled_from(places))
    parent = value
    for step in parent_path:
        parent = parent[step]
    change = draw(st.sampled_from(["replace", "drop", "extra"]))
    if change == "drop" and type(parent) is dict:
        del parent[key]
    elif change == "extra" and type(parent[key]) is dict:
        parent[key]["extra"] = 1
    else:
        parent[key] = draw(ODD)
    return value


def params_of(spec: Any) -> st.SearchStrategy:
    """Params of one of ``spec``'s models: named, or positional when the method takes them."""
    models = list(dict.fromkeys(v.params for v in spec.variants.values()))
    named = st.one_of([records(model) for model in models]).flatmap(perturbed)
    if not spec.positional:
        return named
    return named | named.map(lambda p: list(p.values()))


REQUESTS = st.sampled_from(METHODS).flatmap(lambda spec: st.tuples(st.just(spec), params_of(spec)))


def _protocols() -> tuple[Protocol, Protocol]:
    """A server's protocol, and one that never takes the strict way (the models validate all)."""
    strict, lax = Protocol(State()), Protocol(State())
    _lax(lax)
    return strict, lax


def _lax(protocol: Protocol) -> None:
    protocol._strictly = lambda message: None


STRICT, LAX = _protocols()


def _fields(struct: Any) -> bytes:
    """A params struct's values in field order (named and positional ones alike; the columns of
    bundles with their target lists as lists)."""
    return msgspec.json.encode(msgspec.structs.astuple(struct), enc_hook=list)


def _strictly(spec: Any, variant: Any, params: Any) -> Any:
    """``params`` (a JSON value) as the strict structs take them, None if they refuse them (or the
    protocol refuses positional params before)."""
    decoder = STRICT._params[variant.params]
    try:
        named = _named(spec, variant, params) if type(params) is list else params
    except ParamsError:
        return None
    return decoder.decode(json.dumps(named).encode())


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(REQUESTS)
def test_the_strict_structs_take_only_what_the_models_take_with_their_values(request):
    spec, params = request
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": spec.name, "params": params}).encode()
    for variant in spec.variants.values():
        struct = _strictly(spec, variant, params)
        if struct is None:
            continue  # the models decide
        decoder = STRICT._params[variant.params]
        named = _named(spec, variant, params) if type(params) is list else params
        try:
            by_models = decoder.from_models(named)
        except ParamsError as exc:
            raise AssertionError(f"the strict structs took what {variant.params.__name__} refuses: {exc}") from None
        assert _fields(struct) == _fields(by_models)
    if ANY_MODE in spec.variants and spec.name not in ("shutdown", "rpc.discover"):
        assert STRICT.handle(message) == LAX.handle(message)


def test_a_perl_rounds_first_batch_is_taken_strictly_and_answered_as_by_the_models():
    """A new scheduler under the client's handle (named params) and a dynamic scheduler's
    mutations, one batch: the strict structs take every request's params, with the answers the
    models give."""
    node = {"cpu": 1.0, "maxcpu": 8, "mem": 1 << 30, "maxmem": 16 << 30}
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "scheduler.new", "params": {"mode": "dynamic", "scheduler": "r1"}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "scheduler.apply",
            "params": {"scheduler": "r1", "mutations": [["add_node", "n1", node]]},
        },
        {"jsonrpc": "2.0", "id": 3, "method": "scheduler.free", "params": {"scheduler": "r1"}},
    ]
    specs = {spec.name: spec for spec in METHODS}
    for request in requests:
        spec = specs[request["method"]]
        variant = spec.variants.get("dynamic") or spec.variants[ANY_MODE]
        assert _strictly(spec, variant, request["params"]) is not None, request["method"]
    batch = json.dumps(requests).encode()
    assert STRICT.handle(batch) == LAX.handle(batch)


def _strict_bundles(nodes_texts: list[str]) -> Any:
    """A score request's params with bundles of these ``nodes`` JSON texts, taken by the strict
    structs and checked (None: refused)."""
    spec = next(spec for spec in METHODS if spec.name == "scheduler.score_best_balancing_migration_candidates")
    bundles = [
        {"leader": f"vm:{i}", "resources": [f"vm:{i}"], "nodes": json.loads(t)} for i, t in enumerate(nodes_texts)
    ]
    return _strictly(spec, spec.variants["static"], {"scheduler": "s1", "limit": 1, "candidates": bundles})


def test_each_bundle_gets_its_own_target_list():
    """The bundles come as columns, each row with its own list, equal lists one shared tuple,
    whatever characters the names hold (raw UTF-8, escapes)."""
    texts = ['["a","b"]', '["b"]', '["a","b"]', '["\u00e4","x\\u0000y"]', '["ä","b\\"c"]', '["b"]']
    columns = _strict_bundles(texts).candidates
    assert list(columns.nodes) == [tuple(json.loads(t)) for t in texts]
    assert columns.nodes[0] is columns.nodes[2]
    assert columns.leaders == [f"vm:{i}" for i in range(len(texts))]
    assert columns.resources == [[f"vm:{i}"] for i in range(len(texts))]


TARGET_TEXTS = st.lists(st.sampled_from(["A", "B", "\u00e4", "x\u0000y", 'b"c']), max_size=3).flatmap(
    lambda names: st.sampled_from(
        [json.dumps(names), json.dumps(names, ensure_ascii=False), json.dumps(names, indent=1)]
    )
)


@given(st.lists(TARGET_TEXTS, min_size=1, max_size=12))
def test_strict_bundles_count_and_read_as_their_texts_say(texts):
    """Any target lists (repeating, the same names in other texts): each row reads its text's
    list, and the size check counts the bundles' targets and members as the records hold them."""
    columns = _strict_bundles(texts).candidates
    lists = [tuple(json.loads(t)) for t in texts]
    assert list(columns.nodes) == lists and columns.nodes[1:] == lists[1:]
    assert columns.nodes.lengths().tolist() == list(map(len, lists))
    assert candidate_counts(columns) == (sum(map(len, lists)), len(texts))


def test_a_bundle_whose_target_list_is_not_names_is_refused_by_the_strict_structs():
    assert _strict_bundles(['["a"]', '["a",1]']) is None


def test_a_rule_the_strict_decoder_does_not_know_fails_its_making():
    """A validator added to the models without teaching the strict decoder is an error at start,
    not a rule the fast way skips."""

    class Rounded(rec.Record):
        cores: Annotated[float, AfterValidator(round)]

    with pytest.raises(TypeError, match="does not know validator"):
        struct_of(Rounded)


DEEP = [
    # A batch of scheduler.apply: 7 levels (batch, request, params, mutations, entry, record, stats).
    b'[{"jsonrpc":"2.0","id":1,"method":"scheduler.apply","params":{"scheduler":"s1","mutations":'
    b'[["add_node","A",4,1024],["add_service","vm:1",{"stats":{"maxcpu":1,"maxmem":8},"running":true,'
    b'"current-node":"A"}]]}}]',
    # Expanded candidates on a snapshot: 5 levels; an ignored key nesting 3 more.
    b'{"jsonrpc":"2.0","id":2,"method":"score_best_balancing_migrations","params":{"limit":1,'
    b'"usage":{"mode":"dynamic","nodes":[{"name":"A","maxcpu":4,"maxmem":64,"cpu":1,"mem":8},'
    b'{"name":"B","maxcpu":4,"maxmem":64,"cpu":0,"mem":0}]},"candidates":[{"sid":"vm:1",'
    b'"source-node":"A","target-node":"B","stats":{"cpu":1,"maxcpu":1,"mem":8,"maxmem":8}}]}}',
    b'{"jsonrpc":"2.0","id":3,"method":"score_best_balancing_migrations","params":{"limit":1,'
    b'"usage":{"mode":"static","nodes":[{"name":"A","maxcpu":4,"maxmem":64,"x":[[[1]]]}]},"candidates":[]}}',
]


@pytest.mark.parametrize("max_depth", [*range(1, 10), 1024])
def test_depth_limits_answer_alike(max_depth):
    """Under any depth limit the answers are those of the models' way, nested too deep or not."""
    strict, lax = (Protocol(State(limits=ServerLimits(max_json_depth=max_depth))) for _ in range(2))
    _lax(lax)
    for protocol in (strict, lax):
        protocol.handle(b'{"jsonrpc":"2.0","id":0,"method":"scheduler.new","params":{"mode":"static"}}')
    for message in DEEP:
        assert strict.handle(message) == lax.handle(message)
