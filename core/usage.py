"""The cluster usage model: nodes, resources and where each resource is placed.

Mirrors upstream's ``Usage`` with two deliberate differences (spec README):
nodes and each node's resources keep insertion order (decision 3), and a failed operation
changes nothing (upstream loses the resource on the legacy "already moving" error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

import msgspec
import numpy as np

from .errors import InvalidInputError, SchedulingError
from .limits import MAX_BYTES
from .stats import NodeStats, ResourceStats, node_load


def check_name(field: str, name: object) -> str:
    """Return ``name`` if it is a non-empty string (node names and sids)."""
    if not isinstance(name, str):
        raise InvalidInputError(field, f"must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidInputError(field, "must not be empty")
    return name


class Resource(msgspec.Struct, gc=False):
    """A resource (guest) in the usage: its stats, whether it runs, and its placement; a value,
    never changed once built (a msgspec struct, for speed: see :class:`core.stats.NodeStats`).

    ``running`` False means *starting*. ``target`` set means the resource is moving from
    ``current`` to ``target`` and loads both nodes.
    """

    stats: ResourceStats
    running: bool
    current: str
    target: str | None = None

    @property
    def is_moving(self) -> bool:
        return self.target is not None

    def nodes(self) -> tuple[str, ...]:
        """The nodes this resource loads: its current node, and its target when moving."""
        return (self.current,) if self.target is None else (self.current, self.target)


class Aggregation(Enum):
    """How resources are folded into node stats to form the scheduler's view of the cluster."""

    #: Static mode: base stats plus every resource at its limits (add_started).
    STARTED = "started"
    #: Dynamic mode: the measured node stats as they are; resources are not added.
    IDENTITY = "identity"
    #: Dynamic start scoring: measured stats plus the *starting* resources at their limits.
    STARTING_AS_STARTED = "starting-as-started"


#: Up to this many nodes a view's loads are computed node by node in Python: some 0.2 us a node,
#: against a fixed 1.5 us and more of the same operations as NumPy calls on the columns.
_PYTHON_LOADS_UP_TO = 8


@dataclass(frozen=True, slots=True)
class NodeView:
    """Aggregated node stats as arrays in node order; what every scoring function works on.

    ``cpu`` cores (float64), ``maxcpu`` cores (float64), ``mem`` bytes (int64), ``maxmem``
    bytes (float64, the divisor of the memory load); ``load`` the per-node load (float64
    fraction, :func:`core.stats.node_load`), computed with the view: every query reads it.
    """

    names: tuple[str, ...]
    cpu: np.ndarray
    maxcpu: np.ndarray
    mem: np.ndarray
    maxmem: np.ndarray
    load: np.ndarray

    @classmethod
    def from_stats(cls, names: Iterable[str], stats: Iterable[NodeStats]) -> NodeView:
        names, stats = tuple(names), list(stats)
        for name, s in zip(names, stats):
            if s.mem > MAX_BYTES:
                raise InvalidInputError(f"node '{name}'.mem", f"aggregated usage exceeds {MAX_BYTES} bytes")
        cpu = np.array([s.cpu for s in stats], dtype=np.float64)
        maxcpu = np.array([s.maxcpu for s in stats], dtype=np.float64)
        mem = np.array([s.mem for s in stats], dtype=np.int64)
        maxmem = np.array([s.maxmem for s in stats], dtype=np.float64)
        if len(stats) <= _PYTHON_LOADS_UP_TO:
            # The same operations on the same float64 values as on the columns: the same bits.
            load = np.array([s.load for s in stats], dtype=np.float64)
        else:
            load = node_load(cpu, maxcpu, mem.astype(np.float64), maxmem)
        return cls(names, cpu, maxcpu, mem, maxmem, load)

    def __len__(self) -> int:
        return len(self.names)

    def index(self) -> dict[str, int]:
        """Map node name -> position in the view."""
        return {name: i for i, name in enumerate(self.names)}

    def cpu_loads(self) -> np.ndarray:
        """Per-node cpu load (fraction)."""
        return self.cpu / self.maxcpu

    def mem_loads(self) -> np.ndarray:
        """Per-node memory load (fraction)."""
        return self.mem.astype(np.float64) / self.maxmem

    def loads(self) -> np.ndarray:
        """Per-node load: mean of cpu and memory load (fraction; the :attr:`load` column)."""
        return self.load


