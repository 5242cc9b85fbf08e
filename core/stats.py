"""Node and resource statistics, and how a resource's usage is added to or removed from a node.

Units everywhere: cpu in cores (float), mem in bytes (int). Loads are fractions of the node's
capacity (1.0 = fully used, above 1.0 = overcommitted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from .errors import InvalidInputError
from .limits import MAX_BYTES, MAX_CORES


def check_cores(field: str, value: float, *, positive: bool = False) -> float:
    """Return ``value`` as a float if it is a finite core count in [0, MAX_CORES].

    With ``positive`` the value must also be > 0. ``-0.0`` is returned as ``0.0``. Raises
    :class:`InvalidInputError` naming ``field`` otherwise (bools are refused: they are not counts).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(field, f"must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise InvalidInputError(field, f"must be a finite number, got {value}")
    if value < 0.0 or (positive and value == 0.0):
        raise InvalidInputError(field, f"must be {'> 0' if positive else '>= 0'}, got {value}")
    if value > MAX_CORES:
        raise InvalidInputError(field, f"must be at most {MAX_CORES:.0f} cores, got {value}")
    return value + 0.0


def check_bytes(field: str, value: int, *, positive: bool = False) -> int:
    """Return ``value`` if it is an integer byte count in [0, MAX_BYTES] (> 0 with ``positive``).

    Integral floats (``4.0``) are accepted as the integer they hold; fractions are refused.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(field, f"must be an integer, got {type(value).__name__}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidInputError(field, f"must be an integer byte count, got {value}")
        value = int(value)
    if value < 0 or (positive and value == 0):
        raise InvalidInputError(field, f"must be {'> 0' if positive else '>= 0'}, got {value}")
    if value > MAX_BYTES:
        raise InvalidInputError(field, f"must be at most {MAX_BYTES} bytes, got {value}")
    return value


# -- whole columns: the same checks in bulk (None where a value is not a plain number) --------


def cores_column(values: Sequence[float] | np.ndarray, checked: bool = True) -> np.ndarray | None:
    """``values`` as float64 when all are plain numbers (float or int, no bool) and, if
    ``checked``, valid core counts (finite, in [0, MAX_CORES]); else None."""
    if isinstance(values, np.ndarray):
        column = values.astype(np.float64) if values.dtype.kind in "iuf" else None
    elif set(map(type, values)) <= {float, int}:
        try:
            column = np.array(values, dtype=np.float64)
        except OverflowError:  # an int beyond float range
            column = None
    else:
        column = None
    if column is None or (checked and not cores_ok(column).all()):
        return None
    return column


def bytes_column(values: Sequence[int] | np.ndarray, checked: bool = True) -> np.ndarray | None:
    """``values`` as int64 when all are plain ints (no bool; integral floats go through the row
    checks) and, if ``checked``, valid byte counts (in [0, MAX_BYTES]); else None."""
    if isinstance(values, np.ndarray):
        column = values.astype(np.int64) if values.dtype.kind in "iu" else None
    elif set(map(type, values)) <= {int}:
        try:
            column = np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            column = None
    else:
        column = None
    if column is None or (checked and not bytes_ok(column).all()):
        return None
    return column


def cores_ok(column: np.ndarray) -> np.ndarray:
    """Per entry of a float column: a valid core count (finite, in [0, MAX_CORES])."""
    return np.isfinite(column) & (column >= 0.0) & (column <= MAX_CORES)


def bytes_ok(column: np.ndarray) -> np.ndarray:
    """Per entry of an int64 column: a valid byte count (in [0, MAX_BYTES])."""
    return (column >= 0) & (column <= MAX_BYTES)


def node_load(cpu: Any, maxcpu: Any, mem: Any, maxmem: Any) -> Any:
    """A node's load: the mean of its cpu load (``cpu / maxcpu``) and its memory load (``mem /
    maxmem``), a fraction. Floats, or float64 arrays for many nodes: the same operations in the same
    order, so the same bits (byte counts as float64, as :attr:`NodeStats.load` takes them)."""
    return (cpu / maxcpu + mem / maxmem) / 2.0


# NodeStats, ResourceStats and core.usage.Resource are values: never changed once built, and
# shared (between copies of a usage, between resources with equal records). They are msgspec
# structs, built in C: a third of the cost of a slotted dataclass (135 ns), a twelfth of a frozen
# one's (an object.__setattr__ call per field); a round places hundreds of resources, a snapshot of
# a 100k-candidate request thousands. Untracked by the garbage collector: they hold no containers.


class NodeStats(msgspec.Struct, gc=False):
    """Usage and capacity of one node (a value: never changed once built).

    ``cpu``: cores in use (float); ``maxcpu``: cores (int > 0); ``mem``/``maxmem``: bytes
    (``maxmem`` > 0). Construct through :meth:`checked` for untrusted values.
    """

    cpu: float
    maxcpu: int
    mem: int
    maxmem: int

    @classmethod
    def checked(cls, cpu: float, maxcpu: int, mem: int, maxmem: int, where: str = "node") -> NodeStats:
        """Validate every field (capacities must be > 0: a zero capacity gives NaN loads)."""
        return cls(
            cpu=check_cores(f"{where}.cpu", cpu),
            maxcpu=int(check_cores(f"{where}.maxcpu", maxcpu, positive=True)),
            mem=check_bytes(f"{where}.mem", mem),
            maxmem=check_bytes(f"{where}.maxmem", maxmem, positive=True),
        )

    @property
    def cpu_load(self) -> float:
        """Fraction of the node's cores in use."""
        return self.cpu / float(self.maxcpu)

    @property
    def mem_load(self) -> float:
        """Fraction of the node's memory in use."""
        return float(self.mem) / float(self.maxmem)

    @property
    def load(self) -> float:
        """Mean of cpu and memory load (:func:`node_load`)."""
        return node_load(self.cpu, float(self.maxcpu), float(self.mem), float(self.maxmem))


