"""A review (:mod:`crs_bridge.review`) as one self-contained HTML page, for ``crs-bridge review --html``.

Nothing is fetched and nothing runs: the chart and the bars are inline SVG, the style is inline,
and the page forbids everything else (its Content-Security-Policy). The chart draws the imbalance
of every round as a line with one point per round (a link to that round's node loads), the
threshold of the settings and of the what-if as horizontal lines, and the moves (made, and those
the what-if would have made) as marks. Below it, every node's load in the chosen round (another
round's by clicking its point or its row: CSS ``:target``, no script), then the round table.
Works on the review's JSON form (``Review.to_wire()``). Loads and imbalances are fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .review_settings import NAMES
from .review_text import outcome, shown, utc_time

#: The chart's size and margins, in SVG user units (the page scales it to its width).
WIDTH, HEIGHT = 960, 340
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 24, 40
#: The node-load bars: one row per node.
BAR_ROW, BAR_LEFT, BAR_WIDTH = 22, 120, 640

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1100px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; } td, th { padding: 2px 8px; text-align: left; border-bottom: 1px solid #ddd; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } td.time { white-space: nowrap; }
svg text { font: 12px system-ui, sans-serif; fill: #333; }
.axis { stroke: #888; } .grid { stroke: #e4e4e4; }
.imbalance { fill: none; stroke: #1f5fa8; stroke-width: 2; }
.point { fill: #1f5fa8; } .point.motion { fill: #aaa; }
.threshold { stroke: #c0392b; stroke-width: 1.5; } .threshold.what-if { stroke: #8e44ad; stroke-dasharray: 6 4; }
.move { fill: #27ae60; } .move.what-if { fill: none; stroke: #8e44ad; stroke-width: 2; }
.bar { fill: #1f5fa8; } .bar.over { fill: #c0392b; } .bar-bg { fill: #eee; }
.bars { display: none; } .bars.chosen, .bars:target { display: block; }
#loads:has(.bars:target) .bars.chosen:not(:target) { display: none; }
tr.moved td { background: #eaf7ee; } tr.differs td.what-if { background: #f4ecf8; }
.note { color: #666; }
"""


def review_html(review: dict, chosen: int | None = None) -> str:
    """The page of ``review``; ``chosen``: the round whose node loads show first (default the last)."""
    rounds = review["rounds"]
    chosen = chosen if chosen is not None and 1 <= chosen <= len(rounds) else len(rounds)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<title>crs-bridge review</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>crs-bridge review: {len(rounds)} HA round{'s' * (len(rounds) != 1)}</h1>",
        _settings_table(review),
        _summary(review),
    ]
    if rounds:
        parts += [
            "<h2>Imbalance per round</h2>",
            chart(review),
            '<h2>Node loads</h2><div id="loads">',
            *(_bars(r, r["round"] == chosen) for r in rounds),
            "</div>",
            "<h2>Rounds</h2>",
            _round_table(review),
        ]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _settings_table(review: dict) -> str:
    settings, what_if = review["settings"], review["what-if"]
    head = "<tr><th>setting</th><th>value</th><th>from</th>" + ("<th>what-if</th>" if what_if else "") + "</tr>"
    rows = []
    for name in NAMES:
        cells = [name, shown(settings[name]["value"]), settings[name]["source"]]
        if what_if:
            cells.append(shown(what_if[name]["value"]))
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return "<table>" + head + "".join(rows) + "</table>"


def _summary(review: dict) -> str:
    s = review["summary"]
    longest = s["longest-above"]
    text = (
        f"{s['rounds']} rounds, {s['above-threshold']} above the threshold, {s['moves']} moves; "
        f"longest stretch above the threshold: {longest['rounds']} rounds"
    )
    if longest["rounds"]:
        text += f" ({longest['first']}-{longest['last']})"
    if "differ" in s:
        text += (
            f". What-if: {s['what-if-moves']} moves, {s['differ']} rounds decided otherwise (each round judged on "
            "its own recorded state: a move the what-if would have made does not change the later recordings)"
        )
    if s["skipped"]:
        text += f". {s['skipped']} files skipped"
    return f"<p>{escape(text)}.</p>"


