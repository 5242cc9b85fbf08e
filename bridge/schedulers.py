"""The live schedulers: the server's state (handles, staged candidates) and the ``scheduler.*``
methods that change or read one, mutations in bulk (``scheduler.apply``) and staging included.

Every call changes state at most once, through one engine operation that is itself atomic, and
only after all params were decoded and checked.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..core import CandidateBatch, InvalidInputError, Scheduler, SchedulingError, ScoredMigration, new_scheduler
from ..core.candidates import concat_batches
from ..core.scheduler import score_migrations
from . import models as m
from . import results as r
from . import wire
from .errors import MutationError, ParamsError, UnknownHandleError, shorten
from .limits import ServerLimits
from .registry import MethodSpec, Variant, both, on_scheduler, stateless


@dataclass
class Staging:
    """Candidates staged for one scheduler: the expanded parts in order, and how many entries
    (bundles or expanded candidates) of the staged lists they came from."""

    count: int = 0
    parts: list[CandidateBatch] = field(default_factory=list)


#: A handle of the server's own form, ``s<N>`` as the server writes N (no sign, no leading zero).
_SERVER_HANDLE = re.compile(r"s([1-9][0-9]*)")

#: Most digits of N in a client's handle ``s<N>``: the server's own handles then never outgrow
#: the form, so none can meet a longer one a client chose (and N stays a cheap int).
_HANDLE_DIGITS = 18


def _handle_number(handle: str) -> int:
    """N of a handle ``s<N>`` of the server's own form, 0 for any other handle (ParamsError
    naming the field if N has more than :data:`_HANDLE_DIGITS` digits)."""
    match = _SERVER_HANDLE.fullmatch(handle)
    if match is None:
        return 0
    if len(match[1]) > _HANDLE_DIGITS:
        raise ParamsError([("scheduler", f"a handle s<N> takes N of at most {_HANDLE_DIGITS} digits")])
    return int(match[1])


#: Most freed schedulers kept for deallocation while the server waits (HA frees one a round).
_FREED_KEPT = 4


@dataclass
class State:
    """The server's state: live schedulers by handle, their staged candidates, the limits."""

    limits: ServerLimits = field(default_factory=ServerLimits)
    schedulers: dict[str, Scheduler] = field(default_factory=dict)
    #: Candidates staged per handle (``scheduler.stage_candidates``).
    staged: dict[str, Staging] = field(default_factory=dict)
    shutdown_requested: bool = False
    #: The methods in force, by name (:mod:`bridge.stateless` lists them).
    methods: dict[str, MethodSpec] = field(default_factory=dict)
    #: Their OpenRPC document, once ``rpc.discover`` asked for it.
    document: dict | None = None
    #: Schedulers freed since the server last waited for input, deallocated only then
    #: (:meth:`drop_freed`): a round's first batch frees the last round's scheduler, and freeing
    #: its objects should not delay the round's first answers.
    freed: list[Scheduler] = field(default_factory=list)
    #: The number of the next handle the server picks (``s<N>``): past every ``s<N>`` it picked
    #: or a client chose, so that no handle is ever handed out twice.
    _next_handle: int = 1

    def scheduler(self, handle: str) -> Scheduler:
        """The live scheduler behind ``handle`` (UnknownHandleError if none)."""
        try:
            return self.schedulers[handle]
        except KeyError:
            raise UnknownHandleError(handle) from None

    def new_handle(self, scheduler: Scheduler, handle: str | None = None) -> str:
        """Register ``scheduler`` under ``handle`` (the client's choice: ParamsError naming the
        field while a live scheduler has it), or under a fresh one (``s1``, ``s2``, ...; never
        reused, nor any that a client chose, even once freed)."""
        if handle is None:
            handle = f"s{self._next_handle}"
            self._next_handle += 1
        elif handle in self.schedulers:
            raise ParamsError([("scheduler", f"the handle '{shorten(handle)}' is in use; free it or choose another")])
        else:
            self._next_handle = max(self._next_handle, _handle_number(handle) + 1)
        self.schedulers[handle] = scheduler
        return handle

    def free(self, handle: str) -> None:
        """Forget the live scheduler behind ``handle`` (UnknownHandleError if none) and its staged
        candidates; the scheduler waits in :attr:`freed` (a few at most: a client that never lets
        the server wait must not pile them up)."""
        self.freed.append(self.scheduler(handle))
        del self.schedulers[handle]
        self.staged.pop(handle, None)
        if len(self.freed) > _FREED_KEPT:
            self.drop_freed()

    def drop_freed(self) -> None:
        """Deallocate the freed schedulers (the server calls it before it waits for input)."""
        self.freed.clear()