class ResourceStats(msgspec.Struct, gc=False):
    """Usage and limits of one resource (guest); a value, never changed once built (see
    :class:`NodeStats`).

    ``cpu``: cores in use; ``maxcpu``: core limit (0.0 = unlimited, i.e. the whole node);
    ``mem``/``maxmem``: bytes in use / memory limit.
    """

    cpu: float
    maxcpu: float
    mem: int
    maxmem: int

    @classmethod
    def checked(cls, cpu: float, maxcpu: float, mem: int, maxmem: int, where: str = "stats") -> ResourceStats:
        """Validate every field: finite, non-negative, within the limits of :mod:`core.limits`."""
        return cls(
            cpu=check_cores(f"{where}.cpu", cpu),
            maxcpu=check_cores(f"{where}.maxcpu", maxcpu),
            mem=check_bytes(f"{where}.mem", mem),
            maxmem=check_bytes(f"{where}.maxmem", maxmem),
        )

    @classmethod
    def static(cls, maxcpu: float, maxmem: int, where: str = "stats") -> ResourceStats:
        """Static stats: the configured maximum is also taken as the running usage."""
        maxcpu = check_cores(f"{where}.maxcpu", maxcpu)
        maxmem = check_bytes(f"{where}.maxmem", maxmem)
        return cls(cpu=maxcpu, maxcpu=maxcpu, mem=maxmem, maxmem=maxmem)

    def __add__(self, other: ResourceStats) -> ResourceStats:
        """Field-wise sum (a bundle of resources moving together)."""
        return ResourceStats(
            self.cpu + other.cpu, self.maxcpu + other.maxcpu, self.mem + other.mem, self.maxmem + other.maxmem
        )


ZERO_RESOURCE = ResourceStats(0.0, 0.0, 0, 0)


def add_started(node: NodeStats, resource: ResourceStats) -> NodeStats:
    """Count a resource at its limits: ``maxcpu`` (0.0 meaning all the node's cores) and ``maxmem``."""
    cpu = float(node.maxcpu) if resource.maxcpu == 0.0 else resource.maxcpu
    return NodeStats(node.cpu + cpu, node.maxcpu, node.mem + resource.maxmem, node.maxmem)


def add_running(node: NodeStats, resource: ResourceStats) -> NodeStats:
    """Count a resource at its measured usage (``cpu``, ``mem``)."""
    return NodeStats(node.cpu + resource.cpu, node.maxcpu, node.mem + resource.mem, node.maxmem)


def remove_running(node: NodeStats, resource: ResourceStats) -> NodeStats:
    """Take a resource's measured usage away, clamping cpu and mem at 0."""
    return NodeStats(max(0.0, node.cpu - resource.cpu), node.maxcpu, max(0, node.mem - resource.mem), node.maxmem)
