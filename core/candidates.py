"""Migration candidates: the compact (bundle) form the HA manager builds, its expansion, and the
columnar :class:`CandidateBatch` every scorer works on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InvalidInputError, SchedulingError
from .limits import MAX_BYTES
from .stats import ZERO_RESOURCE, ResourceStats
from .usage import NodeView, Usage


@dataclass(frozen=True, slots=True, order=True)
class Migration:
    """Move resource ``sid`` from ``source_node`` to ``target_node``. Orders as upstream:
    by sid, then source, then target (code-point order, which is UTF-8 byte order)."""

    sid: str
    source_node: str
    target_node: str

    def to_wire(self) -> dict[str, str]:
        return {"sid": self.sid, "source-node": self.source_node, "target-node": self.target_node}


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
class ScoredMigration:
    """A migration with the (truncated) node imbalance it would leave."""

    migration: Migration
    imbalance: float

    def to_wire(self) -> dict:
        return {"migration": self.migration.to_wire(), "imbalance": self.imbalance}


@dataclass(frozen=True, slots=True)
class CandidateBatch:
    """Expanded candidates as columns over a :class:`NodeView`, in expansion order.

    Row i moves ``cpu[i]`` cores and ``mem[i]`` bytes of resource ``sids[sid_index[i]]`` from
    node ``src[i]`` to node ``tgt[i]`` (indices into ``view.names``; always different nodes).
    """

    view: NodeView
    sids: list[str]
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
        sid_rank = _ranks(self.sids)
        node_rank = _ranks(self.view.names)
        return sid_rank[self.sid_index[rows]], node_rank[self.src[rows]], node_rank[self.tgt[rows]]


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
    total = ZERO_RESOURCE
    for sid in bundle.resources:
        member = usage.resource(sid)
        if member is None:
            raise SchedulingError(f"resource '{sid}' is not present in the cluster usage")
        if member.is_moving:
            raise SchedulingError(f"resource '{sid}' is non-stationary")
        if member.current != leader.current:
            raise SchedulingError(f"resource '{sid}' is on other node than leader")
        total = total + member.stats
    return leader.current, total


def expand_compact(usage: Usage, view: NodeView, compact: Sequence[CompactCandidate]) -> CandidateBatch:
    """Expand bundles into one candidate per allowed target, in bundle then ``nodes`` order.

    Any invalid bundle or target fails the whole call (no partial result); errors come in
    bundle order, a bundle's own errors before those of its targets.
    """
    index = view.index()
    sources: list[int] = []
    cpu: list[float] = []
    mem: list[int] = []
    counts: list[int] = []
    targets: list[str] = []
    try:
        for i, bundle in enumerate(compact):
            source_name, stats = bundle_stats(usage, bundle)
            if stats.mem > MAX_BYTES:
                raise InvalidInputError(f"candidates[{i}].resources", f"bundle memory exceeds {MAX_BYTES} bytes")
            sources.append(index[source_name])
            cpu.append(stats.cpu)
            mem.append(stats.mem)
            counts.append(len(bundle.nodes))
            targets.extend(bundle.nodes)
    finally:
        # Targets of the bundles before a failing one are checked first, to report errors in order.
        src = np.repeat(np.array(sources, dtype=np.int64), counts)
        tgt = np.array([index.get(name, -1) for name in targets], dtype=np.int64)
        _check_targets(compact, counts, src, tgt)
    return CandidateBatch(
        view=view,
        sids=[bundle.leader for bundle in compact],
        sid_index=np.repeat(np.arange(len(counts), dtype=np.int64), counts),
        src=src,
        tgt=tgt,
        cpu=np.repeat(np.array(cpu, dtype=np.float64), counts),
        mem=np.repeat(np.array(mem, dtype=np.int64), counts),
    )


def batch_from_candidates(view: NodeView, candidates: Sequence[MigrationCandidate]) -> CandidateBatch:
    """Columnar form of already expanded candidates; source and target must be known, different nodes."""
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
