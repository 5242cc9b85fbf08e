"""Migration candidates: the compact (bundle) form the HA manager builds, its expansion, and the
columnar :class:`CandidateBatch` every scorer works on."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
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
    """Expanded candidates as columns, one row per candidate: move resource ``sids[i]`` with
    ``cpu[i]`` cores and ``mem[i]`` bytes (its running usage) from node ``sources[i]`` to node
    ``targets[i]``. What a decoder can hand over without an object per candidate; the columns are
    checked when the batch is built (:func:`batch_from_columns`)."""

    sids: Sequence[str]
    sources: Sequence[str]
    targets: Sequence[str]
    cpu: Sequence[float] | np.ndarray
    mem: Sequence[int] | np.ndarray

    def __len__(self) -> int:
        return len(self.sids)


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
    """Bundles as columns, one row per bundle: :class:`CompactCandidate` ``i`` is
    ``(leaders[i], resources[i], nodes[i])``. What a decoder can hand over without an object per
    bundle; checked when the batch is built (:func:`expand_compact_columns`). ``nodes`` may be
    :class:`RepeatedLists`."""

    leaders: Sequence[str]
    resources: Sequence[Sequence[str]]
    nodes: Sequence[Sequence[str]]

    def __len__(self) -> int:
        return len(self.leaders)

    def bundles(self) -> list[CompactCandidate]:
        """The bundles as :class:`CompactCandidate` objects."""
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


def _check_targets(compact: Sequence[CompactCandidate], counts: list[int], src: np.ndarray, tgt: np.ndarray) -> None:
    """Refuse unknown targets and targets equal to the source (product decision 4: upstream
    accepts both and then scores nonsense). ``tgt`` is -1 for unknown names."""
    bad = np.flatnonzero((tgt < 0) | (tgt == src))
    if len(bad) == 0:
        return
    row = int(bad[0])
    starts = np.cumsum([0, *counts])
    i = int(np.searchsorted(starts, row, side="right")) - 1
    k = row - int(starts[i])
    name = compact[i].nodes[k]
    problem = f"target node '{name}' does not exist" if tgt[row] < 0 else f"target node '{name}' is the source node"
    raise InvalidInputError(f"candidates[{i}].nodes[{k}]", problem)


def _node_indices(index: dict[str, int], names: list[str]) -> np.ndarray:
    """Positions of ``names`` in the view, -1 for an unknown name."""
    try:  # the common case, all known: a C-level loop
        return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names))
    except KeyError:
        return np.array([index.get(name, -1) for name in names], dtype=np.int64)


def bundle_stats(usage: Usage, bundle: CompactCandidate) -> tuple[str, ResourceStats]:
    """Validate a bundle as upstream does and return (leader's node, summed stats of the bundle).

    Errors, in upstream's order and words: unknown or non-stationary leader, leader missing from
    ``resources``, a member unknown, on another node, or non-stationary. Members listed twice
    are counted twice, as upstream does.
    """
    leader = usage.resource(bundle.leader)
    if leader is None:
        raise SchedulingError(f"leader '{bundle.leader}' is not present in the cluster usage")
    if leader.is_moving:
        raise SchedulingError(f"leader '{bundle.leader}' is non-stationary")
    if bundle.leader not in bundle.resources:
        raise SchedulingError(f"leader '{bundle.leader}' is not present in the resources list")
    # The field-wise left fold from zeros of ResourceStats.__add__, without an object per step.
    cpu, maxcpu, mem, maxmem = ZERO_RESOURCE.cpu, ZERO_RESOURCE.maxcpu, ZERO_RESOURCE.mem, ZERO_RESOURCE.maxmem
    for sid in bundle.resources:
        member = usage.resource(sid)
        if member is None:
            raise SchedulingError(f"resource '{sid}' is not present in the cluster usage")
        if member.is_moving:
            raise SchedulingError(f"resource '{sid}' is non-stationary")
        if member.current != leader.current:
            raise SchedulingError(f"resource '{sid}' is on other node than leader")
        stats = member.stats
        cpu, maxcpu, mem, maxmem = cpu + stats.cpu, maxcpu + stats.maxcpu, mem + stats.mem, maxmem + stats.maxmem
    return leader.current, ResourceStats(cpu, maxcpu, mem, maxmem)


def expand_compact(usage: Usage, view: NodeView, compact: Sequence[CompactCandidate]) -> CandidateBatch:
    """Expand bundles into one candidate per allowed target, in bundle then ``nodes`` order.

    Any invalid bundle or target fails the whole call (no partial result). Upstream's errors
    (:func:`bundle_stats`, in bundle order) come first, for the whole list: where upstream
    fails anyway, its error wins over crs-bridge's own refusals (a bundle's memory beyond the
    limit, unknown targets and targets equal to the source, product decision 4), which come
    next, in bundle order.
    """
    index = view.index()
    bundles = [bundle_stats(usage, bundle) for bundle in compact]
    for i, (_, stats) in enumerate(bundles):
        if stats.mem > MAX_BYTES:
            raise InvalidInputError(f"candidates[{i}].resources", f"bundle memory exceeds {MAX_BYTES} bytes")
    counts = np.array([len(bundle.nodes) for bundle in compact], dtype=np.int64)
    src = np.repeat(np.array([index[source] for source, _ in bundles], dtype=np.int64), counts)
    tgt = _node_indices(index, [name for bundle in compact for name in bundle.nodes])
    _check_targets(compact, counts.tolist(), src, tgt)
    return CandidateBatch(
        view=view,
        sids=[bundle.leader for bundle in compact],
        sid_index=np.repeat(np.arange(len(counts), dtype=np.int64), counts),
        src=src,
        tgt=tgt,
        cpu=np.repeat(np.array([stats.cpu for _, stats in bundles], dtype=np.float64), counts),
        mem=np.repeat(np.array([stats.mem for _, stats in bundles], dtype=np.int64), counts),
    )


def expand_compact_columns(usage: Usage, view: NodeView, compact: CompactColumns) -> CandidateBatch:
    """:func:`expand_compact` of bundles given as columns: the same batch, or the same error.

    Valid bundles are expanded in one pass over plain values; anything else (an error to
    report, in :func:`expand_compact`'s order) is left to :func:`expand_compact`.
    """
    batch = _valid_compact_batch(usage, view, compact)
    return batch if batch is not None else expand_compact(usage, view, compact.bundles())


def _valid_compact_batch(usage: Usage, view: NodeView, compact: CompactColumns) -> CandidateBatch | None:
    """The batch when every bundle and target is valid (:func:`bundle_stats`'s rules, known
    targets other than the source), else None."""
    resource, index = usage.resource_getter(), view.index()
    sources: list[int] = []
    cpu: list[float] = []
    mem: list[int] = []
    for leader_sid, members in zip(compact.leaders, compact.resources):
        leader = resource(leader_sid)
        if leader is None or leader.target is not None or leader_sid not in members:
            return None
        # bundle_stats' fold from zeros, member by member: the same sums to the last bit. For the
        # leader alone, the common bundle, that is 0 + mem (the same int) and 0.0 + cpu, which is
        # done below on the whole column.
        if len(members) == 1:
            stats = leader.stats
            bundle_cpu, bundle_mem = stats.cpu, stats.mem
        else:
            bundle_cpu, bundle_mem = ZERO_RESOURCE.cpu, ZERO_RESOURCE.mem
            for sid in members:
                member = resource(sid)
                if member is None or member.target is not None or member.current != leader.current:
                    return None
                bundle_cpu += member.stats.cpu
                bundle_mem += member.stats.mem
            if bundle_mem > MAX_BYTES:  # (a lone leader's is a resource's: the usage holds it)
                return None
        sources.append(index[leader.current])
        cpu.append(bundle_cpu)
        mem.append(bundle_mem)
    targets = _target_positions(index, compact.nodes)
    if targets is None:  # an unknown target node
        return None
    tgt, counts = targets
    # The arrays' own repeat, not np.repeat: half the fixed cost (0.35 against 0.8 us), which
    # counts on a small cluster.
    src = np.array(sources, dtype=np.int64).repeat(counts)
    if (tgt == src).any():
        return None
    return CandidateBatch(
        view=view,
        sids=list(compact.leaders),
        sid_index=np.arange(len(sources), dtype=np.int64).repeat(counts),
        src=src,
        tgt=tgt,
        # + 0.0: the lone leaders' fold (-0.0 becomes 0.0); a fold from 0.0 is never -0.0, so
        # the other bundles' sums stay as they are.
        cpu=(np.array(cpu, dtype=np.float64) + ZERO_RESOURCE.cpu).repeat(counts),
        mem=np.array(mem, dtype=np.int64).repeat(counts),
    )


def _target_positions(
    index: dict[str, int], nodes: Sequence[Sequence[str]]
) -> tuple[np.ndarray, np.ndarray | int] | None:
    """The target nodes of all rows, one after the other, as positions in the view, and each
    row's count of them (one count for all if they are alike); None if one is unknown.

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
    try:
        names = itertools.chain.from_iterable(distinct)
        table = np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=sum(widths))
    except KeyError:
        return None
    width = widths[0]
    if widths.count(width) == len(widths):
        # Lists of one length (all nodes but the guest's own) are a table's rows: one gather, not
        # the offsets' steps below (30 bundles: 9 us instead of 15; 300: 28 instead of 35).
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