# -- mutations: one call each, or many at once ------------------------------------------------


#: mode -> the mutation that adds a resource (what a round sends by the thousand), and its record param.
_ADDS = {"static": ("add_service", "service"), "dynamic": ("add_resource", "resource")}


def _add(method: str, record: str) -> Callable[[Any, Any], None]:
    """The mutator of ``add_service``/``add_resource``, whose resource is the param ``record``."""

    def add(s: Any, args: Any) -> None:
        resource = wire.placed(getattr(args, record))
        getattr(s, method)(args.sid, resource.stats, resource.running, resource.current, resource.target)

    return add


#: mode -> method -> ``mutate(scheduler, args)``, ``args`` the single call's params (or a
#: ``scheduler.apply`` entry: the same names); the methods of :data:`bridge.models.MUTATIONS`.
MUTATORS: dict[str, dict[str, Callable[[Any, Any], None]]] = {
    "static": {
        "add_node": lambda s, a: s.add_node(a.nodename, a.maxcpu, a.maxmem),
        "remove_node": lambda s, a: s.remove_node(a.nodename),
        "add_service": _add(*_ADDS["static"]),
        "add_service_usage_to_node": lambda s, a: s.add_service_usage_to_node(
            a.nodename, a.sid, wire.resource_stats(a.service_stats)
        ),
        "remove_service_usage": lambda s, a: s.remove_service_usage(a.sid),
    },
    "dynamic": {
        "add_node": lambda s, a: s.add_node(a.nodename, wire.node_stats(a.stats)),
        "remove_node": lambda s, a: s.remove_node(a.nodename),
        "add_resource": _add(*_ADDS["dynamic"]),
        "remove_resource": lambda s, a: s.remove_resource(a.sid),
    },
}


#: The method of a ``scheduler.apply`` entry (its struct's tag).
_method: Callable[[Any], str] = attrgetter("__struct_config__.tag")


def _node_adds(stats_of: Callable[[Any], Any]) -> Callable[[Any, Iterable], None]:
    """The adder of a run of ``add_node`` entries, whose node stats are ``stats_of(entry)``."""

    def add(usage: Any, entries: Iterable) -> None:
        for entry in entries:
            usage.add_node(entry.nodename, stats_of(entry))

    return add


def _resource_adds(record: str) -> Callable[[Any, Iterable], None]:
    """The adder of a run of ``add_service``/``add_resource`` entries, whose resource is ``record``."""

    def add(usage: Any, entries: Iterable) -> None:
        usage.add_resources((entry.sid, wire.placed(getattr(entry, record))) for entry in entries)

    return add


#: mode -> method -> ``add(usage, entries)``: a run of ``scheduler.apply`` entries of that method
#: (a round's nodes, its guests) added to the usage as the engine adds a snapshot's, in one call:
#: the models bounded every value as the scheduler's own checks would.
_RUNS = {
    "static": {"add_node": _node_adds(wire.static_node_stats), "add_service": _resource_adds(_ADDS["static"][1])},
    "dynamic": {
        "add_node": _node_adds(lambda entry: wire.node_stats(entry.stats)),
        "add_resource": _resource_adds(_ADDS["dynamic"][1]),
    },
}


