"""Bulk validation of the big params: candidates (the bulk of a big request, and of every HA
round's scoring) and usage snapshots.

pydantic validates a list of 100k :class:`~bridge.models.Candidate` one model at a time (a few
µs each, plus an object per candidate and per stats); here the same list is checked column by
column and handed to the engine as :class:`core.CandidateColumns`. Compact bundles likewise
(:func:`compact_columns`: only their names need checking) go as :class:`core.CompactColumns`.
A usage snapshot's nodes and resources are checked column by column too and go to the engine as
its own values (:func:`usage_rows`), without a model per node, resource and stats.

This is a filter, not a second schema. :func:`expanded_columns` accepts a list only when it can
tell in bulk that the models would accept it and what values they would produce; anything else
(a missing key, a wrong type, a bound crossed, a fractional byte count, ...) gets None, and the
caller validates with the models, whose errors are the only ones a client ever sees. So the
models stay the single source of the wire schema, ``rpc.discover`` is unchanged, and the fast path
can only make a call faster, not different (``tests/test_fastpath.py`` holds the two together;
``tests/test_fastpath_compact.py`` the compact ones, ``tests/test_fastpath_usage.py`` snapshots).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from ..core import CandidateColumns, CompactColumns, NodeStats, Resource, ResourceStats
from ..core.limits import MAX_CORES
from ..core.stats import bytes_column, cores_column
from . import models as m

#: The annotation pydantic keeps for a field declared as :data:`bridge.models.Candidates`.
_CANDIDATES_UNION = typing.get_args(m.Candidates)[0]
_CANDIDATE_KEYS = ("sid", "source-node", "target-node", "stats")
_COMPACT_KEYS = ("leader", "resources", "nodes")
_STATS_KEYS = ("cpu", "maxcpu", "mem", "maxmem")


@functools.cache
def takes_candidates(model: type[m.Params]) -> bool:
    """Whether ``model`` has a ``candidates`` field of type :data:`bridge.models.Candidates`."""
    field = model.model_fields.get("candidates")
    return field is not None and field.annotation == _CANDIDATES_UNION


def candidate_columns(candidates: Any) -> CandidateColumns | CompactColumns | None:
    """``candidates`` as columns of its form (:func:`expanded_columns`, :func:`compact_columns`),
    or None: then the models validate it. Columns that :mod:`bridge.fastdecode` decoded are
    taken as they are."""
    if type(candidates) is CandidateColumns or type(candidates) is CompactColumns:
        return candidates
    columns = expanded_columns(candidates)
    return columns if columns is not None else compact_columns(candidates)


def compact_columns(candidates: Any) -> CompactColumns | None:
    """``candidates`` as columns if it is a non-empty list of compact candidates that
    :class:`bridge.models.CompactCandidate` accepts (the leader, every resource and every node a
    non-empty string; other keys ignored); None otherwise, and whenever in doubt."""
    if type(candidates) is not list or not candidates or m._candidate_form(candidates) != "compact":
        return None
    try:  # a record that lacks a key (KeyError) or is no object (TypeError) goes to the models
        leaders, resources, nodes = _columns(candidates, _COMPACT_KEYS)
    except (KeyError, TypeError):
        return None
    if not (_names(leaders) and _name_lists(resources) and _name_lists(nodes)):
        return None
    return CompactColumns(leaders, resources, nodes)


def _name_lists(column: list) -> bool:
    """All lists of :data:`bridge.models.Name` (possibly empty)."""
    return set(map(type, column)) == {list} and _names(chain.from_iterable(column))


def expanded_columns(candidates: Any) -> CandidateColumns | None:
    """``candidates`` as columns if it is a non-empty list of expanded candidates that
    :class:`bridge.models.Candidate` accepts, with the values the models would give (cpu as
    float64 cores, -0.0 as 0.0; mem as int64 bytes); None otherwise, and whenever in doubt."""
    # The models' own discriminator decides the form, so both take the same branch.
    if type(candidates) is not list or not candidates or m._candidate_form(candidates) != "expanded":
        return None
    try:  # a record that lacks a key (KeyError) or is no object (TypeError) goes to the models
        sids, sources, targets, stats = _columns(candidates, _CANDIDATE_KEYS)
        cpu, maxcpu, mem, maxmem = _columns(stats, _STATS_KEYS)
    except (KeyError, TypeError):
        return None
    if not (_names(sids) and _names(sources) and _names(targets)):
        return None
    cpu_column, mem_column = _cores(cpu), _bytes(mem)
    if cpu_column is None or mem_column is None or _cores(maxcpu) is None or _bytes(maxmem) is None:
        return None
    return CandidateColumns(sids, sources, targets, cpu_column, mem_column)


def _columns(records: list, keys: tuple[str, ...]) -> list[list]:
    """One list per key of the values in ``records``: KeyError if one lacks a key, TypeError if
    one is not an object (JSON gives no other mapping than dict, and every other JSON value
    refuses a string index)."""
    return [list(map(itemgetter(key), records)) for key in keys]


def _names(column: Iterable) -> bool:
    """All non-empty strings (:data:`bridge.models.Name`); checked once per distinct value."""
    try:
        distinct = set(column)
    except TypeError:  # unhashable: an array or an object
        return False
    return set(map(type, distinct)) <= {str} and "" not in distinct  # in C, not a Python loop


def _cores(column: list) -> np.ndarray | None:
    """As :data:`bridge.models.Cores` (strict float: ints too, no bools): finite, in [0, MAX_CORES];
    -0.0 as 0.0."""
    values = cores_column(column)
    return None if values is None else values + 0.0


def _bytes(column: list) -> np.ndarray | None:
    """As :data:`bridge.models.Bytes` (strict int, integral floats as the int they hold, no bools):
    in [0, MAX_BYTES]."""
    if float in set(map(type, column)):
        column = [int(v) if type(v) is float and v.is_integer() else v for v in column]
    return bytes_column(column)  # a fraction or an infinity left is no int: None


# -- usage snapshots ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SnapshotRows:
    """A usage snapshot as engine values, in list order: its ``mode``, ``nodes`` as
    ``(name, NodeStats)`` and ``resources`` as ``(sid, Resource)``."""

    mode: str
    nodes: list[tuple[str, NodeStats]]
    resources: list[tuple[str, Resource]]


@functools.cache
def takes_usage(model: type[m.Params]) -> bool:
    """Whether ``model`` has the ``usage`` field of :class:`bridge.models.ClusterParams`."""
    return issubclass(model, m.ClusterParams)


def usage_rows(usage: Any) -> SnapshotRows | None:
    """``usage`` as engine values if :data:`bridge.models.Usage` accepts it as it is, with the
    values the models would give (node core counts as integers only, ``running`` as JSON booleans
    only; other keys ignored); None otherwise, and whenever in doubt."""
    if type(usage) is not dict or usage.get("mode") not in ("static", "dynamic"):
        return None
    nodes, resources = usage.get("nodes"), usage.get("resources", [])
    if type(nodes) is not list or type(resources) is not list:
        return None
    try:  # a record that lacks a key (KeyError) or is no object (TypeError) goes to the models
        node_rows = _node_rows(usage["mode"], nodes)
        resource_rows = _resource_rows(usage["mode"], resources)
    except (KeyError, TypeError):
        return None
    if node_rows is None or resource_rows is None:
        return None
    return SnapshotRows(usage["mode"], node_rows, resource_rows)


def _node_rows(mode: str, nodes: list) -> list[tuple[str, NodeStats]] | None:
    names, maxcpu, maxmem = _columns(nodes, ("name", "maxcpu", "maxmem"))
    if mode == "dynamic":
        cpu, mem = _columns(nodes, ("cpu", "mem"))
    else:  # optional and ignored in a static snapshot, but checked when given
        cpu, mem = [node.get("cpu", 0.0) for node in nodes], [node.get("mem", 0) for node in nodes]
    cpu_column, mem_column, maxmem_column = _cores(cpu), _bytes(mem), _bytes(maxmem)
    if not (_names(names) and _node_cores(maxcpu)) or cpu_column is None or mem_column is None:
        return None
    if maxmem_column is None or not (maxmem_column > 0).all():
        return None
    if mode == "static":
        cpu_column, mem_column = np.zeros(len(nodes)), np.zeros(len(nodes), dtype=np.int64)
    rows = zip(cpu_column.tolist(), maxcpu, mem_column.tolist(), maxmem_column.tolist())
    return list(zip(names, (NodeStats(*row) for row in rows)))


def _node_cores(column: list) -> bool:
    """All :data:`bridge.models.NodeCores` given as integers (an integral float goes to the models)."""
    return set(map(type, column)) <= {int} and all(0 < value <= MAX_CORES for value in column)


def _resource_rows(mode: str, resources: list) -> list[tuple[str, Resource]] | None:
    if not resources:
        return []
    sids, stats, running, current = _columns(resources, ("sid", "stats", "running", "current-node"))
    targets = [resource.get("target-node") for resource in resources]
    if not (_names(sids) and _names(current) and _names(t for t in targets if t is not None)):
        return None
    if not set(map(type, running)) <= {bool}:
        return None
    resource_stats = _static_stats(stats) if mode == "static" else _dynamic_stats(stats)
    if resource_stats is None:
        return None
    return list(zip(sids, map(Resource, resource_stats, running, current, targets)))


def _static_stats(stats: list) -> list[ResourceStats] | None:
    """:class:`bridge.models.StaticStats`: the limits are also the running usage."""
    maxcpu, maxmem = _columns(stats, ("maxcpu", "maxmem"))
    cores, memory = _cores(maxcpu), _bytes(maxmem)
    if cores is None or memory is None:
        return None
    cores, memory = cores.tolist(), memory.tolist()
    return list(map(ResourceStats, cores, cores, memory, memory))


def _dynamic_stats(stats: list) -> list[ResourceStats] | None:
    """:class:`bridge.models.DynamicStats`."""
    columns = [check(column) for check, column in zip((_cores, _cores, _bytes, _bytes), _columns(stats, _STATS_KEYS))]
    if any(column is None for column in columns):
        return None
    return list(map(ResourceStats, *(column.tolist() for column in columns)))