def batch_from_candidates(view: NodeView, candidates: Sequence[MigrationCandidate]) -> CandidateBatch:
    """Columnar form of already expanded candidates; source and target must be known, different nodes.

    Errors (InvalidInputError) name the first failing candidate: its unknown source, its unknown
    or same target, then its stats in field order (see :meth:`ResourceStats.checked`).
    """
    migrations = [cand.migration for cand in candidates]
    stats = [cand.stats for cand in candidates]
    columns = CandidateColumns(
        sids=[mig.sid for mig in migrations],
        sources=[mig.source_node for mig in migrations],
        targets=[mig.target_node for mig in migrations],
        cpu=[s.cpu for s in stats],
        mem=[s.mem for s in stats],
    )
    limits = (cores_column([s.maxcpu for s in stats]), bytes_column([s.maxmem for s in stats]))
    batch = _bulk_checked_batch(view, columns) if all(c is not None for c in limits) else None
    # Anything the bulk checks do not pass is checked one candidate at a time, for its exact error.
    return batch if batch is not None else _batch_row_by_row(view, candidates)


def _batch_row_by_row(view: NodeView, candidates: Sequence[MigrationCandidate]) -> CandidateBatch:
    index = view.index()
    sid_of: dict[str, int] = {}
    sid_index, src, tgt, cpu, mem = [], [], [], [], []
    for i, cand in enumerate(candidates):
        mig = cand.migration
        s = index.get(mig.source_node)
        if s is None:
            raise InvalidInputError(f"candidates[{i}].source-node", f"source node '{mig.source_node}' does not exist")
        t = index.get(mig.target_node)
        if t is None or t == s:
            problem = "does not exist" if t is None else "is the source node"
            raise InvalidInputError(f"candidates[{i}].target-node", f"target node '{mig.target_node}' {problem}")
        src.append(s)
        tgt.append(t)
        sid_index.append(sid_of.setdefault(mig.sid, len(sid_of)))
        given = cand.stats  # re-validated: typed stats can be built without ``checked``
        stats = ResourceStats.checked(given.cpu, given.maxcpu, given.mem, given.maxmem, f"candidates[{i}].stats")
        cpu.append(stats.cpu)
        mem.append(stats.mem)
    return _batch(view, list(sid_of), sid_index, src, tgt, cpu, mem)


