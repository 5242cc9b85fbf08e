"""The methods that change no state: scoring a snapshot (or a live scheduler's state), the rebalance
plan and explanations, the server's own methods; and :data:`METHODS`, the whole method table in
the order ``rpc.discover`` lists it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, get_args

from ..core import DEFAULT_FORMULA, CandidateBatch, Scheduler, ScoredMigration
from ..core.limits import MAX_BYTES, MAX_CORES
from ..core.scheduler import calculate_node_imbalance, score_migrations, score_nodes_to_start, select_best_migration
from . import UPSTREAM, __version__, phases, schedulers, wire
from . import models as m
from . import records as rec
from . import results as r
from .errors import MAX_ERROR_DETAILS
from .registry import MethodSpec, both, on_scheduler, stateless
from .schedulers import ScoredList, ScoredOrNone, State

if TYPE_CHECKING:  # loaded on first use (see _plan, _explain_migrations)
    from ..core.explain import Explanation
    from ..core.planner import RebalancePlan

FRAMINGS = {
    "ndjson": "one JSON message per line, ended by \\n (default)",
    "content-length": "LSP base protocol: 'Content-Length: N\\r\\n\\r\\n' then N bytes",
}

# -- headline methods (on a snapshot or on a handle) --------------------------------------------


def _cluster(state: State, params: Any) -> Scheduler:
    """The scheduler a headline call works on: the live one, or one built from the snapshot."""
    if params.scheduler is not None:
        return state.scheduler(params.scheduler)
    # Start scoring has no formula param; the snapshot's formula does not matter to it.
    return wire.snapshot_scheduler(params.usage, getattr(params, "imbalance", None) or DEFAULT_FORMULA)


def _batch(state: State, p: Any) -> tuple[CandidateBatch, str]:
    """A balancing call's candidates expanded on its cluster, and the formula to score them with:
    one way for scoring, selecting and explaining, so that their numbers agree to the last bit."""
    scheduler = _cluster(state, p)
    if phases.timing:
        phases.mark("snapshot")
    batch = scheduler.candidate_batch(wire.candidate_columns(p.candidates))
    if phases.timing:
        phases.mark("candidates")
    return batch, p.imbalance or scheduler.formula


def _score_migrations(state: State, p: Any) -> list[ScoredMigration]:
    batch, formula = _batch(state, p)
    scored = score_migrations(batch, p.limit, p.method, formula)
    if phases.timing:
        phases.mark("score")
    return scored


def _select_migration(state: State, p: Any) -> ScoredMigration | None:
    batch, formula = _batch(state, p)
    return select_best_migration(batch, p.method, formula, p.imbalance_threshold)


def _node_imbalance(state: State, p: Any) -> float:
    scheduler = _cluster(state, p)
    return calculate_node_imbalance(scheduler.view(), p.imbalance or scheduler.formula)


def _start_scores(state: State, p: Any) -> list[tuple[str, float]]:
    scheduler = _cluster(state, p)
    stats = wire.start_stats(p.stats, scheduler.mode)
    return score_nodes_to_start(scheduler.view(scheduler.start_view), stats)


HEADLINE = [
    stateless(
        "score_best_balancing_migrations",
        "Score candidate migrations (bruteforce or TOPSIS) and return at most limit, best first.",
        ScoredList,
        m.ScoreMigrationsParams,
        _score_migrations,
        positional=False,
    ),
    stateless(
        "select_best_balancing_migration",
        "One migration: the first (input order) at or under imbalance_threshold, else the best; "
        "null without candidates.",
        ScoredOrNone,
        m.SelectMigrationParams,
        _select_migration,
        positional=False,
    ),
    stateless(
        "calculate_node_imbalance",
        "Imbalance of the node loads.",
        float,
        m.ImbalanceParams,
        _node_imbalance,
        positional=False,
    ),
    stateless(
        "score_nodes_to_start_resource",
        "[[node, score]] in node order for starting a resource; higher is better.",
        list[r.StartScore],
        m.StartScoreParams,
        _start_scores,
        positional=False,
    ),
]


# -- rebalance plan and explanations (the same engine as the single-move methods) -------------


def _with_formula(scheduler: Scheduler, formula: str | None) -> Scheduler:
    """``scheduler``, or a shallow copy reading the same usage with ``formula``: the planner only
    reads a scheduler, so a handle's state is shared, never changed."""
    if formula is None or formula == scheduler.formula:
        return scheduler
    other = copy.copy(scheduler)
    other.formula = formula
    return other


