"""The method registry's entries: what a JSON-RPC method is, and how the method tables say it.

A method has a name, a summary, a result schema (a type from :mod:`bridge.models`) and one
:class:`Variant` per scheduler mode (``scheduler.*`` methods: the handle's mode chooses it), or a
single one under :data:`ANY_MODE`. A variant is a params model and ``run(state, params)``, which
gets the params as the structs of :mod:`bridge.wire` and returns a JSON value, or the engine's
value of a result model of :data:`bridge.results.ENGINE_VALUES`. The tables are in
:mod:`bridge.stateless` and :mod:`bridge.schedulers`; :mod:`bridge.protocol` dispatches to them and
:mod:`bridge.openrpc` describes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import models as m
from . import results

#: Mode key of a method that does not depend on a scheduler's mode.
ANY_MODE = "any"


@dataclass(frozen=True)
class Variant:
    """One way to run a method: its params model and ``run(state, params)`` (see the module)."""

    params: type[m.Params]
    run: Callable[[Any, Any], Any]


@dataclass(frozen=True)
class MethodSpec:
    """A JSON-RPC method: name, what it does, result schema, its variants by scheduler mode
    (:data:`ANY_MODE` when mode-independent), and whether its params may be positional (an array
    in the models' field order)."""

    name: str
    summary: str
    result: Any
    variants: Mapping[str, Variant]
    positional: bool = True
    #: True for ``scheduler.*`` methods: the first param is a handle choosing the variant.
    stateful: bool = field(init=False)
    #: True when ``run`` returns an engine value, which ``result`` writes (:func:`bridge.wire.as_wire`).
    from_engine: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stateful", ANY_MODE not in self.variants)
        object.__setattr__(self, "from_engine", results.from_engine(self.result))


def stateless(
    name: str, summary: str, result: Any, model: type[m.Params], run: Callable, positional: bool = True
) -> MethodSpec:
    """A method of one variant: ``run(state, params)``."""
    return MethodSpec(name, summary, result, {ANY_MODE: Variant(model, run)}, positional)


def on_scheduler(name: str, summary: str, result: Any, **by_mode: tuple[type[m.Params], Callable]) -> MethodSpec:
    """``scheduler.<name>``, a variant per mode given as ``mode=(model, run)`` with
    ``run(scheduler, params)``: the handle's scheduler is looked up first."""

    def looked_up(run: Callable) -> Callable:
        return lambda state, params: run(state.scheduler(params.scheduler), params)

    variants = {mode: Variant(model, looked_up(run)) for mode, (model, run) in by_mode.items()}
    return MethodSpec(f"scheduler.{name}", summary, result, variants)


def both(model: type[m.Params], run: Callable) -> dict[str, tuple[type[m.Params], Callable]]:
    """The same variant for both modes."""
    return {"static": (model, run), "dynamic": (model, run)}
