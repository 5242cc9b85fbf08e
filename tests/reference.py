"""A slow, obviously-correct reference of the scheduler, for tests and benchmarks only.

Written from the specification (``math.md`` §5, ``binding.md`` §3/§4), not from core's code:
plain Python floats, one candidate at a time, every sum an explicit left-to-right loop in node
order (never ``sum()``/``math.fsum``), squares as ``d * d``. It reuses core's input and error
types only (:class:`NodeStats`, :class:`ResourceStats`, :class:`Migration`,
:class:`CompactCandidate`, the two error classes), none of core's arithmetic.

Where crs-bridge deliberately differs from upstream it follows the product decisions: nodes and
each node's resources keep insertion order, and every value is the crate's for that order (3);
unknown targets and targets equal to their source are refused (4), after upstream's bundle
errors of the whole list; the legacy add keeps a resource on the "already moving" error.

Units: cpu in cores (float), memory in bytes (int), loads and imbalances are fractions.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from crs_bridge.core.candidates import CompactCandidate, Migration
from crs_bridge.core.errors import InvalidInputError, SchedulingError
from crs_bridge.core.stats import NodeStats, ResourceStats

RAW_WEIGHTS = (-1.0, -2.0, -5.0, -10.0)


def _normalised_weights(raw: Sequence[float]) -> list[float]:
    total = 0.0
    for w in raw:
        total += abs(w)
    return [abs(w) / total for w in raw]


#: |w| / sum |w| for (average cpu, highest cpu, average memory, highest memory).
WEIGHTS = _normalised_weights(RAW_WEIGHTS)

View = list[tuple[str, NodeStats]]
Candidate = tuple[Migration, ResourceStats]
Scored = tuple[Migration, float]


# -- float helpers (math.md §5.8) ------------------------------------------------------------


def rust_max(a: float, b: float) -> float:
    """Rust ``f64::max``: a NaN argument is ignored."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a >= b else b


