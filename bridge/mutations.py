"""The binding's mutations of a scheduler, one call each or many at once (``scheduler.apply``).

A mutation runs as ``MUTATORS[mode][method](scheduler, *args)`` with its arguments as the engine
takes them: stats as :class:`core.ResourceStats` / :class:`core.NodeStats`, already within the
bounds of :mod:`core.limits`, so the engine takes them as they are (``trusted``) and checks only
what needs its state (names, duplicates, placement, aggregated memory).

Those arguments come from the models (:func:`engine_args`: a single call's params, or the
entries of ``scheduler.apply`` as the models validated them) or, for ``scheduler.apply``, from the
decoded request directly (:func:`prepared`): a round of the HA manager applies thousands of adds
in the one shape the Perl client writes, and a pydantic model per guest cost as much as the
engine's own work. Such a request arrives typed (:class:`bridge.fastdecode.TypedMutations`: msgspec
checked every value while decoding), or else as JSON, checked here entry by entry. Like
:mod:`bridge.fastpath` that is a filter, not a second schema: it takes a list only when it can
tell that the models accept every entry and what values they give; anything else gets None and
the models validate the list (its JSON: :func:`as_json`), so their errors are the only ones a
client sees (``tests/test_mutations.py`` and ``tests/test_fastdecode_apply.py`` hold them together).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgspec

from ..core import InvalidInputError, NodeStats, Resource, ResourceStats, Scheduler, SchedulingError
from ..core.limits import MAX_BYTES, MAX_CORES
from . import convert
from . import fastdecode as typed
from . import models as m
from .errors import MutationError

_MAX_NODE_CORES = int(MAX_CORES)


# -- running them ---------------------------------------------------------------------------


def _add_service(s: Any, sid: str, stats: ResourceStats, running: bool, current: str, target: str | None) -> None:
    s.add_service(sid, stats, running, current, target, trusted=True)


def _add_resource(s: Any, sid: str, stats: ResourceStats, running: bool, current: str, target: str | None) -> None:
    s.add_resource(sid, stats, running, current, target, trusted=True)


#: mode -> method -> mutator(scheduler, *engine args); the methods of :data:`bridge.models.MUTATIONS`.
MUTATORS: dict[str, dict[str, Callable[..., None]]] = {
    "static": {
        "add_node": lambda s, nodename, maxcpu, maxmem: s.add_node(nodename, maxcpu, maxmem, trusted=True),
        "remove_node": lambda s, nodename: s.remove_node(nodename),
        "add_service": _add_service,
        "add_service_usage_to_node": lambda s, node, sid, stats: s.add_service_usage_to_node(
            node, sid, stats, trusted=True
        ),
        "remove_service_usage": lambda s, sid: s.remove_service_usage(sid),
    },
    "dynamic": {
        "add_node": lambda s, nodename, stats: s.add_node(nodename, stats, trusted=True),
        "remove_node": lambda s, nodename: s.remove_node(nodename),
        "add_resource": _add_resource,
        "remove_resource": lambda s, sid: s.remove_resource(sid),
    },
}


@dataclass(frozen=True, slots=True)
class Adds:
    """A run of resource adds as the engine's bulk add takes them: ``(sid, Resource)`` rows."""

    rows: list[tuple[str, Resource]]


@dataclass(frozen=True, slots=True)
class Prepared:
    """Mutations ready to run, in order: ``(method, engine args)`` each, but for runs of resource
    adds (a round's guests), one ``(method, Adds)`` step per run."""

    steps: list[tuple[str, tuple | Adds]]

    @classmethod
    def of(cls, mode: str, entries: Sequence[tuple[str, tuple]]) -> Prepared:
        """``(method, engine args)`` entries of ``mode``, prepared."""
        adds = _ADDS[mode]
        # Resources are never changed and hold no sid: equal adds share one (a round's guests repeat
        # a few sizes and nodes; stats of equal value are one object already, see prepared).
        shared: dict[tuple, Resource] = {}
        steps: list[tuple[str, tuple | Adds]] = []
        for method, run in itertools.groupby(entries, key=lambda entry: entry[0]):
            if method != adds:
                steps.extend(run)
                continue
            rows = []
            for _, (sid, stats, running, current, target) in run:
                key = (id(stats), running, current, target)  # the entries keep every stats object alive
                resource = shared.get(key)
                if resource is None:
                    resource = shared[key] = Resource(stats, bool(running), current, target)
                rows.append((sid, resource))
            steps.append((method, Adds(rows)))
        return cls(steps)

    def entries(self) -> Iterator[tuple[str, tuple]]:
        """Each mutation as ``(method, engine args)``, in order."""
        for method, args in self.steps:
            if type(args) is Adds:
                for sid, res in args.rows:
                    yield method, (sid, res.stats, res.running, res.current, res.target)
            else:
                yield method, args