def batch_from_columns(
    view: NodeView,
    sids: Sequence[str],
    sources: Sequence[str],
    targets: Sequence[str],
    cpu: Sequence[float] | np.ndarray,
    mem: Sequence[int] | np.ndarray,
) -> CandidateBatch:
    """:func:`batch_from_candidates` for candidates given as columns (see :class:`CandidateColumns`):
    row i moves ``cpu[i]`` cores and ``mem[i]`` bytes of ``sids[i]``. Checked in bulk, with the same
    errors: the first failing row's unknown source, unknown or same target, then ``cpu``, ``mem``.
    """
    columns = CandidateColumns(sids, sources, targets, cpu, mem)
    if not len(sources) == len(targets) == len(cpu) == len(mem) == len(sids):
        raise ValueError("candidate columns differ in length")
    batch = _bulk_checked_batch(view, columns)
    if batch is not None:
        return batch
    # Rare: values that are not plain numbers (e.g. integral floats as bytes); row by row.
    index = view.index()
    rows = [_checked_row(index, columns, i) for i in range(len(columns))]
    src, tgt, cpu, mem = (list(column) for column in zip(*rows)) if rows else ([], [], [], [])
    return _columns_batch(view, columns.sids, src, tgt, cpu, mem)


def _bulk_checked_batch(view: NodeView, columns: CandidateColumns) -> CandidateBatch | None:
    """The batch if every row passes; raises the first failing row's error; None when the
    columns hold values the bulk checks cannot judge (not plain numbers)."""
    cpu, mem = cores_column(columns.cpu, checked=False), bytes_column(columns.mem, checked=False)
    if cpu is None or mem is None:
        return None
    index = view.index()
    src, tgt = _node_indices(index, columns.sources), _node_indices(index, columns.targets)
    bad = (src < 0) | (tgt < 0) | (tgt == src) | ~cores_ok(cpu) | ~bytes_ok(mem)
    if bad.any():
        _checked_row(index, columns, int(np.argmax(bad)))
        raise AssertionError("a row failing the bulk checks passed the row checks")
    return _columns_batch(view, columns.sids, src, tgt, cpu + 0.0, mem)


