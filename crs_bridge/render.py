"""Plain-text rendering of a rebalance plan and of an explanation, for ``crs-bridge plan`` and
``crs-bridge explain``, and of the method list (``rpc.discover``) for ``crs-bridge methods``.

Both work on the JSON results of ``plan_rebalance`` and ``explain_migrations`` (the wire dicts,
kebab-case keys), so the text shows exactly what a machine would read with ``--json``. Output is
ASCII, no colours, and every line fits :data:`WIDTH` columns (long node names and bundles are
shortened). Loads are fractions of a node's capacity, shown as percentages; a bar is full at 100 %
and ends in ``>`` when the node is overcommitted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

#: Terminal width the text is laid out for.
WIDTH = 80
#: Longest node name shown in full (longer ones are cut and end in ``~``).
MAX_NAME = 16
#: Widest bundle cell of the steps table, and longest node name in its route cell.
MAX_BUNDLE = 24
MAX_ROUTE_NAME = 12

_FULL, _EMPTY, _OVER = "#", ".", ">"


# -- the plan -------------------------------------------------------------------------------


def plan_text(plan: dict) -> str:
    """The plan as text: a summary, the steps table, why it stops, and every node's load bar
    before and after the whole plan."""
    steps = plan["steps"]
    before, after = plan["before"], plan["after"]
    moves = f"{len(steps)} move{'' if len(steps) == 1 else 's'}"
    lines = [
        *_wrapped(
            f"Rebalance plan ({plan['method']}, {plan['imbalance-formula']}): {moves}, "
            f"imbalance {before['imbalance']:.4f} -> {after['imbalance']:.4f}"
        ),
        *_wrapped(_plan_rules(plan)),
        "",
    ]
    if steps:
        lines += _steps_table(steps) + [""]
    lines += _wrapped(f"Why the plan ends: {plan['stop-message']}") + [""]
    lines.append("Node load (mean of cpu and memory load), before and after the plan:")
    lines += load_bars(
        [(b["node"], [("before", b["load"]), ("after", a["load"])]) for b, a in zip(before["nodes"], after["nodes"])]
    )
    return "\n".join(lines) + "\n"


def _plan_rules(plan: dict) -> str:
    steps = plan["max-steps"]
    limit = "no step limit" if steps is None else f"at most {steps} move{'' if steps == 1 else 's'}"
    repeat = ", a bundle may move again" if plan["allow-repeat"] else ""
    return (
        f"Rules: act above imbalance {plan['threshold']:.2f}, on gains of at least "
        f"{plan['margin']:.0%}; {limit}{repeat}."
    )


def _steps_table(steps: Sequence[dict]) -> list[str]:
    bundles = [_bundle(step["resources"], step["sid"]) for step in steps]
    routes = [
        f"{_cut(step['source-node'], MAX_ROUTE_NAME)} -> {_cut(step['target-node'], MAX_ROUTE_NAME)}" for step in steps
    ]
    bw = max(len("bundle"), *map(len, bundles))
    rw = max(len("source -> target"), *map(len, routes))
    header = "imbalance before -> after"
    if 4 + 2 + bw + 2 + rw + 2 + len(header) > WIDTH - 1:
        header = "imbalance"  # long names: keep the row within the width
    cw = max(len(header), len("0.0000 -> 0.0000"))
    lines = [f"{'step':>4}  {'bundle':<{bw}}  {'source -> target':<{rw}}  {header:>{cw}}"]
    for i, (step, bundle, route) in enumerate(zip(steps, bundles, routes), 1):
        change = f"{step['imbalance-before']:.4f} -> {step['imbalance-after']:.4f}"
        lines.append(f"{i:>4}  {bundle:<{bw}}  {route:<{rw}}  {change:>{cw}}")
    return lines


def _bundle(resources: Sequence[str], leader: str) -> str:
    """The bundle's sids, or its leader and how many more when they do not fit."""
    text = ", ".join(resources)
    if len(text) <= MAX_BUNDLE:
        return text
    more = f" +{len(resources) - 1}"
    return _cut(leader, MAX_BUNDLE - len(more)) + more


# -- the explanation ------------------------------------------------------------------------


def explanation_text(explanation: dict) -> str:
    """The explanation as text: the cluster and the checks, the decision as a sentence, the chosen
    move(s) and the runner-up with their node loads, and every node's load bar now."""
    e = explanation
    current = e["current"]
    count = e["candidate-count"]
    lines = [
        *_wrapped(
            f"Imbalance {current['imbalance']:.4f} ({e['imbalance-formula']}) over {len(current['nodes'])} nodes; "
            f"{count} candidate{'' if count == 1 else 's'} scored by {e['method']}."
        ),
        *_wrapped(_checks(e)),
        "",
        *_wrapped(f"Decision: {e['message']}"),
    ]
    chosen = e["chosen"]
    if chosen:
        lines.append("")
        first = chosen[0]["imbalance"]
        for rank, detail in enumerate(chosen, 1):
            label = "Chosen" if e["reason"] == "migrate" else "Best"
            label = label if len(chosen) == 1 else f"{label} {rank}"
            lines += _detail(label, detail, None if rank == 1 else first)
        if e["runner-up"] is not None:
            lines += _detail("Runner-up", e["runner-up"], first)
        if e["best-imbalance"] is not None and e["best-imbalance"] < first:
            # TOPSIS ranks by four load criteria, not by the imbalance alone.
            lines += _wrapped(f"The lowest imbalance any candidate would leave is {e['best-imbalance']:.6f}.")
    lines += ["", "Node load now (mean of cpu and memory load):"]
    lines += load_bars([(n["node"], [("now", n["load"])]) for n in current["nodes"]])
    return "\n".join(lines) + "\n"