def apply(scheduler: Scheduler, mode: str, mutations: Prepared) -> None:
    """Run ``mutations`` on ``scheduler`` (of ``mode``) in order, all or nothing.

    They run on a copy of the usage, which replaces the scheduler's only when every one
    succeeded; the first failure is raised as a :class:`~bridge.errors.MutationError` naming its
    entry, and the scheduler is unchanged.

    Runs of resource adds (a round's guests) go to the engine in bulk
    (:meth:`~core.Scheduler.add_resources`, documented as the adds one by one). Should that fail,
    the mutations run again one by one on a fresh copy: that run names the failing entry, and
    its outcome is the one that counts.
    """
    trial = _trial(scheduler)
    try:
        _run_in_bulk(trial, mode, mutations.steps)
    except (SchedulingError, InvalidInputError):
        trial = _trial(scheduler)
        _run_one_by_one(trial, mode, mutations.entries())
    scheduler.usage = trial.usage


def _trial(scheduler: Scheduler) -> Scheduler:
    trial = copy.copy(scheduler)
    trial.usage = scheduler.usage.copy()
    return trial


#: mode -> the mutation that adds a resource (what a round sends by the thousand).
_ADDS = {"static": "add_service", "dynamic": "add_resource"}


def _run_in_bulk(trial: Scheduler, mode: str, steps: list[tuple[str, tuple | Adds]]) -> None:
    mutators = MUTATORS[mode]
    for method, args in steps:
        if type(args) is Adds:
            trial.add_resources(args.rows, trusted=True)
        else:
            mutators[method](trial, *args)


def _run_one_by_one(trial: Scheduler, mode: str, entries: Iterator[tuple[str, tuple]]) -> None:
    mutators = MUTATORS[mode]
    for index, (method, args) in enumerate(entries):
        try:
            mutators[method](trial, *args)
        except (SchedulingError, InvalidInputError) as exc:
            raise MutationError(index, method, exc) from None


# -- from the models ------------------------------------------------------------------------


def _service_args(sid: str, svc: m.StaticService | m.DynamicResource, stats: ResourceStats) -> tuple:
    return (sid, stats, svc.running, svc.current_node, svc.target_node)


#: mode -> method -> the engine args of a mutation's model-validated args (in binding order).
_FROM_MODELS: dict[str, dict[str, Callable[..., tuple]]] = {
    "static": {
        "add_node": lambda nodename, maxcpu, maxmem: (nodename, maxcpu, maxmem),
        "remove_node": lambda nodename: (nodename,),
        "add_service": lambda sid, svc: _service_args(sid, svc, convert.static_stats(svc.stats)),
        "add_service_usage_to_node": lambda node, sid, stats: (node, sid, convert.static_stats(stats)),
        "remove_service_usage": lambda sid: (sid,),
    },
    "dynamic": {
        "add_node": lambda nodename, stats: (nodename, convert.node_stats(stats)),
        "remove_node": lambda nodename: (nodename,),
        "add_resource": lambda sid, res: _service_args(sid, res, convert.dynamic_stats(res.stats)),
        "remove_resource": lambda sid: (sid,),
    },
}


def engine_args(mode: str, method: str, args: Sequence) -> tuple:
    """The engine args of ``method``'s model-validated ``args`` (in binding order)."""
    return _FROM_MODELS[mode][method](*args)


def from_models(mode: str, mutations: Sequence[tuple]) -> Prepared:
    """``scheduler.apply``'s entries as the models validated them (``(method, *args)``), prepared."""
    return Prepared.of(mode, [(method, engine_args(mode, method, args)) for method, *args in mutations])


def single_call(mode: str, method: str) -> Callable[[Any, Any], None]:
    """The handler ``run(scheduler, params)`` of the single call ``scheduler.<method>``."""
    mutate = MUTATORS[mode][method]
    names = [name for name in m.MUTATIONS[mode][method].model_fields if name != "scheduler"]
    return lambda s, p: mutate(s, *engine_args(mode, method, [getattr(p, name) for name in names]))


# -- straight from JSON -----------------------------------------------------------------------

#: The params model of ``scheduler.apply`` per mode, and back.
APPLY_PARAMS = {"static": m.StaticApplyParams, "dynamic": m.DynamicApplyParams}
APPLY_MODES = {model: mode for mode, model in APPLY_PARAMS.items()}