class _Node:
    __slots__ = ("stats", "sids", "maxmem_total")

    def __init__(self, stats: NodeStats) -> None:
        self.stats = stats
        self.sids: dict[str, None] = {}  # an ordered set
        self.maxmem_total = 0  # bytes: the sum of its resources' maxmem, what views may add to mem

    def copy(self) -> _Node:
        other = _Node(self.stats)
        other.sids = dict(self.sids)
        other.maxmem_total = self.maxmem_total
        return other


class Usage:
    """Nodes with their base stats, resources with their placement; both in insertion order.

    Stats are taken as they are: values within the bounds of :mod:`core.limits`, with capacities
    above 0, as :meth:`NodeStats.checked` and :meth:`ResourceStats.checked` build them (the
    schedulers' methods check them first; a caller that checked them already adds them here).
    Names, placement and aggregated memory are checked here."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._resources: dict[str, Resource] = {}
        self._views: dict[Aggregation, NodeView] = {}  # until the next change (see view)

    def copy(self) -> Usage:
        """An independent copy: same nodes, resources and orders (stats and resources are
        values, never changed, and shared). What an all-or-nothing series of changes works on."""
        other = Usage()
        other._nodes = {name: node.copy() for name, node in self._nodes.items()}
        other._resources = dict(self._resources)
        return other

    # -- nodes -------------------------------------------------------------------------

    def add_node(self, name: str, stats: NodeStats) -> None:
        """Add a node. Error ``node '<name>' already exists``."""
        check_name("nodename", name)
        if name in self._nodes:
            raise SchedulingError(f"node '{name}' already exists")
        self._nodes[name] = _Node(stats)
        self._views.clear()

    def add_nodes(self, rows: Iterable[tuple[str, NodeStats]]) -> None:
        """:meth:`add_node` for each ``(name, stats)`` in order (a snapshot's nodes): the same checks
        and errors; at the first error the nodes before it stay added (as adding them one by one
        would)."""
        for name, stats in rows:
            self.add_node(name, stats)

    def remove_node(self, name: str) -> None:
        """Remove a node; never fails. Its stationary resources go; moving ones stay on the other node."""
        node = self._nodes.pop(name, None)
        if node is None:
            return
        self._views.clear()
        for sid in node.sids:
            res = self._resources[sid]
            if res.target is None:
                del self._resources[sid]
            else:
                other = res.target if res.current == name else res.current
                self._resources[sid] = Resource(res.stats, res.running, other)

    def node_names(self) -> list[str]:
        """Node names in insertion order."""
        return list(self._nodes)

    def contains_node(self, name: str) -> bool:
        return name in self._nodes

    def node_stats(self, name: str) -> NodeStats:
        """Base stats of a node (KeyError if unknown)."""
        return self._nodes[name].stats

    # -- resources ---------------------------------------------------------------------

    def resource(self, sid: str) -> Resource | None:
        return self._resources.get(sid)

    def resource_getter(self) -> Callable[[str], Resource | None]:
        """:meth:`resource` as the usage's own mapping's ``get``, for a caller that looks up many
        sids (no copy of the mapping, no Python call per sid)."""
        return self._resources.get

    def resources(self) -> dict[str, Resource]:
        """sid -> Resource in insertion order (a copy)."""
        return dict(self._resources)

    def check_resource(self, sid: str, resource: Resource) -> None:
        """Raise upstream's error for adding ``resource`` as ``sid``, in upstream's order of checks."""
        check_name("sid", sid)
        if sid in self._resources:
            raise SchedulingError(f"resource '{sid}' already exists")
        self._check_placement(sid, resource)

    def _check_placement(self, sid: str, resource: Resource) -> None:
        if resource.target is None:
            if resource.current not in self._nodes:
                raise SchedulingError(f"current node for resource '{sid}' does not exist")
        elif resource.current == resource.target:
            raise SchedulingError(f"resource '{sid}' has the same current and target node")
        elif resource.current not in self._nodes or resource.target not in self._nodes:
            raise SchedulingError(f"nodes for resource '{sid}' do not exist")

    def add_resource(self, sid: str, resource: Resource) -> None:
        """Add a resource to its node(s). Errors as upstream: duplicate sid, unknown nodes, same nodes;
        and InvalidInputError if a node's aggregated memory could then exceed MAX_BYTES."""
        self.check_resource(sid, resource)
        self._check_memory(sid, resource)
        self._resources[sid] = resource
        self._views.clear()
        for name in resource.nodes():
            node = self._nodes[name]
            node.sids[sid] = None
            node.maxmem_total += resource.stats.maxmem

    def add_resources(self, rows: Iterable[tuple[str, Resource]]) -> None:
        """:meth:`add_resource` for each ``(sid, resource)`` in order: the same checks and errors;
        at the first error the rows before it stay added (as adding them one by one would)."""
        nodes, resources = self._nodes, self._resources
        self._views.clear()
        for sid, resource in rows:
            # The common case inline: a new, stationary resource on a known node with room for it.
            node = nodes.get(resource.current) if resource.target is None else None
            maxmem = resource.stats.maxmem
            if (
                node is None
                or type(sid) is not str
                or not sid
                or sid in resources
                or node.stats.mem + node.maxmem_total + maxmem > MAX_BYTES
            ):
                self.add_resource(sid, resource)  # every other case, and every error, as one add
                continue
            resources[sid] = resource
            node.sids[sid] = None
            node.maxmem_total += maxmem

    def _check_memory(self, sid: str, resource: Resource) -> None:
        # Refused here, not at the next view: an accepted resource must never make every later
        # computation of the scheduler fail (views add maxmem to a node's mem, in int64).
        for name in resource.nodes():
            node = self._nodes[name]
            if node.stats.mem + node.maxmem_total + resource.stats.maxmem > MAX_BYTES:
                problem = f"memory of node '{name}' with resource '{sid}' would exceed {MAX_BYTES} bytes"
                raise InvalidInputError(f"resource '{sid}'.stats.maxmem", problem)

    def remove_resource(self, sid: str) -> None:
        """Remove a resource from its node(s); never fails (unknown sid is a no-op)."""
        res = self._resources.pop(sid, None)
        if res is not None:
            self._views.clear()
            for name in res.nodes():
                node = self._nodes[name]
                if node.sids.pop(sid, False) is None:
                    node.maxmem_total -= res.stats.maxmem

    def add_resource_usage_to_node(self, nodename: str, sid: str, stats: ResourceStats) -> None:
        """Legacy add (Static's ``add_service_usage_to_node``).

        Unknown sid: added as started and stationary on ``nodename``. Known stationary sid:
        becomes moving from its current node to ``nodename`` with its *original* stats
        (``stats`` is ignored). Known moving sid: error ``resource '<sid>' is already moving to
        target node '<target>'``. On any error nothing changes.
        """
        existing = self._resources.get(sid)
        if existing is None:
            self.add_resource(sid, Resource(stats, True, nodename))
            return
        if existing.target is not None:
            raise SchedulingError(f"resource '{sid}' is already moving to target node '{existing.target}'")
        moving = Resource(existing.stats, existing.running, existing.current, nodename)
        self._check_placement(sid, moving)
        # Before anything changes: the target gains the resource's memory (its current node
        # counts it already), the only check add_resource can still fail once it is removed.
        self._check_memory(sid, Resource(existing.stats, existing.running, nodename))
        # Upstream takes the resource out and adds it again, so it moves to the end of its
        # current node's resource order.
        self.remove_resource(sid)
        self.add_resource(sid, moving)

    # -- views -------------------------------------------------------------------------

    def view(self, aggregation: Aggregation) -> NodeView:
        """Aggregate node stats (see :class:`Aggregation`) into a :class:`NodeView` in node order.

        Aggregated once per state: the view is kept until the next change (an HA round asks for
        the imbalance and then scores candidates, a scoring in parts asks once per part), and
        its arrays are read-only, so that no caller can change what the next one gets.
        """
        view = self._views.get(aggregation)
        if view is None:
            stats = [self._aggregate(node, aggregation) for node in self._nodes.values()]
            view = NodeView.from_stats(self._nodes, stats)
            for column in (view.cpu, view.maxcpu, view.mem, view.maxmem, view.load):
                column.setflags(write=False)
            self._views[aggregation] = view
        return view

    def _aggregate(self, node: _Node, aggregation: Aggregation) -> NodeStats:
        stats = node.stats
        if aggregation is Aggregation.IDENTITY:
            return stats
        resources = self._resources
        if aggregation is Aggregation.STARTED:
            # Every resource at its limits: its memory is in maxmem_total (exact integers).
            sids, mem = node.sids, stats.mem + node.maxmem_total
        else:
            sids = [sid for sid in node.sids if not resources[sid].running]
            mem = stats.mem + sum(resources[sid].stats.maxmem for sid in sids)
        # add_started's cpu folded over the counted resources in the node's order, as a running
        # sum instead of a NodeStats per resource: the same additions in the same order, so the
        # same bits.
        cpu, cores = stats.cpu, float(stats.maxcpu)
        for sid in sids:
            maxcpu = resources[sid].stats.maxcpu
            cpu += cores if maxcpu == 0.0 else maxcpu
        return NodeStats(cpu, stats.maxcpu, mem, stats.maxmem)
