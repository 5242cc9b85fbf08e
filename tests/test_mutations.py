"""``scheduler.apply``'s bulk path agrees with the models it stands in for.

:func:`bridge.mutations.prepared` (of decoded JSON, or of entries typed by :mod:`bridge.fastdecode`)
may only take a list of entries that the models accept, and
must give the engine the values the models' path gives it (:func:`bridge.mutations.from_models`);
whatever it turns down goes to the models, so a call's errors are the models' own. The expected
side is always the models' path, never a hard-coded result.
"""

from __future__ import annotations

import json
import struct

from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from crs_bridge.bridge import mutations
from crs_bridge.bridge.errors import MutationError, ParamsError
from crs_bridge.bridge.fastdecode import TypedMutations, TypedRequestDecoder
from crs_bridge.bridge.methods import Bridge
from crs_bridge.core import Aggregation, InvalidInputError, NodeStats, ResourceStats, SchedulingError, new_scheduler
from crs_bridge.core.limits import MAX_BYTES, MAX_CORES

# Values of every kind a JSON decoder can hand over, valid and not; and pools of mostly valid
# ones, so that whole lists pass too and the values given to the engine are compared.
ANY = {
    "name": st.sampled_from(["n1", "vm:1", "ü-ñode", "", 1, None, True, ["n1"], {"a": 1}]),
    "cores": st.sampled_from(
        [0.0, -0.0, 0.5, 1.0, 4, 0, 2**53, 2**53 + 1, float(MAX_CORES), 2**60, 10**400, 1e300, -1.0, -1]
        + [float("nan"), float("inf"), True, False, "1.5", None, [1.0]]
    ),
    "bytes": st.sampled_from(
        [0, 5, 2**30, MAX_BYTES, MAX_BYTES + 1, 2**64, -1, 4.0, -0.0, 2.0**40, 3.5, 1e300, float("inf")]
        + [float("nan"), True, False, "5", None, [5]]
    ),
    "running": st.sampled_from([True, False, 1, 0, 0.0, 2.5, float("nan"), None, "1", [True]]),
}
MOSTLY_VALID = {
    "name": st.sampled_from(["n1", "n2", "vm:1", "ü-ñode", "n1", ""]),
    "cores": st.sampled_from([0.0, -0.0, 0.5, 1, 16, 2.0**53, float(2**53 + 2), 7.25]),
    "bytes": st.sampled_from([0, 1, 2**30, 4.0, -0.0, MAX_BYTES, float(2**61), 2.5]),
    "running": st.sampled_from([True, False, 1, 0, None, 0.5, "yes"]),
}


def maybe_drop(draw, record: dict) -> dict:
    for key in draw(st.sets(st.sampled_from(list(record)), max_size=1)):
        del record[key]  # sometimes a key is missing
    if draw(st.booleans()):
        record["extra"] = 1  # unknown keys are ignored
    return record


@st.composite
def stats(draw, pool, keys=("cpu", "maxcpu", "mem", "maxmem")):
    kinds = {"cpu": "cores", "maxcpu": "cores", "mem": "bytes", "maxmem": "bytes"}
    return maybe_drop(draw, {key: draw(pool[kinds[key]]) for key in keys})


@st.composite
def placed(draw, pool, keys):
    record = {"stats": draw(stats(pool, keys)), "running": draw(pool["running"]), "current-node": draw(pool["name"])}
    if draw(st.booleans()):
        record["target-node"] = draw(st.one_of(pool["name"], st.none()))
    return maybe_drop(draw, record)


def entry(method: str, *args) -> st.SearchStrategy:
    return st.tuples(*args).map(lambda values: [method, *values])


def static_entries(pool) -> st.SearchStrategy:
    name, cores, byte_count = pool["name"], pool["cores"], pool["bytes"]
    return st.one_of(
        entry("add_node", name, cores, byte_count),
        entry("add_node", name, cores),
        entry("remove_node", name),
        entry("add_service", name, placed(pool, ("maxcpu", "maxmem"))),
        entry("add_service_usage_to_node", name, name, stats(pool, ("maxcpu", "maxmem"))),
        entry("remove_service_usage", name),
        entry("add_resource", name, placed(pool, ("cpu", "maxcpu", "mem", "maxmem"))),
    )