def prepared(mode: str, entries: Any) -> Prepared | None:
    """``entries`` (decoded JSON, or typed by :mod:`bridge.fastdecode`) prepared, when every
    entry is a mutation of ``mode`` that the models accept as it is; None otherwise, and whenever
    in doubt (the models then validate :func:`as_json` of them)."""
    if type(entries) is typed.TypedMutations:
        return _from_typed(mode, entries)
    if type(entries) is not list:
        return None
    parsers = _PARSERS[mode]
    # Equal stats give one ResourceStats (never changed, so resources may share it): a round's guests
    # repeat a few sizes, and building one costs more than checking its values.
    shared: dict[tuple, ResourceStats] = {}
    out = []
    append = out.append
    for entry in entries:
        if type(entry) is not list or not entry or type(entry[0]) is not str:
            return None
        parse = parsers.get(entry[0])
        args = None if parse is None else parse(entry, shared)
        if args is None:
            return None
        append((entry[0], args))
    return Prepared.of(mode, out)


def as_json(entries: Any) -> Any:
    """``entries`` as the usual path decodes them: typed ones (:mod:`bridge.fastdecode`) as their
    JSON, anything else as it is."""
    return entries.json() if type(entries) is typed.TypedMutations else entries


# Each check returns the value the models would produce, or None for anything they refuse or
# might treat differently. They are the rules of bridge/models.py's scalar types (_placed, which
# a round runs thousands of times, writes the name and running checks out):
#   Name: a non-empty str.
#   Cores: a float or int (not a bool), finite, in [0, MAX_CORES]; as a float, -0.0 as 0.0.
#   Bytes: an int (not a bool), or a float holding an integer (as that int); in [0, MAX_BYTES].
#   Running: true/false; null as false; an int or float by Perl truth (non-zero).


def _running(value: Any) -> bool | None:
    if value is True or value is False:
        return value
    if value is None:
        return False
    kind = type(value)
    return value != 0 if kind is int or kind is float else None


def _cores(value: Any) -> float | None:
    kind = type(value)
    if (kind is float or kind is int) and 0 <= value <= MAX_CORES:
        return float(value) + 0.0
    return None


def _integer(value: Any, low: int, high: int) -> int | None:  # Bytes (or a node's counts) in [low, high]
    kind = type(value)
    if kind is float and value.is_integer():
        value, kind = int(value), int
    return value if kind is int and low <= value <= high else None


def _stats(record: Any, dynamic: bool, shared: dict) -> ResourceStats | None:
    """StaticStats as static_stats gives them, or DynamicStats as dynamic_stats gives them;
    equal values give the one object in ``shared``."""
    if type(record) is not dict:
        return None
    maxcpu, maxmem = _cores(record.get("maxcpu")), _integer(record.get("maxmem"), 0, MAX_BYTES)
    if maxcpu is None or maxmem is None:
        return None
    if dynamic:
        cpu, mem = _cores(record.get("cpu")), _integer(record.get("mem"), 0, MAX_BYTES)
        if cpu is None or mem is None:
            return None
        values = (cpu, maxcpu, mem, maxmem)
    else:
        values = (maxcpu, maxcpu, maxmem, maxmem)
    stats = shared.get(values)
    if stats is None:
        stats = shared[values] = ResourceStats(*values)
    return stats


def _placed(entry: list, dynamic: bool, shared: dict) -> tuple | None:
    """``[method, sid, {stats, running, current-node, target-node}]`` (StaticService or
    DynamicResource; other keys ignored) as ``(sid, stats, running, current, target)``."""
    if len(entry) != 3:
        return None
    sid, record = entry[1], entry[2]
    if type(sid) is not str or not sid or type(record) is not dict:
        return None
    current, target = record.get("current-node"), record.get("target-node")
    if type(current) is not str or not current or (target is not None and (type(target) is not str or not target)):
        return None
    running = record.get("running", _MISSING)
    if running is not True and running is not False:
        running = None if running is _MISSING else _running(running)
        if running is None:
            return None
    stats = _stats(record.get("stats"), dynamic, shared)
    return None if stats is None else (sid, stats, running, current, target)


_MISSING = object()


def _name(value: Any) -> str | None:
    return value if type(value) is str and value else None


def _static_node(entry: list, shared: dict) -> tuple | None:
    if len(entry) != 4:
        return None
    name = _name(entry[1])
    maxcpu, maxmem = _integer(entry[2], 1, _MAX_NODE_CORES), _integer(entry[3], 1, MAX_BYTES)
    return None if name is None or maxcpu is None or maxmem is None else (name, maxcpu, maxmem)


def _dynamic_node(entry: list, shared: dict) -> tuple | None:
    if len(entry) != 3 or type(entry[2]) is not dict:
        return None
    name, record = _name(entry[1]), entry[2]
    cpu, maxcpu = _cores(record.get("cpu")), _integer(record.get("maxcpu"), 1, _MAX_NODE_CORES)
    mem, maxmem = _integer(record.get("mem"), 0, MAX_BYTES), _integer(record.get("maxmem"), 1, MAX_BYTES)
    if name is None or cpu is None or maxcpu is None or mem is None or maxmem is None:
        return None
    return (name, NodeStats(cpu, maxcpu, mem, maxmem))