def apply(scheduler: Scheduler, mode: str, entries: list) -> None:
    """Run the ``scheduler.apply`` ``entries`` on ``scheduler`` (of ``mode``) in order, all or nothing.

    The entries run on a copy of the scheduler's usage, which replaces the usage only when every
    one succeeded: a failure leaves the scheduler as it was, and is raised as a
    :class:`~bridge.errors.MutationError` naming its entry. Runs of node or resource adds go to
    the usage in one call each (:data:`_RUNS`), other entries one by one.
    """
    trial = copy.copy(scheduler)
    trial.usage = scheduler.usage.copy()
    current = [0]  # the position of the entry being applied
    try:
        for method, run in itertools.groupby(_numbered(entries, current), key=_method):
            if method in _RUNS[mode]:
                _RUNS[mode][method](trial.usage, run)
            else:
                for entry in run:
                    MUTATORS[mode][method](trial, entry)
    except (SchedulingError, InvalidInputError) as exc:
        raise MutationError(current[0], _method(entries[current[0]]), exc) from None
    scheduler.usage = trial.usage


def _numbered(entries: list, current: list[int]) -> Iterator[Any]:
    """``entries`` in order, each one's position noted in ``current[0]`` as it is taken."""
    for index, entry in enumerate(entries):
        current[0] = index
        yield entry


def _single_call(method: str, summary: str) -> MethodSpec:
    """``scheduler.<method>``: the mutation ``method`` alone, in each mode that has it."""
    modes = {mode: (m.MUTATIONS[mode][method], run[method]) for mode, run in MUTATORS.items() if method in run}
    return on_scheduler(method, summary, None, **modes)


def _candidates(p: Any) -> Any:
    return wire.candidate_columns(p.candidates)


ScoredList = list[r.ScoredMigration]
ScoredOrNone = r.ScoredMigration | None

STATEFUL = [
    _single_call(
        "add_node", "Add a node: static (nodename, maxcpu cores, maxmem bytes); dynamic (nodename, measured stats)."
    ),
    _single_call(
        "remove_node",
        "Remove a node (unknown: no-op); its stationary resources go, moving ones stay on the other node.",
    ),
    on_scheduler(
        "list_nodes",
        "Node names in insertion order.",
        list[str],
        **both(m.SchedulerParams, lambda s, p: s.list_nodes()),
    ),
    on_scheduler(
        "contains_node",
        "Whether the node exists.",
        bool,
        **both(m.NodeNameParams, lambda s, p: s.contains_node(p.nodename)),
    ),
    _single_call("add_service", "Static: add a service (moving when target-node is set)."),
    _single_call(
        "add_service_usage_to_node",
        "Static legacy add: unknown sid -> started on nodename; known stationary sid -> moving there.",
    ),
    _single_call("remove_service_usage", "Static: remove a service (unknown: no-op)."),
    _single_call("add_resource", "Dynamic: add a resource (moving when target-node is set)."),
    _single_call("remove_resource", "Dynamic: remove a resource (unknown: no-op)."),
    on_scheduler(
        "apply",
        "Extra: the mutations [[method, args...], ...] (add_node, remove_node, add_service/add_resource, "
        "add_service_usage_to_node, remove_service_usage/remove_resource; args as scheduler.<method>'s "
        "after the handle) in order, in one call, all or nothing; a failing entry's error has "
        "data.index and data.method, a -32602 names it (mutations[3].nodename).",
        None,
        static=(m.StaticApplyParams, lambda s, p: apply(s, "static", p.mutations)),
        dynamic=(m.DynamicApplyParams, lambda s, p: apply(s, "dynamic", p.mutations)),
    ),
    on_scheduler(
        "calculate_node_imbalance",
        "Imbalance of the node loads (the scheduler's formula).",
        float,
        **both(m.SchedulerParams, lambda s, p: s.calculate_node_imbalance()),
    ),
    on_scheduler(
        "score_best_balancing_migration_candidates",
        "Bruteforce: the limit migrations leaving the lowest imbalance, best first.",
        ScoredList,
        **both(
            m.ScoreCandidatesParams,
            lambda s, p: s.score_best_balancing_migration_candidates(_candidates(p), p.limit),
        ),
    ),
    on_scheduler(
        "score_best_balancing_migration_candidates_topsis",
        "TOPSIS: the first limit migrations in TOPSIS rank order.",
        ScoredList,
        **both(
            m.ScoreCandidatesParams,
            lambda s, p: s.score_best_balancing_migration_candidates_topsis(_candidates(p), p.limit),
        ),
    ),
    on_scheduler(
        "score_nodes_to_start_service",
        "Static: [[node, score]] in node order for starting a service; higher is better.",
        list[r.StartScore],
        static=(
            m.StartServiceParams,
            lambda s, p: s.score_nodes_to_start_service(wire.resource_stats(p.service_stats)),
        ),
    ),
    on_scheduler(
        "score_nodes_to_start_resource",
        "Dynamic: [[node, score]] in node order for starting a resource; higher is better.",
        list[r.StartScore],
        dynamic=(
            m.StartResourceParams,
            lambda s, p: s.score_nodes_to_start_resource(wire.resource_stats(p.resource_stats)),
        ),
    ),
    on_scheduler(
        "select_best_balancing_migration",
        "Extra: the first candidate (input order) at or under imbalance_threshold, else the best; "
        "null without candidates.",
        ScoredOrNone,
        **both(
            m.SelectCandidatesParams,
            lambda s, p: s.select_best_balancing_migration(_candidates(p), p.imbalance_threshold),
        ),
    ),
    on_scheduler(
        "select_best_balancing_migration_topsis",
        "Extra: the TOPSIS-best migration; null without candidates.",
        ScoredOrNone,
        **both(
            m.SelectTopsisParams,
            lambda s, p: s.select_best_balancing_migration_topsis(_candidates(p)),
        ),
    ),
]