def dynamic_entries(pool) -> st.SearchStrategy:
    name, cores, byte_count = pool["name"], pool["cores"], pool["bytes"]
    return st.one_of(
        entry("add_node", name, stats(pool)),
        entry("add_node", name, cores, byte_count),
        entry("remove_node", name),
        entry("add_resource", name, placed(pool, ("cpu", "maxcpu", "mem", "maxmem"))),
        entry("remove_resource", name, name),
        entry("add_service", name, placed(pool, ("maxcpu", "maxmem"))),
    )


def bits(value):
    """A value with floats by their bit patterns (tells -0.0 from 0.0, and types apart)."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (ResourceStats, NodeStats)):
        return (type(value).__name__, *(bits(getattr(value, f)) for f in ("cpu", "maxcpu", "mem", "maxmem")))
    if isinstance(value, (tuple, list)):
        return tuple(bits(v) for v in value)
    return (type(value).__name__, value)


def check_agreement(mode: str, entries: list, fast: mutations.Prepared | None = None) -> mutations.Prepared | None:
    """The bulk path takes only what the models accept, with the engine values of their path
    (``fast``: what it made of them, if not of the JSON ``entries``)."""
    fast = mutations.prepared(mode, entries) if fast is None else fast
    model = mutations.APPLY_PARAMS[mode]
    try:
        validated = model.model_validate({"scheduler": "s1", "mutations": entries})
    except ValidationError:
        assert fast is None
        return None
    if fast is not None:
        assert bits(list(fast.entries())) == bits(list(mutations.from_models(mode, validated.mutations).entries()))
    return fast


#: The typed decoder of the server (bridge.fastdecode), for entries typed as the server types them.
TYPED = TypedRequestDecoder({})


def typed_entries(entries: list) -> TypedMutations | None:
    """``entries`` as the typed decoder hands them over in a request, or None if it does not."""
    raw = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "scheduler.apply", "params": {"mutations": entries}})
    decoded = TYPED.decode(raw.encode(), 1024)
    if decoded is None:
        return None
    typed = decoded["params"]["mutations"]
    assert typed.json() == json.loads(raw)["params"]["mutations"]  # what the models get instead
    return typed


def check_typed_agreement(entries: list) -> list[mutations.Prepared | None]:
    """The typed path too takes only what the models accept, with the engine values of their path;
    typed entries are checked against both modes (the handle's mode decides)."""
    typed = typed_entries(entries)
    if typed is None:
        return [None, None]
    return [check_agreement(mode, entries, mutations.prepared(mode, typed)) for mode in ("static", "dynamic")]


@given(st.sampled_from([ANY, MOSTLY_VALID]).flatmap(lambda pool: st.lists(static_entries(pool), max_size=4)))
def test_static_entries_are_taken_only_as_the_models_take_them(entries):
    check_agreement("static", entries)
    check_typed_agreement(entries)


@given(st.sampled_from([ANY, MOSTLY_VALID]).flatmap(lambda pool: st.lists(dynamic_entries(pool), max_size=4)))
def test_dynamic_entries_are_taken_only_as_the_models_take_them(entries):
    check_agreement("dynamic", entries)
    check_typed_agreement(entries)


#: Values as a JSON encoder writes them, mostly as the typed path takes them (booleans for
#: ``running``, integers for byte counts), with bounds crossed now and then.
PLAIN = {
    "name": st.sampled_from(["n1", "n2", "vm:1", "ü-ñode", "n1", ""]),
    "cores": st.sampled_from([0.0, -0.0, 0.5, 1, 16, 2**53, 2**53 + 1, 7.25, -1]),
    "bytes": st.sampled_from([0, 1, 2**30, MAX_BYTES, MAX_BYTES + 1, -1]),
    "running": st.sampled_from([True, False, True, False, None]),
}


@st.composite
def plain_placed(draw, keys):
    """A resource's record with every key and no other (what the typed path may take)."""
    kinds = {"cpu": "cores", "maxcpu": "cores", "mem": "bytes", "maxmem": "bytes"}
    record = {
        "stats": {key: draw(PLAIN[kinds[key]]) for key in keys},
        "running": draw(PLAIN["running"]),
        "current-node": draw(PLAIN["name"]),
    }
    if draw(st.booleans()):
        record["target-node"] = draw(st.one_of(PLAIN["name"], st.none()))
    return record


def plain_entries() -> st.SearchStrategy:
    name, cores, byte_count = PLAIN["name"], PLAIN["cores"], PLAIN["bytes"]
    stats = st.fixed_dictionaries({"cpu": cores, "maxcpu": cores, "mem": byte_count, "maxmem": byte_count})
    return st.one_of(
        entry("add_node", name, cores, byte_count),
        entry("add_node", name, stats),
        entry("remove_node", name),
        entry("add_service", name, plain_placed(("maxcpu", "maxmem"))),
        entry("add_resource", name, plain_placed(("cpu", "maxcpu", "mem", "maxmem"))),
        entry("add_service_usage_to_node", name, name, st.fixed_dictionaries({"maxcpu": cores, "maxmem": byte_count})),
        entry("remove_service_usage", name),
        entry("remove_resource", name),
    )


@given(st.lists(plain_entries(), max_size=5))
def test_typed_entries_of_either_mode_are_taken_only_as_the_models_take_them(entries):
    check_typed_agreement(entries)


GiB = 1024**3
VALID = {
    "static": [
        ["add_node", "n1", 16, 64 * GiB],
        ["add_node", "n2", 8.0, 2.0**40],
        ["add_service", "vm:1", {"stats": {"maxcpu": 4, "maxmem": GiB}, "running": 1, "current-node": "n1"}],
        [
            "add_service",
            "vm:2",
            {
                "stats": {"maxcpu": 0.5, "maxmem": 3.0 * GiB},
                "running": None,
                "current-node": "n1",
                "target-node": "n2",
                "note": "ignored",
            },
        ],
        ["add_service_usage_to_node", "n2", "vm:3", {"maxcpu": -0.0, "maxmem": 0}],
        ["remove_service_usage", ""],
        ["remove_node", "n9"],
    ],
    "dynamic": [
        ["add_node", "n1", {"cpu": 1, "maxcpu": 16.0, "mem": 0, "maxmem": 64 * GiB}],
        [
            "add_resource",
            "vm:1",
            {
                "stats": {"cpu": 0.25, "maxcpu": 2, "mem": GiB, "maxmem": 2.0 * GiB},
                "running": False,
                "current-node": "n1",
                "target-node": None,
            },
        ],
        ["remove_resource", "vm:1"],
        ["remove_node", "n1"],
    ],
}


def test_the_shapes_the_perl_client_writes_take_the_bulk_path():
    for mode, entries in VALID.items():
        assert check_agreement(mode, entries) is not None, mode


def test_the_shapes_the_perl_client_writes_take_the_typed_path():
    static_stats, dynamic_stats = {"maxcpu": 4, "maxmem": GiB}, {"cpu": 0.5, "maxcpu": 2, "mem": GiB, "maxmem": GiB}
    records = {
        "static": ["add_service", "vm:1", {"stats": static_stats, "running": True, "current-node": "n1"}],
        "dynamic": [
            "add_resource",
            "vm:1",
            {"stats": dynamic_stats, "running": False, "current-node": "n1", "target-node": "n2"},
        ],
    }
    nodes = {
        "static": [["add_node", "n1", 16, 64 * GiB]],
        "dynamic": [["add_node", "n1", {"cpu": 1, "maxcpu": 16, "mem": 0, "maxmem": 64 * GiB}]],
    }
    for mode, (static, dynamic) in {"static": (True, False), "dynamic": (False, True)}.items():
        entries = [*nodes[mode], records[mode], ["remove_node", "n9"], records[mode]]
        taken = check_typed_agreement(entries)
        assert [p is not None for p in taken] == [static, dynamic], mode


def test_a_bad_value_deep_in_a_long_list_is_named_as_the_models_name_it():
    bridge = Bridge()
    handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    service = {"stats": {"maxcpu": 1.0, "maxmem": GiB}, "running": True, "current-node": "n1"}
    entries = [["add_node", "n1", 16, 64 * GiB]] + [["add_service", f"vm:{i}", service] for i in range(400)]
    entries[257] = ["add_service", "vm:x", {**service, "stats": {"maxcpu": 1.0, "maxmem": 1.5}}]
    try:
        bridge.call("scheduler.apply", {"scheduler": handle, "mutations": entries})
    except ParamsError as exc:
        assert exc.errors[0][0] == "mutations[257].service.stats.maxmem"
    else:
        raise AssertionError("a fractional byte count was accepted")
    assert bridge.call("scheduler.list_nodes", [handle]) == []


# -- apply: runs of adds in bulk, against the mutations one by one --------------------------

# Enough sids for most batches to succeed, and some duplicates.
SIDS = st.integers(1, 200).map(lambda i: f"vm:{i}")
# Mostly known nodes; n4 is unknown until an entry adds it. Mostly stationary resources.
NODES = st.sampled_from(["n1", "n2", "n3"] * 6 + ["n4"])
TARGETS = st.sampled_from([None] * 12 + ["n1", "n2", "n3", "n4"])
#: Resource stats, a few shared objects and some fresh ones (equal values, other objects); huge
#: memory makes a node's aggregated memory overflow (an InvalidInputError of the engine).
RESOURCE_STATS = st.one_of(
    st.sampled_from([ResourceStats(1.0, 1.0, GiB, GiB), ResourceStats(0.5, 2.0, 0, 4 * GiB)]),
    st.builds(
        lambda cpu, mem: ResourceStats(cpu, cpu, mem, mem),
        st.sampled_from([0.0, 0.25, 4.0]),
        st.sampled_from([0, GiB, MAX_BYTES // 3]),
    ),
)


@st.composite
def engine_entries(draw, mode: str, first: bool) -> list:
    """Mutations of ``mode`` as the engine takes them (``Prepared.entries()``): the ``first`` batch
    adds nodes n1 to n3; then mostly resource adds (runs of them), some of them failing, with
    other mutations in between."""
    node_stats = [(16, 64 * GiB), (8, 32 * GiB), (4, 16 * GiB)] if first else []
    entries = [
        (
            "add_node",
            (f"n{i + 1}", *stats) if mode == "static" else (f"n{i + 1}", NodeStats(1.0, stats[0], GiB, stats[1])),
        )
        for i, stats in enumerate(node_stats)
    ]
    add = "add_service" if mode == "static" else "add_resource"
    remove = "remove_service_usage" if mode == "static" else "remove_resource"
    placed = st.tuples(SIDS, RESOURCE_STATS, st.booleans(), NODES, TARGETS)
    node = st.tuples(st.sampled_from(["n1", "n4"]), st.just(8), st.just(32 * GiB))
    if mode == "dynamic":
        node = node.map(lambda n: (n[0], NodeStats(0.5, n[1], 0, n[2])))
    others = [
        st.tuples(st.just("add_node"), node),
        st.tuples(st.just("remove_node"), st.tuples(st.sampled_from(["n2", "n4"]))),
        st.tuples(st.just(remove), st.tuples(SIDS)),
    ]
    if mode == "static":
        others.append(st.tuples(st.just("add_service_usage_to_node"), st.tuples(NODES, SIDS, RESOURCE_STATS)))
    for _ in range(draw(st.integers(0, 12))):
        # Three in four are adds, so that runs of them form.
        entries.append(draw(st.tuples(st.just(add), placed) if draw(st.integers(0, 3)) else st.one_of(others)))
    return entries


def state(scheduler) -> tuple:
    """What a scheduler holds, as every query would see it (views bit for bit: the order of
    each node's resources decides their sums)."""
    usage = scheduler.usage
    views = [usage.view(a) for a in Aggregation]
    return (
        usage.node_names(),
        list(usage.resources().items()),
        [(v.cpu.tobytes(), v.mem.tobytes(), v.maxcpu.tobytes(), v.maxmem.tobytes()) for v in views],
    )


def one_by_one(mode: str, batches: list) -> tuple:
    """The outcome of applying ``batches`` with every mutation run as its single call does: a
    failing batch leaves the state as it was and names its entry."""
    scheduler, errors = new_scheduler(mode), []
    for batch in batches:
        trial = new_scheduler(mode)
        trial.usage = scheduler.usage.copy()
        for index, (method, args) in enumerate(batch):
            try:
                mutations.MUTATORS[mode][method](trial, *args)
            except (SchedulingError, InvalidInputError) as exc:
                errors.append(str(MutationError(index, method, exc)))
                break
        else:
            scheduler = trial
            errors.append(None)
    return state(scheduler), errors


def applied(mode: str, batches: list) -> tuple:
    scheduler, errors = new_scheduler(mode), []
    for batch in batches:
        try:
            mutations.apply(scheduler, mode, mutations.Prepared.of(mode, list(batch)))
            errors.append(None)
        except MutationError as exc:
            errors.append(str(exc))
    return state(scheduler), errors


@st.composite
def sessions(draw) -> tuple[str, list]:
    mode = draw(st.sampled_from(["static", "dynamic"]))
    return mode, [draw(engine_entries(mode, True))] + draw(st.lists(engine_entries(mode, False), max_size=2))


@given(sessions())
def test_apply_gives_what_the_mutations_one_by_one_give(session):
    mode, batches = session
    assert applied(mode, batches) == one_by_one(mode, batches)
