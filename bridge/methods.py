"""The method surface: every JSON-RPC method, its params model, result schema and handler.

:class:`Bridge` holds the server's state (live schedulers) and runs one call:
``Bridge.call(name, params)`` validates ``params`` (a list or a dict) with the method's model from
:mod:`bridge.models` and returns a JSON value, or raises :class:`~bridge.errors.ParamsError`,
:class:`~bridge.errors.UnknownHandleError`, :class:`~bridge.errors.MethodUnavailableError`,
:class:`core.SchedulingError` or :class:`core.InvalidInputError`. It knows nothing of JSON-RPC
envelopes or framing (:mod:`bridge.protocol`, :mod:`bridge.transport`).

Every call changes state at most once, through one engine operation that is itself atomic, and
only after all params were validated; stateless calls build their scheduler locally.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..core import DEFAULT_FORMULA, CandidateBatch, CompactCandidate, Scheduler
from ..core.candidates import concat_batches
from ..core.limits import MAX_BYTES, MAX_CORES
from ..core.scheduler import calculate_node_imbalance, score_migrations, score_nodes_to_start, select_best_migration
from . import __version__, convert, fastpath, mutations, phases
from . import models as m
from .errors import MethodUnavailableError, ParamsError, UnknownHandleError
from .limits import ServerLimits, check_call_sizes, how_to_raise

#: Mode key of a method that does not depend on a scheduler's mode.
ANY_MODE = "any"

#: At most this many entries in an error's ``data.errors``.
MAX_ERROR_DETAILS = 20

FRAMINGS = {
    "ndjson": "one JSON message per line, ended by \\n (default)",
    "content-length": "LSP base protocol: 'Content-Length: N\\r\\n\\r\\n' then N bytes",
}


@dataclass(frozen=True)
class Variant:
    """One way to run a method: its params model and ``run(bridge, params) -> JSON value``."""

    params: type[m.Params]
    run: Callable[[Bridge, Any], Any]


@dataclass(frozen=True)
class MethodSpec:
    """A JSON-RPC method: name, what it does, result schema (a type from :mod:`bridge.models`),
    its variants by scheduler mode (:data:`ANY_MODE` when mode-independent), and whether its
    params may be positional (an array in the models' field order)."""

    name: str
    summary: str
    result: Any
    variants: Mapping[str, Variant]
    positional: bool = True

    @property
    def stateful(self) -> bool:
        """True for ``scheduler.*`` methods: the first param is a handle choosing the variant."""
        return ANY_MODE not in self.variants


@dataclass
class Bridge:
    """The server's state and the entry point for one method call."""

    limits: ServerLimits = field(default_factory=ServerLimits)
    debug_methods: bool = False
    schedulers: dict[str, Scheduler] = field(default_factory=dict)
    #: Candidates staged per handle (``scheduler.stage_candidates``).
    staged: dict[str, Staging] = field(default_factory=dict)
    shutdown_requested: bool = False
    _handles: itertools.count = field(default_factory=lambda: itertools.count(1))
    _discover_cache: dict | None = None

    def __post_init__(self) -> None:
        self.methods: dict[str, MethodSpec] = {spec.name: spec for spec in METHODS}
        if self.debug_methods:
            self.methods[DEBUG_RAISE.name] = DEBUG_RAISE

    @property
    def max_message_bytes(self) -> int:
        """Largest message body accepted (bytes)."""
        return self.limits.max_message_bytes

    def candidate_params(self) -> dict[str, frozenset[str]]:
        """The methods that take ``candidates`` (in every variant), with the wire names of their
        params (of all variants)."""
        methods = {}
        for spec in self.methods.values():
            models = [v.params for v in spec.variants.values()]
            if all(map(fastpath.takes_candidates, models)):
                methods[spec.name] = frozenset().union(*map(_param_names, models))
        return methods

    # -- calls ----------------------------------------------------------------------------

    def call(self, name: str, params: list | dict) -> Any:
        """Run method ``name`` (it must exist) with ``params``; return its JSON result."""
        spec = self.methods[name]
        variant = self._variant(spec, params)
        if self.staged and spec.stateful and name not in STAGING_METHODS:
            # Staged candidates were expanded on the state of their staging: any other call on
            # the scheduler (a mutation, say) discards them.
            self.staged.pop(params[0] if isinstance(params, list) else params["scheduler"], None)
        validated = self._validate(spec, variant.params, params)
        phases.mark("validate")
        result = variant.run(self, validated)
        # Without this mark a method that marks no phase of its own would have its work counted
        # as the next phase, "encode" (scoring, for example, under scheduler.*).
        phases.mark("run")
        return result

    def _variant(self, spec: MethodSpec, params: list | dict) -> Variant:
        if not spec.stateful:
            return spec.variants[ANY_MODE]
        handle = params[0] if isinstance(params, list) and params else None
        if isinstance(params, dict):
            handle = params.get("scheduler")
        if not isinstance(handle, str):
            problem = "Field required" if handle is None else "Input should be a valid string (a scheduler handle)"
            raise ParamsError([("scheduler", problem)])
        mode = self.scheduler(handle).mode
        if mode not in spec.variants:
            raise MethodUnavailableError(spec.name, mode, handle)
        return spec.variants[mode]

    def _validate(self, spec: MethodSpec, model: type[m.Params], params: list | dict) -> m.Params:
        if isinstance(params, list):
            params = self._named(spec, model, params)
        check_call_sizes(params, self.limits)  # before validation spends time and memory on them
        bulk = _bulk_params(model, params)
        if "mutations" in params and "mutations" not in bulk:  # the models read typed ones as JSON
            params = {**params, "mutations": mutations.as_json(params["mutations"])}
        try:
            if not bulk:
                return model.model_validate(params)
            # These params passed the bulk checks (the models would accept them as they are); the
            # models check the rest, and the bulk forms (columns, rows, prepared mutations) take
            # their places.
            rest = model.model_validate({**params, **{name: form.placeholder for name, form in bulk.items()}})
        except ValidationError as exc:
            raise ParamsError.from_validation(exc) from None
        return rest.model_copy(update={name: form.value for name, form in bulk.items()})

    @staticmethod
    def _named(spec: MethodSpec, model: type[m.Params], params: list) -> dict:
        names = _param_names(model)
        if params and not spec.positional:
            raise ParamsError([("params", f"'{spec.name}' takes named params (an object), not an array")])
        if len(params) > len(names):
            problem = (
                f"too many params for '{spec.name}': {len(params)} given, at most {len(names)} ({', '.join(names)})"
            )
            raise ParamsError([("params", problem)])
        return dict(zip(names, params))

    # -- state ----------------------------------------------------------------------------

    def scheduler(self, handle: str) -> Scheduler:
        """The live scheduler behind ``handle`` (UnknownHandleError if none)."""
        try:
            return self.schedulers[handle]
        except KeyError:
            raise UnknownHandleError(handle) from None

    def new_handle(self, scheduler: Scheduler) -> str:
        """Register ``scheduler`` under a fresh handle (``s1``, ``s2``, ...; never reused)."""
        handle = f"s{next(self._handles)}"
        self.schedulers[handle] = scheduler
        return handle

    def cluster(self, params: m.ClusterParams) -> Scheduler:
        """The scheduler a headline call works on: the live one, or one built from the snapshot."""
        if params.scheduler is not None:
            return self.scheduler(params.scheduler)
        # Start scoring has no formula param; the snapshot's formula does not matter to it.
        return convert.build_scheduler(params.usage, getattr(params, "imbalance", None) or DEFAULT_FORMULA)

    def info(self) -> dict:
        """What ``bridge.info`` answers."""
        return {
            "name": "crs-bridge",
            "version": __version__,
            "upstream": {"crate": ["2.0.0", "2.1.0"], "libpve-rs-perl": "0.13.0", "pve-ha-manager": "5.2.0"},
            "imbalance_formulas": {
                "normalized": "crate 2.1.0: coefficient of variation of node loads / sqrt(n - 1), in [0, 1]",
                "raw": "crate 2.0.0 (libpve-rs-perl 0.13.0): coefficient of variation of node loads",
            },
            "default_imbalance": DEFAULT_FORMULA,
            "migration_methods": ["bruteforce", "topsis"],
            "framings": dict(FRAMINGS),
            "limits": {
                **self.limits.as_dict(),
                "max_bytes": MAX_BYTES,
                "max_cores": MAX_CORES,
                "max_error_details": MAX_ERROR_DETAILS,
            },
            "schedulers": len(self.schedulers),
        }

    def discover(self) -> dict:
        """The OpenRPC document (generated once, from the same models that validate params)."""
        if self._discover_cache is None:
            from .openrpc import openrpc_document

            self._discover_cache = openrpc_document(self.methods.values(), __version__)
        return self._discover_cache


@dataclass(frozen=True)
class _Bulk:
    """A param in the form a bulk path made of it, and the smallest value of the same kind that
    the models accept in its place while they check the other params."""

    value: Any
    placeholder: Any


def _bulk_params(model: type[m.Params], params: dict) -> dict[str, _Bulk]:
    """The params a bulk path took, by name (:mod:`bridge.fastpath` for candidates and usage,
    :mod:`bridge.mutations` for scheduler.apply)."""
    bulk = {}
    if fastpath.takes_candidates(model):
        columns = fastpath.candidate_columns(params.get("candidates"))
        if columns is not None:
            bulk["candidates"] = _Bulk(columns, [])
    if fastpath.takes_usage(model):
        rows = fastpath.usage_rows(params.get("usage"))
        if rows is not None:
            bulk["usage"] = _Bulk(rows, {"mode": rows.mode, "nodes": []})
    mode = mutations.APPLY_MODES.get(model)
    if mode is not None:
        prepared = mutations.prepared(mode, params.get("mutations"))
        if prepared is not None:
            bulk["mutations"] = _Bulk(prepared, [])
    return bulk


@functools.cache
def _param_names(model: type[m.Params]) -> list[str]:
    """Wire names of ``model``'s fields in positional order."""
    return [f.alias or name for name, f in model.model_fields.items()]


# -- headline methods (stateless or on a handle) ----------------------------------------------


def _score_migrations(bridge: Bridge, p: m.ScoreMigrationsParams) -> list[dict]:
    scheduler = bridge.cluster(p)
    phases.mark("snapshot")
    batch = scheduler.candidate_batch(convert.candidates_to_core(p.candidates))
    phases.mark("candidates")
    scored = convert.scored_list(score_migrations(batch, p.limit, p.method, p.imbalance or scheduler.formula))
    phases.mark("score")
    return scored


def _select_migration(bridge: Bridge, p: m.SelectMigrationParams) -> dict | None:
    scheduler = bridge.cluster(p)
    batch = scheduler.candidate_batch(convert.candidates_to_core(p.candidates))
    formula = p.imbalance or scheduler.formula
    return convert.scored_or_none(select_best_migration(batch, p.method, formula, p.imbalance_threshold))


def _node_imbalance(bridge: Bridge, p: m.ImbalanceParams) -> float:
    scheduler = bridge.cluster(p)
    return calculate_node_imbalance(scheduler.view(), p.imbalance or scheduler.formula)


def _start_scores(bridge: Bridge, p: m.StartScoreParams) -> list[list]:
    scheduler = bridge.cluster(p)
    stats = convert.start_stats(p.stats, scheduler.mode)
    return convert.start_scores(score_nodes_to_start(scheduler.view(scheduler.start_view), stats))


# -- scheduler objects --------------------------------------------------------------------


def _new(bridge: Bridge, p: m.NewSchedulerParams) -> dict:
    from ..core import new_scheduler

    return {"scheduler": bridge.new_handle(new_scheduler(p.mode, p.imbalance))}


def _free(bridge: Bridge, p: m.SchedulerParams) -> bool:
    bridge.scheduler(p.scheduler)
    del bridge.schedulers[p.scheduler]
    bridge.staged.pop(p.scheduler, None)
    return True


def _on_scheduler(run: Callable[[Any, Any], Any]) -> Callable[[Bridge, m.SchedulerParams], Any]:
    """Adapt ``run(scheduler, params)`` to a handler that looks the handle up first."""

    def handler(bridge: Bridge, p: m.SchedulerParams) -> Any:
        return run(bridge.scheduler(p.scheduler), p)

    handler.__doc__ = run.__doc__
    return handler


def _stateful(name: str, summary: str, result: Any, **by_mode: tuple[type[m.Params], Callable]) -> MethodSpec:
    variants = {mode: Variant(model, _on_scheduler(run)) for mode, (model, run) in by_mode.items()}
    return MethodSpec(f"scheduler.{name}", summary, result, variants)


def _both(model: type[m.Params], run: Callable) -> dict[str, tuple[type[m.Params], Callable]]:
    return {"static": (model, run), "dynamic": (model, run)}


def _scored(s: Scheduler, p: m.ScoreCandidatesParams) -> list[dict]:
    return convert.scored_list(
        s.score_best_balancing_migration_candidates(convert.candidates_to_core(p.candidates), p.limit)
    )


def _scored_topsis(s: Scheduler, p: m.ScoreCandidatesParams) -> list[dict]:
    candidates = convert.candidates_to_core(p.candidates)
    return convert.scored_list(s.score_best_balancing_migration_candidates_topsis(candidates, p.limit))


def _select(s: Scheduler, p: m.SelectCandidatesParams) -> dict | None:
    candidates = convert.candidates_to_core(p.candidates)
    return convert.scored_or_none(s.select_best_balancing_migration(candidates, p.imbalance_threshold))


def _select_topsis(s: Scheduler, p: m.SelectTopsisParams) -> dict | None:
    return convert.scored_or_none(s.select_best_balancing_migration_topsis(convert.candidates_to_core(p.candidates)))


def _apply(mode: str) -> Callable[[Any, Any], None]:
    """``scheduler.apply`` for ``mode`` (see :func:`bridge.mutations.apply`)."""

    def apply(s: Scheduler, p: m.StaticApplyParams | m.DynamicApplyParams) -> None:
        prepared = p.mutations  # by the bulk path, or else the models' entries
        if not isinstance(prepared, mutations.Prepared):
            prepared = mutations.from_models(mode, prepared)
        mutations.apply(s, mode, prepared)

    return apply


def _start_service(s: Any, p: m.StartServiceParams) -> list[list]:
    stats = convert.static_stats(p.service_stats)
    return convert.start_scores(s.score_nodes_to_start_service(stats))


def _start_resource(s: Any, p: m.StartResourceParams) -> list[list]:
    stats = convert.dynamic_stats(p.resource_stats)
    return convert.start_scores(s.score_nodes_to_start_resource(stats))


ScoredList = list[m.ScoredMigration]
ScoredOrNone = m.ScoredMigration | None

STATEFUL = [
    _stateful(
        "add_node",
        "Add a node: static (nodename, maxcpu cores, maxmem bytes); dynamic (nodename, measured stats).",
        None,
        static=(m.StaticAddNodeParams, mutations.single_call("static", "add_node")),
        dynamic=(m.DynamicAddNodeParams, mutations.single_call("dynamic", "add_node")),
    ),
    _stateful(
        "remove_node",
        "Remove a node (unknown: no-op); its stationary resources go, moving ones stay on the other node.",
        None,
        **_both(m.NodeNameParams, lambda s, p: s.remove_node(p.nodename)),
    ),
    _stateful(
        "list_nodes",
        "Node names in insertion order.",
        list[str],
        **_both(m.SchedulerParams, lambda s, p: s.list_nodes()),
    ),
    _stateful(
        "contains_node",
        "Whether the node exists.",
        bool,
        **_both(m.NodeNameParams, lambda s, p: s.contains_node(p.nodename)),
    ),
    _stateful(
        "add_service",
        "Static: add a service (moving when target-node is set).",
        None,
        static=(m.AddServiceParams, mutations.single_call("static", "add_service")),
    ),
    _stateful(
        "add_service_usage_to_node",
        "Static legacy add: unknown sid -> started on nodename; known stationary sid -> moving there.",
        None,
        static=(m.AddServiceUsageParams, mutations.single_call("static", "add_service_usage_to_node")),
    ),
    _stateful(
        "remove_service_usage",
        "Static: remove a service (unknown: no-op).",
        None,
        static=(m.SidParams, lambda s, p: s.remove_service_usage(p.sid)),
    ),
    _stateful(
        "add_resource",
        "Dynamic: add a resource (moving when target-node is set).",
        None,
        dynamic=(m.AddResourceParams, mutations.single_call("dynamic", "add_resource")),
    ),
    _stateful(
        "remove_resource",
        "Dynamic: remove a resource (unknown: no-op).",
        None,
        dynamic=(m.SidParams, lambda s, p: s.remove_resource(p.sid)),
    ),
    _stateful(
        "apply",
        "Extra: the mutations [[method, args...], ...] (add_node, remove_node, add_service/add_resource, "
        "add_service_usage_to_node, remove_service_usage/remove_resource; args as scheduler.<method>'s "
        "after the handle) in order, in one call, all or nothing; a failing entry's error has "
        "data.index and data.method, a -32602 names it (mutations[3].nodename).",
        None,
        static=(m.StaticApplyParams, _apply("static")),
        dynamic=(m.DynamicApplyParams, _apply("dynamic")),
    ),
    _stateful(
        "calculate_node_imbalance",
        "Imbalance of the node loads (the scheduler's formula).",
        float,
        **_both(m.SchedulerParams, lambda s, p: s.calculate_node_imbalance()),
    ),
    _stateful(
        "score_best_balancing_migration_candidates",
        "Bruteforce: the limit migrations leaving the lowest imbalance, best first.",
        ScoredList,
        **_both(m.ScoreCandidatesParams, _scored),
    ),
    _stateful(
        "score_best_balancing_migration_candidates_topsis",
        "TOPSIS: the first limit migrations in TOPSIS rank order.",
        ScoredList,
        **_both(m.ScoreCandidatesParams, _scored_topsis),
    ),
    _stateful(
        "score_nodes_to_start_service",
        "Static: [[node, score]] in node order for starting a service; higher is better.",
        list[m.StartScore],
        static=(m.StartServiceParams, _start_service),
    ),
    _stateful(
        "score_nodes_to_start_resource",
        "Dynamic: [[node, score]] in node order for starting a resource; higher is better.",
        list[m.StartScore],
        dynamic=(m.StartResourceParams, _start_resource),
    ),
    _stateful(
        "select_best_balancing_migration",
        "Extra: the first candidate (input order) at or under imbalance_threshold, else the best; "
        "null without candidates.",
        ScoredOrNone,
        **_both(m.SelectCandidatesParams, _select),
    ),
    _stateful(
        "select_best_balancing_migration_topsis",
        "Extra: the TOPSIS-best migration; null without candidates.",
        ScoredOrNone,
        **_both(m.SelectTopsisParams, _select_topsis),
    ),
]


def _stateless(
    name: str, summary: str, result: Any, model: type[m.Params], run: Callable, positional: bool = True
) -> MethodSpec:
    return MethodSpec(name, summary, result, {ANY_MODE: Variant(model, run)}, positional)


def _shutdown(bridge: Bridge, p: m.NoParams) -> None:
    bridge.shutdown_requested = True


def _debug_raise(bridge: Bridge, p: m.NoParams) -> None:
    raise RuntimeError("debug.raise: deliberate failure (the server must answer -32603 and keep serving)")


HEADLINE = [
    _stateless(
        "score_best_balancing_migrations",
        "Score candidate migrations (bruteforce or TOPSIS) and return at most limit, best first.",
        ScoredList,
        m.ScoreMigrationsParams,
        _score_migrations,
        positional=False,
    ),
    _stateless(
        "select_best_balancing_migration",
        "One migration: the first (input order) at or under imbalance_threshold, else the best; "
        "null without candidates.",
        ScoredOrNone,
        m.SelectMigrationParams,
        _select_migration,
        positional=False,
    ),
    _stateless(
        "calculate_node_imbalance",
        "Imbalance of the node loads.",
        float,
        m.ImbalanceParams,
        _node_imbalance,
        positional=False,
    ),
    _stateless(
        "score_nodes_to_start_resource",
        "[[node, score]] in node order for starting a resource; higher is better.",
        list[m.StartScore],
        m.StartScoreParams,
        _start_scores,
        positional=False,
    ),
]

SERVICE = [
    _stateless(
        "scheduler.new", "Create an empty scheduler; returns its handle.", m.SchedulerHandle, m.NewSchedulerParams, _new
    ),
    _stateless("scheduler.free", "Release a scheduler; its handle becomes unknown.", bool, m.SchedulerParams, _free),
    _stateless("rpc.discover", "This OpenRPC document.", dict[str, Any], m.NoParams, lambda b, p: b.discover()),
    _stateless(
        "bridge.info",
        "Server version, upstream semantics, formulas, framings, limits, live handles.",
        m.BridgeInfo,
        m.NoParams,
        lambda b, p: b.info(),
    ),
    _stateless(
        "shutdown", "Answer, then exit 0 (after answering the rest of this message).", None, m.NoParams, _shutdown
    ),
]


# -- rebalance plan and explanations (the same engine as the single-move methods) -------------


def _compact(candidates: list[m.CompactCandidate]) -> list[CompactCandidate]:
    return [CompactCandidate(c.leader, tuple(c.resources), tuple(c.nodes)) for c in candidates]


def _with_formula(scheduler: Scheduler, formula: str | None) -> Scheduler:
    """``scheduler``, or a shallow copy reading the same usage with ``formula``: the planner only
    reads a scheduler, so a handle's state is shared, never changed."""
    if formula is None or formula == scheduler.formula:
        return scheduler
    other = copy.copy(scheduler)
    other.formula = formula
    return other


def _plan(scheduler: Scheduler, p: m.PlanParams | m.SchedulerPlanParams) -> dict:
    from ..core.planner import plan_rebalance  # loaded on first use, as in core/__init__.py

    options = (p.method, p.threshold, p.margin, p.max_steps, p.allow_repeat)
    return plan_rebalance(scheduler, _compact(p.candidates), *options).to_wire()


def _plan_rebalance(bridge: Bridge, p: m.PlanParams) -> dict:
    return _plan(_with_formula(bridge.cluster(p), p.imbalance), p)


def _explain_migrations(bridge: Bridge, p: m.ExplainParams) -> dict:
    from ..core.explain import explain_batch  # loaded on first use, as in core/__init__.py

    # Built as _score_migrations builds its batch, so the numbers agree to the last bit.
    scheduler = bridge.cluster(p)
    batch = scheduler.candidate_batch(convert.candidates_to_core(p.candidates))
    formula = p.imbalance or scheduler.formula
    return explain_batch(batch, p.method, formula, p.limit, p.threshold, p.margin).to_wire()


PLANNING = [
    _stateless(
        "plan_rebalance",
        "Dry run of the HA manager's rebalancing: the moves it would make round after round (threshold, "
        "margin and scorer as one HA round applies them) until one round would stop; changes nothing.",
        m.RebalancePlan,
        m.PlanParams,
        _plan_rebalance,
        positional=False,
    ),
    _stateless(
        "explain_migrations",
        "Why score_best_balancing_migrations chooses what it does (loads, runner-up, TOPSIS numbers), "
        "or why nothing should move under the optional threshold and margin.",
        m.Explanation,
        m.ExplainParams,
        _explain_migrations,
        positional=False,
    ),
    _stateful(
        "plan_rebalance",
        "Extra: plan_rebalance on this scheduler (its formula); the scheduler is not changed.",
        m.RebalancePlan,
        **_both(m.SchedulerPlanParams, _plan),
    ),
]


# -- staged candidates: a long candidate list sent in parts, expanded while the rest is built ---


@dataclass
class Staging:
    """Candidates staged for one scheduler: the expanded parts in order, and how many entries
    (bundles or expanded candidates) of the staged lists they came from."""

    count: int = 0
    parts: list[CandidateBatch] = field(default_factory=list)


def _stage_candidates(bridge: Bridge, p: m.StageCandidatesParams) -> int:
    scheduler = bridge.scheduler(p.scheduler)
    staged = bridge.staged.pop(p.scheduler, None)  # a failing call leaves nothing staged
    part = scheduler.candidate_batch(convert.candidates_to_core(p.candidates))
    staging = staged if p.append and staged is not None else Staging()
    rows = sum(map(len, staging.parts)) + len(part)
    if rows > bridge.limits.max_candidates:
        problem = f"{rows} staged expanded candidates exceed the limit of {bridge.limits.max_candidates} per call"
        raise ParamsError([("candidates", f"{problem} ({how_to_raise('max_candidates')})")])
    staging.parts.append(part)
    staging.count += len(p.candidates)
    bridge.staged[p.scheduler] = staging
    return staging.count


def _score_staged(bridge: Bridge, p: m.ScoreStagedParams) -> list[dict]:
    scheduler = bridge.scheduler(p.scheduler)
    staging = bridge.staged.pop(p.scheduler, None) or Staging()
    if staging.count != p.count:
        problem = f"{staging.count} candidates are staged, not {p.count} (a failed or lost staging: stage them again)"
        raise ParamsError([("count", problem)])
    batch = concat_batches(staging.parts) if staging.parts else scheduler.candidate_batch([])
    return convert.scored_list(score_migrations(batch, p.limit, p.method, scheduler.formula))


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

METHODS: list[MethodSpec] = HEADLINE + PLANNING + STATEFUL + STAGING + SERVICE

#: Registered only with ``serve --debug-methods``: provokes the -32603 path in tests.
DEBUG_RAISE = _stateless("debug.raise", "Test aid: fail with an internal error.", None, m.NoParams, _debug_raise)