def _columns_batch(view: NodeView, sids: Sequence[str], src, tgt, cpu, mem) -> CandidateBatch:
    # One sid per row (a sid may repeat): numbering distinct sids would cost three passes over
    # the rows, and only the few rows a scoring returns ever need their sid.
    return CandidateBatch(
        view=view,
        sids=list(sids) if isinstance(sids, list) else sids,  # a list may change; other sequences are kept
        sid_index=np.arange(len(sids)),
        src=np.asarray(src, dtype=np.int64),
        tgt=np.asarray(tgt, dtype=np.int64),
        cpu=np.asarray(cpu, dtype=np.float64),
        mem=np.asarray(mem, dtype=np.int64),
    )


def _checked_row(index: dict[str, int], columns: CandidateColumns, i: int) -> tuple[int, int, float, int]:
    """Row ``i`` as (source index, target index, cpu, mem), checked in :func:`batch_from_candidates`'
    order; raises the row's first error."""
    source, target = columns.sources[i], columns.targets[i]
    s = index.get(source)
    if s is None:
        raise InvalidInputError(f"candidates[{i}].source-node", f"source node '{source}' does not exist")
    t = index.get(target)
    if t is None or t == s:
        problem = "does not exist" if t is None else "is the source node"
        raise InvalidInputError(f"candidates[{i}].target-node", f"target node '{target}' {problem}")
    cpu = check_cores(f"candidates[{i}].stats.cpu", _python_number(columns.cpu[i]))
    return s, t, cpu, check_bytes(f"candidates[{i}].stats.mem", _python_number(columns.mem[i]))


def _python_number(value: object) -> object:
    # A NumPy int64 is no int to check_bytes; judge the value it holds.
    return value.item() if isinstance(value, np.generic) else value


def _batch(view, sids, sid_index, src, tgt, cpu, mem) -> CandidateBatch:
    return CandidateBatch(
        view=view,
        sids=sids,
        sid_index=np.array(sid_index, dtype=np.int64),
        src=np.array(src, dtype=np.int64),
        tgt=np.array(tgt, dtype=np.int64),
        cpu=np.array(cpu, dtype=np.float64),
        mem=np.array(mem, dtype=np.int64),
    )