def ieee_div(a: float, b: float) -> float:
    """``a / b`` with IEEE semantics for ``b == 0`` (inf or NaN, never ZeroDivisionError).

    Python has no quiet 0/0; the NaN made here is positive (x86 hardware makes a negative one,
    which upstream's total order would sort first: see the report on subnormal loads)."""
    if b != 0.0 or a != a or b != b:
        return a / b if b != 0.0 else math.nan
    if a == 0.0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def total_order_key(x: float) -> int:
    """An integer that sorts as IEEE 754 totalOrder sorts ``x`` (-NaN < -inf < ... < -0 < +0 < ... < +NaN)."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits ^ 0x7FFFFFFFFFFFFFFF if bits < 0 else bits


def truncate(x: float) -> float:
    """``trunc(1e15 * x) / 1e15``; NaN and infinities unchanged (Rust's trunc keeps them)."""
    scaled = 1e15 * x
    if not math.isfinite(scaled):
        return scaled / 1e15
    return float(math.trunc(scaled)) / 1e15


def rust_display(x: float) -> str:
    """Rust's ``Display`` of an f64: ``NaN``, ``inf``, shortest round-trip digits, never an exponent."""
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(x)
    sign = "-" if text.startswith("-") else ""
    text = text.lstrip("-")
    mantissa, _, exponent = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits, point = whole + frac, len(whole) + (int(exponent) if exponent else 0)
    if point <= 0:
        out = "0." + "0" * -point + digits
    elif point >= len(digits):
        out = digits + "0" * (point - len(digits))
    else:
        out = digits[:point] + "." + digits[point:]
    if "." in out:
        out = out.rstrip("0").rstrip(".")
    out = out.lstrip("0") or "0"
    if out.startswith("."):
        out = "0" + out
    return sign + out


# -- loads and imbalance (math.md §5.1, §5.2) ------------------------------------------------


def cpu_load(node: NodeStats) -> float:
    return ieee_div(node.cpu, float(node.maxcpu))


def mem_load(node: NodeStats) -> float:
    return ieee_div(float(node.mem), float(node.maxmem))


def load(node: NodeStats) -> float:
    return (cpu_load(node) + mem_load(node)) / 2.0


def imbalance_of_loads(loads: Sequence[float], formula: str = "raw") -> float:
    """Coefficient of variation of ``loads``; 'normalized' divides it by sqrt(n - 1)."""
    n = len(loads)
    if formula == "normalized" and n < 2:
        return 0.0
    total = 0.0
    for x in loads:
        total += x
    if total == 0.0:
        return 0.0
    mean = total / n
    if mean == 0.0:  # loads of a few subnormals: crs-bridge answers 0.0 where upstream gives NaN
        return 0.0
    squares = 0.0
    for x in loads:
        d = x - mean
        squares += d * d
    cv = math.sqrt(squares / n) / mean
    if formula == "normalized":
        return cv / math.sqrt(n - 1)
    return cv


def imbalance(view: View, formula: str = "raw") -> float:
    """Imbalance of a view's node loads, in node order."""
    return imbalance_of_loads([load(stats) for _, stats in view], formula)


# -- node changes (binding.md §4) ------------------------------------------------------------


def add_started(node: NodeStats, r: ResourceStats) -> NodeStats:
    cpu = float(node.maxcpu) if r.maxcpu == 0.0 else r.maxcpu
    return NodeStats(node.cpu + cpu, node.maxcpu, node.mem + r.maxmem, node.maxmem)


def add_running(node: NodeStats, r: ResourceStats) -> NodeStats:
    return NodeStats(node.cpu + r.cpu, node.maxcpu, node.mem + r.mem, node.maxmem)


def remove_running(node: NodeStats, r: ResourceStats) -> NodeStats:
    mem = node.mem - r.mem if node.mem >= r.mem else 0
    return NodeStats(rust_max(0.0, node.cpu - r.cpu), node.maxcpu, mem, node.maxmem)


# -- the usage model (binding.md §2, §4) -----------------------------------------------------


@dataclass
class RefResource:
    stats: ResourceStats
    running: bool
    current: str
    target: str | None = None


class RefUsage:
    """Nodes (name -> base stats, ordered sid list) and resources, both in insertion order."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[NodeStats, list[str]]] = {}
        self.resources: dict[str, RefResource] = {}

    def add_node(self, name: str, stats: NodeStats) -> None:
        if name in self.nodes:
            raise SchedulingError(f"node '{name}' already exists")
        self.nodes[name] = (stats, [])

    def remove_node(self, name: str) -> None:
        if name not in self.nodes:
            return
        _, sids = self.nodes.pop(name)
        for sid in sids:
            res = self.resources[sid]
            if res.target is None:
                del self.resources[sid]
            elif res.current == name:
                self.resources[sid] = RefResource(res.stats, res.running, res.target)
            else:
                self.resources[sid] = RefResource(res.stats, res.running, res.current)

    def add_resource(self, sid: str, res: RefResource) -> None:
        if sid in self.resources:
            raise SchedulingError(f"resource '{sid}' already exists")
        if res.target is None:
            if res.current not in self.nodes:
                raise SchedulingError(f"current node for resource '{sid}' does not exist")
            self.nodes[res.current][1].append(sid)
        else:
            if res.current == res.target:
                raise SchedulingError(f"resource '{sid}' has the same current and target node")
            if res.current not in self.nodes or res.target not in self.nodes:
                raise SchedulingError(f"nodes for resource '{sid}' do not exist")
            self.nodes[res.current][1].append(sid)
            self.nodes[res.target][1].append(sid)
        self.resources[sid] = res

    def remove_resource(self, sid: str) -> None:
        res = self.resources.pop(sid, None)
        if res is None:
            return
        for name in (res.current, res.target):
            if name is not None:
                self.nodes[name][1].remove(sid)

    def add_legacy(self, nodename: str, sid: str, stats: ResourceStats) -> None:
        """Static's add_service_usage_to_node; on any error nothing changes."""
        res = self.resources.get(sid)
        if res is None:
            self.add_resource(sid, RefResource(stats, True, nodename))
            return
        if res.target is not None:
            raise SchedulingError(f"resource '{sid}' is already moving to target node '{res.target}'")
        sids = self.nodes[res.current][1]
        position = sids.index(sid)
        self.remove_resource(sid)
        try:
            self.add_resource(sid, RefResource(res.stats, res.running, res.current, nodename))
        except SchedulingError:
            sids.insert(position, sid)  # put back where it was: a failed call changes nothing
            self.resources[sid] = res
            raise

    def view(self, aggregation: str) -> View:
        """'started' (Static), 'identity' (Dynamic) or 'starting' (Dynamic start scoring)."""
        out = []
        for name, (stats, sids) in self.nodes.items():
            if aggregation != "identity":
                for sid in sids:
                    res = self.resources.get(sid)
                    if res is not None and (aggregation == "started" or not res.running):
                        stats = add_started(stats, res.stats)
            out.append((name, stats))
        return out


# -- candidates (binding.md §3) --------------------------------------------------------------


def expand(usage: RefUsage, compact: Sequence[CompactCandidate]) -> list[Candidate]:
    """Concrete candidates in bundle then ``nodes`` order; upstream's checks over all bundles
    first (its error wins where it fails anyway), then ours on targets."""
    bundles = [(bundle, *_bundle(usage, bundle)) for bundle in compact]
    out = []
    for i, (bundle, source, stats) in enumerate(bundles):
        for k, target in enumerate(bundle.nodes):
            if target not in usage.nodes:
                raise InvalidInputError(f"candidates[{i}].nodes[{k}]", f"target node '{target}' does not exist")
            if target == source:
                raise InvalidInputError(f"candidates[{i}].nodes[{k}]", f"target node '{target}' is the source node")
            out.append((Migration(bundle.leader, source, target), stats))
    return out


def _bundle(usage: RefUsage, bundle: CompactCandidate) -> tuple[str, ResourceStats]:
    """(leader's node, summed stats) of a bundle that passes upstream's checks."""
    leader = usage.resources.get(bundle.leader)
    if leader is None:
        raise SchedulingError(f"leader '{bundle.leader}' is not present in the cluster usage")
    if leader.target is not None:
        raise SchedulingError(f"leader '{bundle.leader}' is non-stationary")
    if bundle.leader not in bundle.resources:
        raise SchedulingError(f"leader '{bundle.leader}' is not present in the resources list")
    cpu, maxcpu, mem, maxmem = 0.0, 0.0, 0, 0
    for sid in bundle.resources:
        res = usage.resources.get(sid)
        if res is None:
            raise SchedulingError(f"resource '{sid}' is not present in the cluster usage")
        if res.target is None and res.current != leader.current:
            raise SchedulingError(f"resource '{sid}' is on other node than leader")
        if res.target is not None:
            raise SchedulingError(f"resource '{sid}' is non-stationary")
        cpu, maxcpu = cpu + res.stats.cpu, maxcpu + res.stats.maxcpu
        mem, maxmem = mem + res.stats.mem, maxmem + res.stats.maxmem
    return leader.current, ResourceStats(cpu, maxcpu, mem, maxmem)


# -- migrations (math.md §5.3, §5.4) ---------------------------------------------------------


def what_if(view: View, migration: Migration, stats: ResourceStats) -> View:
    out = []
    for name, node in view:
        if name == migration.source_node:
            node = remove_running(node, stats)
        elif name == migration.target_node:
            node = add_running(node, stats)
        out.append((name, node))
    return out


def migration_imbalance(view: View, candidate: Candidate, formula: str = "raw") -> float:
    """Truncated imbalance after one candidate's migration."""
    return truncate(imbalance(what_if(view, *candidate), formula))


def order_key(scored: Scored) -> tuple:
    migration, value = scored
    return (
        total_order_key(value),
        migration.sid.encode(),
        migration.source_node.encode(),
        migration.target_node.encode(),
    )


def bruteforce(view: View, candidates: Sequence[Candidate], limit: int, formula: str = "raw") -> list[Scored]:
    """The ``limit`` smallest (imbalance, sid, source, target), best first."""
    scored = [(c[0], migration_imbalance(view, c, formula)) for c in candidates]
    return sorted(scored, key=order_key)[:limit]


# -- TOPSIS (math.md §5.5, §5.6) -------------------------------------------------------------


def alternative_parts(view: View) -> tuple[float, float, float, float]:
    """(sum of squared cpu loads, max cpu load, sum of squared memory loads, max memory load)."""
    sq_cpu, sq_mem, top_cpu, top_mem = 0.0, 0.0, 0.0, 0.0
    for _, node in view:
        c, m = cpu_load(node), mem_load(node)
        sq_cpu += c * c
        sq_mem += m * m
        top_cpu = rust_max(top_cpu, c)
        top_mem = rust_max(top_mem, m)
    return sq_cpu, top_cpu, sq_mem, top_mem


def alternatives(views: Sequence[View]) -> list[list[float]]:
    """The criteria of each view: (1 + RMS cpu load, 1 + max cpu load, 1 + RMS memory load,
    1 + max memory load)."""
    rows = []
    for view in views:
        sq_cpu, top_cpu, sq_mem, top_mem = alternative_parts(view)
        n = len(view)
        rows.append([1.0 + math.sqrt(sq_cpu / n), 1.0 + top_cpu, 1.0 + math.sqrt(sq_mem / n), 1.0 + top_mem])
    return rows


def topsis_scores(matrix: Sequence[Sequence[float]], weights: Sequence[float] = WEIGHTS) -> list[float]:
    """Closeness of each row to the ideal (all criteria minimised); errors as upstream."""
    rows, columns = len(matrix), len(weights)
    norm = [list(row) for row in matrix]
    for j in range(columns):
        acc = 0.0
        for i in range(rows):
            acc += matrix[i][j] * matrix[i][j]
        d = math.sqrt(acc)
        if d != 0.0:
            for i in range(rows):
                v = matrix[i][j] / d
                if not math.isfinite(v):
                    raise SchedulingError(f"criterion {j} got invalid value {rust_display(v)}")
                norm[i][j] = v
    best = [min((row[j] for row in norm), key=total_order_key) for j in range(columns)] if rows else []
    worst = [max((row[j] for row in norm), key=total_order_key) for j in range(columns)] if rows else []
    scores = []
    for row in norm:
        to_best, to_worst = 0.0, 0.0
        for j in range(columns):
            db = weights[j] * (row[j] - best[j])
            dw = weights[j] * (row[j] - worst[j])
            to_best += db * db
            to_worst += dw * dw
        to_best, to_worst = math.sqrt(to_best), math.sqrt(to_worst)
        both = to_worst + to_best
        score = 0.0 if both == 0.0 else to_worst / both
        if not math.isfinite(score):
            raise SchedulingError(f"invalid score {rust_display(score)}")
        scores.append(score)
    return scores


def topsis_rank(scores: Sequence[float]) -> list[int]:
    """Row indices by descending score (total order); ties keep input order."""
    return sorted(range(len(scores)), key=lambda i: total_order_key(scores[i]), reverse=True)


def topsis(view: View, candidates: Sequence[Candidate], limit: int, formula: str = "raw") -> list[Scored]:
    """First ``limit`` candidates in TOPSIS rank order, each with its truncated imbalance."""
    ranked = topsis_rank(topsis_candidate_scores(view, candidates))[:limit]
    return [(candidates[i][0], migration_imbalance(view, candidates[i], formula)) for i in ranked]


def topsis_candidate_scores(view: View, candidates: Sequence[Candidate]) -> list[float]:
    """TOPSIS score of every candidate, in input order."""
    return topsis_scores(alternatives([what_if(view, *c) for c in candidates]))


# -- starting a resource (math.md §5.7) ------------------------------------------------------


def start_scores(view: View, stats: ResourceStats) -> list[tuple[str, float]]:
    """(node, score) for each node in view order: alternative X adds ``stats`` started on X only."""
    views = [[(name, add_started(node, stats) if name == x else node) for name, node in view] for x, _ in view]
    scores = topsis_scores(alternatives(views))
    return [(name, scores[i]) for i, (name, _) in enumerate(view)]


# -- the seed's select (README decision 5) ---------------------------------------------------


def select_best(
    view: View, candidates: Sequence[Candidate], formula: str = "raw", threshold: float | None = None
) -> Scored | None:
    """First candidate in input order with truncated imbalance <= ``threshold``, else the best."""
    if threshold is not None:
        for c in candidates:
            value = migration_imbalance(view, c, formula)
            if value <= threshold:
                return (c[0], value)
    best = bruteforce(view, candidates, 1, formula)
    return best[0] if best else None