def chart(review: dict) -> str:
    """The imbalance chart as an inline SVG: one ``circle.point`` per round."""
    rounds = review["rounds"]
    thresholds = [("real", review["settings"]["threshold"]["value"])]
    if review["what-if"] is not None:
        thresholds.append(("what-if", review["what-if"]["threshold"]["value"]))
    top = max([r["imbalance"] for r in rounds] + [t for _, t in thresholds]) * 1.1 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(number: int) -> float:
        return LEFT + (plot_w / 2 if len(rounds) == 1 else (number - 1) * plot_w / (len(rounds) - 1))

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [
        f'<svg id="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-label="imbalance per round" xmlns="http://www.w3.org/2000/svg">',
        *_grid(top, y),
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}"/>',
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">round (oldest first)</text>',
    ]
    parts += _round_ticks(len(rounds), x, TOP + plot_h)
    for kind, value in thresholds:
        label = "threshold" if kind == "real" else "what-if threshold"
        parts.append(
            f'<line class="threshold {kind}" data-threshold="{value!r}" x1="{LEFT}" y1="{y(value):.1f}" '
            f'x2="{WIDTH - RIGHT}" y2="{y(value):.1f}">'
            f"<title>{label} {value:g}</title></line>"
        )
    points = " ".join(f"{x(r['round']):.1f},{y(r['imbalance']):.1f}" for r in rounds)
    parts.append(f'<polyline class="imbalance" points="{points}"/>')
    for r in rounds:
        parts += _round_marks(r, x(r["round"]), y(r["imbalance"]))
    parts += _legend(review["what-if"] is not None)
    parts.append("</svg>")
    return "\n".join(parts)


def _grid(top: float, y) -> list[str]:
    steps = 4
    lines = []
    for i in range(steps + 1):
        value = top * i / steps
        lines.append(
            f'<line class="grid" x1="{LEFT}" y1="{y(value):.1f}" x2="{WIDTH - RIGHT}" y2="{y(value):.1f}"/>'
            f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.2f}</text>'
        )
    return lines


def _round_ticks(count: int, x, bottom: float) -> list[str]:
    """Round numbers under the axis: the first, the last, and about eight between."""
    step = max(1, round(count / 8))
    numbers = sorted({1, count, *range(step, count, step)})
    return [f'<text x="{x(n):.1f}" y="{bottom + 16}" text-anchor="middle">{n}</text>' for n in numbers]


def _round_marks(r: dict, cx: float, cy: float) -> list[str]:
    tip = f"round {r['round']}: imbalance {r['imbalance']:.4f}; {r['message']}"
    motion = " motion" if r["decision"] == "motion" else ""
    marks = [
        f'<a href="#round-{r["round"]}"><circle class="point{motion}" data-round="{r["round"]}" '
        f'cx="{cx:.1f}" cy="{cy:.1f}" r="3.5"><title>{escape(tip)}</title></circle></a>'
    ]
    if r["decision"] == "moved":
        marks.append(
            f'<path class="move real" d="M{cx:.1f},{cy - 7:.1f} l-6,-10 h12 z">'
            f"<title>{escape(r['message'])}</title></path>"
        )
    what_if = r["what-if"]
    if what_if is not None and what_if["decision"] == "moved":
        marks.append(
            f'<path class="move what-if" d="M{cx:.1f},{cy + 7:.1f} l-6,10 h12 z">'
            f"<title>what-if: {escape(what_if['message'])}</title></path>"
        )
    return marks