def _plan(scheduler: Scheduler, p: Any) -> RebalancePlan:
    from ..core.planner import plan_rebalance  # loaded on first use, as in core/__init__.py

    options = (p.method, wire.unsigned(p.threshold), wire.unsigned(p.margin), p.max_steps, p.allow_repeat)
    return plan_rebalance(scheduler, wire.candidate_columns(p.candidates), *options)


def _plan_rebalance(state: State, p: Any) -> RebalancePlan:
    return _plan(_with_formula(_cluster(state, p), p.imbalance), p)


def _explain_migrations(state: State, p: Any) -> Explanation:
    from ..core.explain import explain_batch  # loaded on first use, as in core/__init__.py

    batch, formula = _batch(state, p)
    return explain_batch(batch, p.method, formula, p.limit, wire.unsigned(p.threshold), wire.unsigned(p.margin))


PLANNING = [
    stateless(
        "plan_rebalance",
        "Dry run of the HA manager's rebalancing: the moves it would make round after round (threshold, "
        "margin and scorer as one HA round applies them) until one round would stop; changes nothing.",
        r.RebalancePlan,
        m.PlanParams,
        _plan_rebalance,
        positional=False,
    ),
    stateless(
        "explain_migrations",
        "Why score_best_balancing_migrations chooses what it does (loads, runner-up, TOPSIS numbers), "
        "or why nothing should move under the optional threshold and margin.",
        r.Explanation,
        m.ExplainParams,
        _explain_migrations,
        positional=False,
    ),
    on_scheduler(
        "plan_rebalance",
        "Extra: plan_rebalance on this scheduler (its formula); the scheduler is not changed.",
        r.RebalancePlan,
        **both(m.SchedulerPlanParams, _plan),
    ),
]


# -- the server's own methods -------------------------------------------------------------------


def _info(state: State, p: Any) -> dict:
    return {
        "name": "crs-bridge",
        "version": __version__,
        "upstream": UPSTREAM,
        "imbalance_formulas": {
            "normalized": "crate 2.1.0: coefficient of variation of node loads / sqrt(n - 1), in [0, 1]",
            "raw": "crate 2.0.0 (libpve-rs-perl 0.13.0): coefficient of variation of node loads",
        },
        "default_imbalance": DEFAULT_FORMULA,
        "migration_methods": list(get_args(rec.Method)),
        "framings": dict(FRAMINGS),
        "limits": {
            **state.limits.as_dict(),
            "max_bytes": MAX_BYTES,
            "max_cores": MAX_CORES,
            "max_error_details": MAX_ERROR_DETAILS,
        },
        "schedulers": len(state.schedulers),
    }


def _discover(state: State, p: Any) -> dict:
    """The OpenRPC document of the methods in force (generated once, from the models)."""
    if state.document is None:
        from .openrpc import openrpc_document  # loaded on first use: only rpc.discover needs it

        state.document = openrpc_document(state.methods.values(), __version__)
    return state.document


def _shutdown(state: State, p: Any) -> None:
    state.shutdown_requested = True


def _debug_raise(state: State, p: Any) -> None:
    raise RuntimeError("debug.raise: deliberate failure (the server must answer -32603 and keep serving)")


SERVICE = [
    stateless(
        "rpc.discover",
        "This OpenRPC document.",
        dict[str, Any],
        m.NoParams,
        _discover,
    ),
    stateless(
        "bridge.info",
        "Server version, upstream semantics, formulas, framings, limits, live handles.",
        r.BridgeInfo,
        m.NoParams,
        _info,
    ),
    stateless(
        "shutdown", "Answer, then exit 0 (after answering the rest of this message).", None, m.NoParams, _shutdown
    ),
]

#: Every method, in the order rpc.discover lists them.
METHODS: list[MethodSpec] = (
    HEADLINE + PLANNING + schedulers.STATEFUL + schedulers.STAGING + schedulers.LIFECYCLE + SERVICE
)

#: Registered only with ``serve --debug-methods``: provokes the -32603 path in tests.
DEBUG_RAISE = stateless("debug.raise", "Test aid: fail with an internal error.", None, m.NoParams, _debug_raise)
