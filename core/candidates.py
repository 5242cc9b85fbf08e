"""Migration candidates: the compact (bundle) form the HA manager builds and the expanded form, each
as the engine takes it (columns: :class:`CompactColumns`, :class:`CandidateColumns`; ``of()`` makes
them of lists of candidate objects), the expansion, and the columnar :class:`CandidateBatch` every
scorer works on."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InvalidInputError, SchedulingError
from .limits import MAX_BYTES
from .stats import (
    ZERO_RESOURCE,
    ResourceStats,
    bytes_column,
    bytes_ok,
    check_bytes,
    check_cores,
    cores_column,
    cores_ok,
)
from .usage import NodeView, Usage


@dataclass(frozen=True, slots=True, order=True)
class Migration:
    """Move resource ``sid`` from ``source_node`` to ``target_node``. Orders as upstream:
    by sid, then source, then target (code-point order, which is UTF-8 byte order)."""

    sid: str
    source_node: str
    target_node: str


@dataclass(frozen=True, slots=True)
class MigrationCandidate:
    """A concrete candidate: a migration and the stats that move with it (only ``cpu`` and
    ``mem`` move in a what-if)."""

    migration: Migration
    stats: ResourceStats


@dataclass(frozen=True, slots=True)
class CompactCandidate:
    """A bundle as the HA manager builds it: ``leader`` sid, all ``resources`` of the bundle
    (leader included) and the allowed target ``nodes``, one candidate per target."""

    leader: str
    resources: tuple[str, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CandidateColumns:
    """Expanded candidates as columns, the engine's one form of them: row ``i`` moves resource
    ``sids[i]`` with ``cpu[i]`` cores and ``mem[i]`` bytes (its running usage) from node
    ``sources[i]`` to node ``targets[i]``. The columns are checked when the batch is built
    (:func:`batch_from_columns`).

    ``maxcpu`` (cores) and ``maxmem`` (bytes) are the candidates' limits: they play no part in a
    score (only ``cpu`` and ``mem`` move in a what-if) and are checked only when given, as
    :meth:`of` gives them; None when the caller checked them already (the wire's structs do).

    The batch keeps ``sids`` as given, not a copy: a caller must not change that list while the
    batch is in use."""

    sids: Sequence[str]
    sources: Sequence[str]
    targets: Sequence[str]
    cpu: Sequence[float] | np.ndarray
    mem: Sequence[int] | np.ndarray
    maxcpu: Sequence[float] | np.ndarray | None = None
    maxmem: Sequence[int] | np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.sids)

    @classmethod
    def of(cls, candidates: Sequence[MigrationCandidate]) -> CandidateColumns:
        """The columns of candidate objects (an in-process caller's list), limits included, so that
        the batch checks every field of their stats as :meth:`ResourceStats.checked` would (typed
        stats can be built without it). An empty list gives empty columns."""
        migrations = [cand.migration for cand in candidates]
        stats = [cand.stats for cand in candidates]
        return cls(
            sids=[mig.sid for mig in migrations],
            sources=[mig.source_node for mig in migrations],
            targets=[mig.target_node for mig in migrations],
            cpu=[s.cpu for s in stats],
            mem=[s.mem for s in stats],
            maxcpu=[s.maxcpu for s in stats],
            maxmem=[s.maxmem for s in stats],
        )


class RepeatedLists(Sequence[tuple[str, ...]]):
    """A column of name lists of which many rows share one (the target lists of an HA round's
    bundles: all nodes but the guest's own): row ``i`` is ``lists[numbers[i]]``. A decoder that
    tells equal lists apart (by their JSON text, say) hands each distinct list over once, with
    each row's number of it (int64, each below ``len(lists)``), and the expansion looks each
    list up once."""

    __slots__ = ("numbers", "lists")

    def __init__(self, numbers: np.ndarray, lists: Sequence[tuple[str, ...]]) -> None:
        self.numbers = numbers
        self.lists = lists

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, row):  # a row (an int); a slice gives a list of rows
        if isinstance(row, slice):
            return list(map(self.lists.__getitem__, self.numbers[row].tolist()))
        return self.lists[self.numbers[row]]

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return map(self.lists.__getitem__, self.numbers.tolist())

    def lengths(self) -> np.ndarray:
        """Each row's count of names (int64)."""
        return np.fromiter(map(len, self.lists), dtype=np.int64, count=len(self.lists))[self.numbers]


@dataclass(frozen=True, slots=True)
class CompactColumns:
    """Bundles as columns, the engine's one form of compact candidates: :class:`CompactCandidate`
    ``i`` is ``(leaders[i], resources[i], nodes[i])``. Checked when the batch is built
    (:func:`expand_compact`). ``nodes`` may be :class:`RepeatedLists` (a decoder that numbers
    equal target lists); :meth:`of` makes the columns of a list of bundles."""

    leaders: Sequence[str]
    resources: Sequence[Sequence[str]]
    nodes: Sequence[Sequence[str]]

    def __len__(self) -> int:
        return len(self.leaders)

    @classmethod
    def of(cls, bundles: Sequence[CompactCandidate]) -> CompactColumns:
        """The columns of bundle objects (an in-process caller's list; empty gives empty columns)."""
        return cls([b.leader for b in bundles], [b.resources for b in bundles], [b.nodes for b in bundles])

    def bundles(self) -> list[CompactCandidate]:
        """The bundles as :class:`CompactCandidate` objects (what :meth:`of` takes)."""
        return [CompactCandidate(*row) for row in zip(self.leaders, map(tuple, self.resources), map(tuple, self.nodes))]


@dataclass(frozen=True, slots=True)
class ScoredMigration:
    """A migration with the (truncated) node imbalance it would leave."""

    migration: Migration
    imbalance: float


@dataclass(frozen=True, slots=True)
class CandidateBatch:
    """Expanded candidates as columns over a :class:`NodeView`, in expansion order.

    Row i moves ``cpu[i]`` cores and ``mem[i]`` bytes of resource ``sids[sid_index[i]]`` from
    node ``src[i]`` to node ``tgt[i]`` (indices into ``view.names``; always different nodes).
    ``sids`` may list a sid more than once.
    """

    view: NodeView
    sids: Sequence[str]
    sid_index: np.ndarray
    src: np.ndarray
    tgt: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    def migration(self, row: int) -> Migration:
        names = self.view.names
        return Migration(self.sids[self.sid_index[row]], names[self.src[row]], names[self.tgt[row]])

    def sort_keys(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ranks of (sid, source, target) for ``rows``, consistent with :class:`Migration` order."""
        # Ranked among the sids of ``rows`` only: ranking all sids (sorting thousands of names)
        # cost more than the rest of a scoring call whose contenders are a few rows.
        sid_rank = _ranks([self.sids[i] for i in self.sid_index[rows].tolist()])
        node_rank = _ranks(self.view.names)
        return sid_rank, node_rank[self.src[rows]], node_rank[self.tgt[rows]]


def _ranks(names: Sequence[str]) -> np.ndarray:
    # Equal names must get equal ranks: the same leader in two bundles is one sid to the order.
    rank = {name: i for i, name in enumerate(sorted(set(names)))}
    return np.array([rank[name] for name in names], dtype=np.int64)


def bundles_usage(
    usage: Usage, leaders: Sequence[str], members: Sequence[Sequence[str]]
) -> tuple[list[str], list[float], list[int]]:
    """Validate bundles as upstream does (bundle ``i``: ``members[i]`` led by ``leaders[i]``) and
    return, per bundle, the leader's node and the members' running usage summed: (nodes, cpu in
    cores, mem in bytes).

    Errors (SchedulingError), in upstream's order and words, the first failing bundle's: unknown
    or non-stationary leader, leader missing from its members, a member unknown, non-stationary,
    or on another node. Members listed twice are counted twice, as upstream does. The sums are the
    field-wise left fold from zeros of :meth:`ResourceStats.__add__` (so a lone ``-0.0`` cpu sums
    to ``0.0``); no bound is checked here.
    """
    resource = usage.resource_getter()
    nodes: list[str] = []
    cpu: list[float] = []
    mem: list[int] = []
    for leader_sid, sids in zip(leaders, members):
        leader = resource(leader_sid)
        if leader is None:
            raise SchedulingError(f"leader '{leader_sid}' is not present in the cluster usage")
        if leader.target is not None:
            raise SchedulingError(f"leader '{leader_sid}' is non-stationary")
        if leader_sid not in sids:
            raise SchedulingError(f"leader '{leader_sid}' is not present in the resources list")
        node, bundle_cpu, bundle_mem = leader.current, ZERO_RESOURCE.cpu, ZERO_RESOURCE.mem
        if len(sids) == 1:  # the leader alone, the common bundle, checked above: the fold's one step
            bundle_cpu, bundle_mem = bundle_cpu + leader.stats.cpu, bundle_mem + leader.stats.mem
        else:
            for sid in sids:
                member = resource(sid)
                if member is None:
                    raise SchedulingError(f"resource '{sid}' is not present in the cluster usage")
                if member.target is not None:
                    raise SchedulingError(f"resource '{sid}' is non-stationary")
                if member.current != node:
                    raise SchedulingError(f"resource '{sid}' is on other node than leader")
                bundle_cpu += member.stats.cpu
                bundle_mem += member.stats.mem
        nodes.append(node)
        cpu.append(bundle_cpu)
        mem.append(bundle_mem)
    return nodes, cpu, mem


def expand_compact(usage: Usage, view: NodeView, compact: CompactColumns) -> CandidateBatch:
    """Expand bundles into one candidate per allowed target, in bundle then ``nodes`` order: each
    moves the bundle's summed ``cpu`` (cores) and ``mem`` (bytes) from the leader's node.

    Any invalid bundle or target fails the whole call (no partial result). Upstream's errors
    (:func:`bundles_usage`, in bundle order) come first, for the whole list: where upstream
    fails anyway, its error wins over crs-bridge's own refusals (a bundle's memory beyond the
    limit, unknown targets and targets equal to the source, product decision 4), which come
    next, in bundle order. No bundles give an empty batch.
    """
    index = view.index()
    sources, cpu, mem = bundles_usage(usage, compact.leaders, compact.resources)
    if mem and max(mem) > MAX_BYTES:
        i = next(i for i, bundle_mem in enumerate(mem) if bundle_mem > MAX_BYTES)
        raise InvalidInputError(f"candidates[{i}].resources", f"bundle memory exceeds {MAX_BYTES} bytes")
    tgt, counts = _target_positions(index, compact.nodes)
    src = _node_indices(index, sources, len(sources)).repeat(counts)
    _check_targets(compact.nodes, counts, src, tgt)
    return CandidateBatch(
        view=view,
        sids=list(compact.leaders),
        sid_index=np.arange(len(sources), dtype=np.int64).repeat(counts),
        src=src,
        tgt=tgt,
        cpu=np.array(cpu, dtype=np.float64).repeat(counts),
        mem=np.array(mem, dtype=np.int64).repeat(counts),
    )


def _check_targets(nodes: Sequence[Sequence[str]], counts: np.ndarray | int, src: np.ndarray, tgt: np.ndarray) -> None:
    """Refuse unknown targets and targets equal to the source (product decision 4: upstream
    accepts both and then scores nonsense), naming the first. ``tgt`` is -1 for unknown names."""
    bad = np.flatnonzero((tgt < 0) | (tgt == src))
    if len(bad) == 0:
        return
    row = int(bad[0])
    starts = np.concatenate(([0], np.cumsum(np.broadcast_to(counts, len(nodes)))))
    i = int(np.searchsorted(starts, row, side="right")) - 1
    k = row - int(starts[i])
    name = nodes[i][k]
    problem = f"target node '{name}' does not exist" if tgt[row] < 0 else f"target node '{name}' is the source node"
    raise InvalidInputError(f"candidates[{i}].nodes[{k}]", problem)


def _node_indices(index: dict[str, int], names: Iterable[str], count: int) -> np.ndarray:
    """Positions of the ``count`` ``names`` in the view, -1 for an unknown name (one pass, in C)."""
    return np.fromiter(map(index.get, names, itertools.repeat(-1)), dtype=np.int64, count=count)


def _target_positions(index: dict[str, int], nodes: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray | int]:
    """The target nodes of all rows, one after the other, as positions in the view (-1 for an
    unknown name), and each row's count of them (one count for all if they are alike).

    Target lists repeat (all nodes but the guest's own, say): each distinct one is looked up once,
    and the rows' positions are gathered from the distinct ones' in one NumPy step."""
    if isinstance(nodes, RepeatedLists):
        dense, distinct = nodes.numbers, nodes.lists
    else:
        dense, distinct = numbered(list(map(tuple, nodes)))
    if not distinct:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    widths = list(map(len, distinct))
    # The distinct lists one after the other, looked up in one pass (not one per list: a round
    # of bundles with hundreds of distinct lists of a few dozen names each spent more time
    # starting the passes than in them).
    table = _node_indices(index, itertools.chain.from_iterable(distinct), sum(widths))
    width = widths[0]
    if widths.count(width) == len(widths):
        # Lists of one length (all nodes but the guest's own) are a table's rows: one gather.
        return table.reshape(len(distinct), width)[dense].reshape(-1), width
    # Else counts[i] positions from its start in the table.
    lengths = np.array(widths, dtype=np.int64)
    counts = lengths[dense]
    starts = np.cumsum(lengths) - lengths
    row_offsets = np.cumsum(counts) - counts
    gather = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts[dense] - row_offsets, counts)
    return table[gather], counts


def numbered(keys: Sequence[Hashable]) -> tuple[np.ndarray, list]:
    """Each key's number among the distinct ``keys`` (int64; equal keys, equal numbers), and the
    distinct keys in the order they first appear, which is the order of their numbers."""
    # Each key's first position with an equal key (one hash and compare of each key, in C), then
    # its number among those first positions.
    first: dict[Hashable, int] = {}
    firsts = np.fromiter(map(first.setdefault, keys, itertools.count()), dtype=np.int64, count=len(keys))
    return np.searchsorted(np.fromiter(first.values(), dtype=np.int64, count=len(first)), firsts), list(first)


def concat_batches(parts: Sequence[CandidateBatch]) -> CandidateBatch:
    """The batch of the candidate lists of ``parts`` (at least one) one after the other, as if expanded as one
    list (the same rows in the same order; scores and their order are those of that list).

    Every part must be over the same node view (the same cluster state); the first one's is kept.
    """
    if len(parts) == 1:
        return parts[0]
    view = parts[0].view
    if any(part.view.names != view.names for part in parts):
        raise ValueError("candidate batches over different node views")
    offsets = np.cumsum([0] + [len(part.sids) for part in parts[:-1]])
    return CandidateBatch(
        view=view,
        sids=[sid for part in parts for sid in part.sids],
        sid_index=np.concatenate([part.sid_index + offset for part, offset in zip(parts, offsets.tolist())]),
        src=np.concatenate([part.src for part in parts]),
        tgt=np.concatenate([part.tgt for part in parts]),
        cpu=np.concatenate([part.cpu for part in parts]),
        mem=np.concatenate([part.mem for part in parts]),
    )


def batch_from_columns(view: NodeView, columns: CandidateColumns) -> CandidateBatch:
    """The batch of expanded candidates: row i moves ``columns.cpu[i]`` cores and ``columns.mem[i]``
    bytes of ``columns.sids[i]`` from its source to its target node, both known and different.

    Errors (InvalidInputError) name the first failing row: its unknown source, its unknown or
    same target, then its stats in field order (``cpu``, ``maxcpu``, ``mem``, ``maxmem``; the
    limits only if given), as :meth:`ResourceStats.checked` words them. ValueError if the
    columns differ in length. No rows give an empty batch.
    """
    given = (columns.sources, columns.targets, columns.cpu, columns.mem, columns.maxcpu, columns.maxmem)
    if any(column is not None and len(column) != len(columns) for column in given):
        raise ValueError("candidate columns differ in length")
    batch = _bulk_checked_batch(view, columns)
    if batch is not None:
        return batch
    # Rare: values that are not plain numbers (e.g. integral floats as bytes); row by row.
    index = view.index()
    rows = [_checked_row(index, columns, i) for i in range(len(columns))]
    src, tgt, cpu, mem = (list(column) for column in zip(*rows)) if rows else ([], [], [], [])
    return _columns_batch(view, columns.sids, src, tgt, cpu, mem)


#: The stats columns of :class:`CandidateColumns` in field order: (name, the column as an array if
#: its values are plain numbers, each entry's bulk check, the one value's check).
_STATS_COLUMNS = (
    ("cpu", cores_column, cores_ok, check_cores),
    ("maxcpu", cores_column, cores_ok, check_cores),
    ("mem", bytes_column, bytes_ok, check_bytes),
    ("maxmem", bytes_column, bytes_ok, check_bytes),
)


def _bulk_checked_batch(view: NodeView, columns: CandidateColumns) -> CandidateBatch | None:
    """The batch if every row passes; raises the first failing row's error; None when the
    columns hold values the bulk checks cannot judge (not plain numbers)."""
    index = view.index()
    src, tgt = _node_indices(index, columns.sources, len(columns)), _node_indices(index, columns.targets, len(columns))
    bad = (src < 0) | (tgt < 0) | (tgt == src)
    stats = {}
    for name, as_array, ok, _ in _STATS_COLUMNS:
        values = getattr(columns, name)
        if values is not None:
            stats[name] = as_array(values, checked=False)
            if stats[name] is None:
                return None
            bad |= ~ok(stats[name])
    if bad.any():
        _checked_row(index, columns, int(np.argmax(bad)))
        raise AssertionError("a row failing the bulk checks passed the row checks")
    return _columns_batch(view, columns.sids, src, tgt, stats["cpu"] + 0.0, stats["mem"])


def _columns_batch(view: NodeView, sids: Sequence[str], src, tgt, cpu, mem) -> CandidateBatch:
    # One sid per row (a sid may repeat): numbering distinct sids would cost three passes over
    # the rows, and only the few rows a scoring returns ever need their sid.
    return CandidateBatch(
        view=view,
        sids=sids,
        sid_index=np.arange(len(sids)),
        src=np.asarray(src, dtype=np.int64),
        tgt=np.asarray(tgt, dtype=np.int64),
        cpu=np.asarray(cpu, dtype=np.float64),
        mem=np.asarray(mem, dtype=np.int64),
    )


def _checked_row(index: dict[str, int], columns: CandidateColumns, i: int) -> tuple[int, int, float, int]:
    """Row ``i`` as (source index, target index, cpu, mem), checked in :func:`batch_from_columns`'
    order; raises the row's first error."""
    source, target = columns.sources[i], columns.targets[i]
    s = index.get(source)
    if s is None:
        raise InvalidInputError(f"candidates[{i}].source-node", f"source node '{source}' does not exist")
    t = index.get(target)
    if t is None or t == s:
        problem = "does not exist" if t is None else "is the source node"
        raise InvalidInputError(f"candidates[{i}].target-node", f"target node '{target}' {problem}")
    stats = {
        name: check(f"candidates[{i}].stats.{name}", _python_number(values[i]))
        for name, _, _, check in _STATS_COLUMNS
        if (values := getattr(columns, name)) is not None
    }  # checked in field order
    return s, t, stats["cpu"], stats["mem"]


def _python_number(value: object) -> object:
    # A NumPy int64 is no int to check_bytes; judge the value it holds.
    return value.item() if isinstance(value, np.generic) else value