def _legacy(entry: list, shared: dict) -> tuple | None:
    if len(entry) != 4:
        return None
    node, sid, stats = _name(entry[1]), _name(entry[2]), _stats(entry[3], False, shared)
    return None if node is None or sid is None or stats is None else (node, sid, stats)


def _any_name(entry: list, shared: dict) -> tuple | None:  # removals take any string, even an empty one
    return (entry[1],) if len(entry) == 2 and type(entry[1]) is str else None


_PARSERS: dict[str, dict[str, Callable[[list, dict], tuple | None]]] = {
    "static": {
        "add_node": _static_node,
        "remove_node": _any_name,
        "add_service": lambda entry, shared: _placed(entry, False, shared),
        "add_service_usage_to_node": _legacy,
        "remove_service_usage": _any_name,
    },
    "dynamic": {
        "add_node": _dynamic_node,
        "remove_node": _any_name,
        "add_resource": lambda entry, shared: _placed(entry, True, shared),
        "remove_resource": _any_name,
    },
}


# -- typed by bridge.fastdecode ---------------------------------------------------------------
# msgspec checked each value by the models' rules as it decoded the entries (bridge.fastdecode),
# for the methods of both modes; what is left is whether each record is a mutation of the
# handle's mode, and the engine values the models would give.


def _from_typed(mode: str, typed_mutations: typed.TypedMutations) -> Prepared | None:
    adds, convert_entry = _TYPED_ADDS[mode], _FROM_TYPED[mode]
    texts, records = iter(typed_mutations.texts), typed_mutations.records
    # Records of equal text (a round's guests repeat a few dozen) give one Resource.
    shared = {text: _typed_resource(record) for text, record in records.items()} if records else {}
    steps: list[tuple[str, tuple | Adds]] = []
    for kind, run in itertools.groupby(typed_mutations.entries, key=type):
        if kind is adds:
            run = list(run)
            rows = list(zip(map(_SID, run), map(shared.__getitem__, itertools.islice(texts, len(run)))))
            steps.append((_ADDS[mode], Adds(rows)))
            continue
        for entry in run:
            step = convert_entry.get(kind, _no_step)(entry)
            if step is None:  # a mutation of the other mode: the models say so
                return None
            steps.append(step)
    return Prepared(steps)


_SID = attrgetter("sid")


def _typed_resource(record: typed.StaticPlaced | typed.DynamicPlaced) -> Resource:
    return Resource(_typed_stats(record.stats), record.running, record.current_node, record.target_node)


def _typed_stats(stats: typed.StaticStats | typed.ResourceStats) -> ResourceStats:
    """As convert.static_stats / dynamic_stats give them from the models (cores: -0.0 as 0.0)."""
    if type(stats) is typed.StaticStats:
        return ResourceStats(stats.maxcpu + 0.0, stats.maxcpu + 0.0, stats.maxmem, stats.maxmem)
    return ResourceStats(stats.cpu + 0.0, stats.maxcpu + 0.0, stats.mem, stats.maxmem)


def _static_node(entry: typed.AddNode) -> tuple | None:
    if type(entry.maxcpu_or_stats) is not int or entry.maxmem is msgspec.UNSET:
        return None
    return "add_node", (entry.nodename, entry.maxcpu_or_stats, entry.maxmem)


def _dynamic_node(entry: typed.AddNode) -> tuple | None:
    stats = entry.maxcpu_or_stats
    if type(stats) is not typed.NodeStats or entry.maxmem is not msgspec.UNSET:
        return None
    return "add_node", (entry.nodename, NodeStats(stats.cpu + 0.0, stats.maxcpu, stats.mem, stats.maxmem))


def _no_step(entry: Any) -> None:
    return None


#: mode -> the typed record of its resource adds.
_TYPED_ADDS = {"static": typed.AddService, "dynamic": typed.AddResource}

#: mode -> typed record -> its ``(method, engine args)``, or None if not of the mode after all.
_FROM_TYPED: dict[str, dict[type, Callable[[Any], tuple | None]]] = {
    "static": {
        typed.AddNode: _static_node,
        typed.RemoveNode: lambda e: ("remove_node", (e.nodename,)),
        typed.AddServiceUsage: lambda e: ("add_service_usage_to_node", (e.nodename, e.sid, _typed_stats(e.stats))),
        typed.RemoveServiceUsage: lambda e: ("remove_service_usage", (e.sid,)),
    },
    "dynamic": {
        typed.AddNode: _dynamic_node,
        typed.RemoveNode: lambda e: ("remove_node", (e.nodename,)),
        typed.RemoveResource: lambda e: ("remove_resource", (e.sid,)),
    },
}