# -- staged candidates: a long candidate list sent in parts, expanded while the rest is built ---


def _stage_candidates(state: State, p: Any) -> int:
    scheduler = state.scheduler(p.scheduler)
    staged = state.staged.pop(p.scheduler, None)  # a failing call leaves nothing staged
    part = scheduler.candidate_batch(_candidates(p))
    staging = staged if p.append and staged is not None else Staging()
    rows = sum(map(len, staging.parts)) + len(part)
    wire.at_most(state.limits, "max_candidates", rows, "candidates", "staged expanded candidates")
    staging.parts.append(part)
    staging.count += len(p.candidates)
    state.staged[p.scheduler] = staging
    return staging.count


def _score_staged(state: State, p: Any) -> list[ScoredMigration]:
    scheduler = state.scheduler(p.scheduler)
    staging = state.staged.pop(p.scheduler, None) or Staging()
    if staging.count != p.count:
        problem = f"{staging.count} candidates are staged, not {p.count} (a failed or lost staging: stage them again)"
        raise ParamsError([("count", problem)])
    batch = concat_batches(staging.parts) if staging.parts else scheduler.candidate_batch(wire.candidate_columns([]))
    return score_migrations(batch, p.limit, p.method, scheduler.formula)


def _staging(name: str, summary: str, result: Any, model: type[m.Params], run: Callable) -> MethodSpec:
    variant = Variant(model, run)
    return MethodSpec(f"scheduler.{name}", summary, result, {"static": variant, "dynamic": variant})


STAGING = [
    _staging(
        "stage_candidates",
        "Extra: expand candidates (a part of a long list) on the scheduler's state and keep them for "
        "score_staged_candidates; append=false starts afresh. Returns the entries staged in all. Any other "
        "call on the scheduler discards them.",
        int,
        m.StageCandidatesParams,
        _stage_candidates,
    ),
    _staging(
        "score_staged_candidates",
        "Extra: score the staged candidates as score_best_balancing_migration_candidates[_topsis] scores "
        "the whole list (method), if count entries are staged; the staging is then consumed.",
        ScoredList,
        m.ScoreStagedParams,
        _score_staged,
    ),
]

#: The methods that keep a scheduler's staged candidates.
STAGING_METHODS = frozenset(spec.name for spec in STAGING)


# -- creating and freeing schedulers ------------------------------------------------------------


def _free(state: State, p: Any) -> bool:
    state.free(p.scheduler)
    return True


LIFECYCLE = [
    stateless(
        "scheduler.new",
        "Create an empty scheduler (under the client's handle, if given); returns its handle.",
        r.SchedulerHandle,
        m.NewSchedulerParams,
        lambda state, p: {"scheduler": state.new_handle(new_scheduler(p.mode, p.imbalance), p.scheduler)},
    ),
    stateless("scheduler.free", "Release a scheduler; its handle becomes unknown.", bool, m.SchedulerParams, _free),
]