def _checks(e: dict) -> str:
    threshold = "none" if e["threshold"] is None else f"{e['threshold']:.2f}"
    margin = "none" if e["margin"] is None else f"{e['margin']:.0%}"
    shown = "" if e["limit"] == 1 else f"; showing the top {e['limit']} choices"
    return f"Checks: threshold {threshold}, margin {margin}{shown}."


def _detail(label: str, detail: dict, first: float | None) -> list[str]:
    """A scored move (imbalances to 6 decimals: runner-ups are often close) and its two nodes."""
    m = detail["migration"]
    versus = "" if first is None else f" ({detail['imbalance'] - first:+.6f} vs first)"
    lines = [
        f"{label}: {_name(m['sid'])}  {_name(m['source-node'])} -> {_name(m['target-node'])}  "
        f"imbalance {detail['imbalance']:.6f}{versus}"
    ]
    for side in ("source", "target"):
        change = detail[side]
        b, a = change["before"], change["after"]
        lines.append(
            f"  {side} {_name(change['node'])}: load {b['load']:.1%} -> {a['load']:.1%} "
            f"(cpu {b['cpu-load']:.1%} -> {a['cpu-load']:.1%}, mem {b['mem-load']:.1%} -> {a['mem-load']:.1%})"
        )
    if detail.get("topsis") is not None:
        t = detail["topsis"]
        lines.append(
            f"  TOPSIS score {t['score']:.6f} (distance to ideal best {t['distance-to-best']:.6f}, "
            f"to worst {t['distance-to-worst']:.6f})"
        )
    return [piece for line in lines for piece in _wrapped(line, indent=4)]


# -- shared pieces --------------------------------------------------------------------------


def load_bars(nodes: Iterable[tuple[str, Sequence[tuple[str, float]]]]) -> list[str]:
    """One bar per (node, label, load): ``name  label |####....|  42.0%``, names once per node.
    Loads are fractions (1.0 = the node's capacity)."""
    nodes = [(_name(name), bars) for name, bars in nodes]
    if not nodes:
        return ["  (no nodes)"]
    nw = max(len(name) for name, _ in nodes)
    lw = max(len(label) for _, bars in nodes for label, _ in bars)
    width = max(10, WIDTH - 1 - (nw + 2 + lw + 1 + 2 + 1 + 7))
    lines = []
    for name, bars in nodes:
        for i, (label, load) in enumerate(bars):
            shown = name if i == 0 else ""
            lines.append(f"{shown:<{nw}}  {label:<{lw}} |{bar(load, width)}| {load:6.1%}")
    return lines


def bar(fraction: float, width: int) -> str:
    """A ``width``-character bar filled to ``fraction`` (0..1), rounded to the nearest character;
    over 1 the bar is full and ends in ``>``."""
    if fraction > 1.0:
        return _FULL * (width - 1) + _OVER
    filled = round(max(0.0, fraction) * width)
    return _FULL * filled + _EMPTY * (width - filled)


def _name(name: str) -> str:
    return _cut(name, MAX_NAME)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


# -- the methods ----------------------------------------------------------------------------


def methods_text(methods: Iterable[dict]) -> str:
    """Every method of an OpenRPC document's ``methods``: its name, then its summary indented."""
    lines = []
    for method in methods:
        lines += [method["name"], *_wrapped(f"    {method['summary']}", indent=4)]
    usage = "'crs-bridge methods NAME' shows a method's params; 'crs-bridge call NAME PARAMS' calls it."
    lines += ["", *_wrapped(usage)]
    return "\n".join(lines) + "\n"


def method_text(method: dict) -> str:
    """One method: summary, params (name, required or optional, type, description) and, for a
    ``scheduler.*`` method, the positional order per mode."""
    order = "named or positional in this order" if method["paramStructure"] == "either" else "named"
    lines = [method["name"], *_wrapped(f"    {method['summary']}", indent=4), "", f"Params ({order}):"]
    for param in method["params"]:
        need = "required" if param.get("required") else _optional(param["schema"])
        about = f": {param['description']}" if param.get("description") else ""
        lines += _wrapped(f"  {param['name']} ({need}, {_type_name(param['schema'])}){about}", indent=6)
    for mode, names in method.get("x-modes", {}).items():
        lines += _wrapped(f"Positional on a {mode} scheduler: [{', '.join(names)}]", indent=4)
    return "\n".join(lines) + "\n"


def _optional(schema: dict) -> str:
    default = schema.get("default")
    return "optional" if default is None else f"default {default}"


def _type_name(schema: dict) -> str:
    """A JSON schema in a few words: ``integer``, ``"bruteforce"|"topsis"``, ``[CompactCandidate]``."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return "|".join(map(json.dumps, schema["enum"]))
    choices = schema.get("anyOf") or schema.get("oneOf")
    if choices:
        return " or ".join(dict.fromkeys(map(_type_name, choices)))
    if schema.get("type") == "array" and "items" in schema:
        return f"[{_type_name(schema['items'])}]"
    return str(schema.get("type", "any"))


def _wrapped(text: str, indent: int = 2) -> list[str]:
    """``text`` broken at spaces into lines of at most :data:`WIDTH` - 1 columns; continuation
    lines are indented by ``indent`` spaces."""
    body = text.lstrip(" ")
    lines, line = [], text[: len(text) - len(body)]  # keep the text's own indent
    for word in body.split(" "):
        candidate = f"{line} {word}" if line.strip() else line + word
        if len(candidate) > WIDTH - 1 and line.strip():
            lines.append(line)
            line = " " * indent + word
        else:
            line = candidate
    return [*lines, line]