def _legend(what_if: bool) -> list[str]:
    entries = [
        ("imbalance", "line", "imbalance"),
        ("threshold real", "line", "threshold"),
        ("move real", "mark", "move"),
    ]
    if what_if:
        entries += [("threshold what-if", "line", "what-if threshold"), ("move what-if", "mark", "what-if move")]
    parts, x = [], LEFT + 8
    for css, kind, label in entries:
        if kind == "line":
            parts.append(f'<line class="{css}" x1="{x}" y1="{TOP - 10}" x2="{x + 18}" y2="{TOP - 10}"/>')
        else:
            parts.append(f'<path class="{css}" d="M{x + 9},{TOP - 4} l-6,-10 h12 z"/>')
        parts.append(f'<text x="{x + 24}" y="{TOP - 6}">{label}</text>')
        x += 56 + 7 * len(label)
    return parts


def _bars(r: dict, chosen: bool) -> str:
    """Round ``r``'s node loads as horizontal bars (full at 100 %; red past it), cpu and memory beside."""
    loads = r["node-loads"]
    scale = max([1.0] + [n["load"] for n in loads])
    height = BAR_ROW * len(loads) + 8
    rows = []
    for i, n in enumerate(loads):
        y = 4 + i * BAR_ROW
        width = BAR_WIDTH * n["load"] / scale
        over = " over" if n["load"] > 1 else ""
        detail = f"{n['load']:.1%} (cpu {n['cpu-load']:.1%}, mem {n['mem-load']:.1%})"
        rows.append(
            f'<text x="{BAR_LEFT - 8}" y="{y + 14}" text-anchor="end">{escape(n["node"][:16])}</text>'
            f'<rect class="bar-bg" x="{BAR_LEFT}" y="{y}" width="{BAR_WIDTH * 1 / scale:.1f}" height="{BAR_ROW - 6}"/>'
            f'<rect class="bar{over}" x="{BAR_LEFT}" y="{y}" width="{width:.1f}" height="{BAR_ROW - 6}">'
            f"<title>{escape(n['node'])}: {detail}</title></rect>"
            f'<text x="{BAR_LEFT + BAR_WIDTH + 8}" y="{y + 14}">{escape(detail)}</text>'
        )
    when = utc_time(r["time"], True)
    title = f"Round {r['round']} ({when} UTC), imbalance {r['imbalance']:.4f}: {outcome(r)}"
    return (
        f'<div class="bars{" chosen" if chosen else ""}" id="round-{r["round"]}"><p>{escape(title)}</p>'
        f'<svg viewBox="0 0 {BAR_LEFT + BAR_WIDTH + 240} {height}" width="100%" xmlns="http://www.w3.org/2000/svg">'
        + "".join(rows)
        + "</svg></div>"
    )


def _round_table(review: dict) -> str:
    what_if = review["what-if"] is not None
    head = ["round", "time (UTC)", "mode", "nodes", "guests", "imbalance", "decision"]
    head += ["what-if"] if what_if else []
    rows = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in review["rounds"]:
        rows.append(_table_row(r, what_if))
    rows.append("</table>")
    return "\n".join(rows)


def _table_row(r: dict, what_if: bool) -> str:
    classes = [
        c for c, on in (("moved", r["decision"] == "moved"), ("differs", what_if and r["what-if"]["differs"])) if on
    ]
    cells: Sequence[tuple[str, str]] = [
        ("num", f'<a href="#round-{r["round"]}">{r["round"]}</a>'),
        ("time", escape(utc_time(r["time"], True))),
        ("", r["mode"]),
        ("num", str(r["nodes"])),
        ("num", str(r["guests"])),
        ("num", f"{r['imbalance']:.4f}"),
        (
            "",
            escape(r["message"])
            + (f' <span class="note">({escape("; ".join(r["notes"]))})</span>' if r["notes"] else ""),
        ),
    ]
    if what_if:
        cells = [*cells, ("what-if", escape(outcome({**r["what-if"], "moving": r["moving"]})))]
    body = "".join(f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>" for css, text in cells)
    return f'<tr class="{" ".join(classes)}">{body}</tr>'
