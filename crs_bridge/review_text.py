"""Plain-text rendering of a review (:mod:`crs_bridge.review`) for ``crs-bridge review``.

Works on the review's JSON form (``Review.to_wire()``, as ``--json`` prints it), so the text
shows what a machine reads. The round table has one row per round, oldest first, with HA's gates
in the order ``load_balance`` applies them; the imbalance trend is a one-line sparkline (block
characters, or ASCII where the output cannot encode them). Imbalances are fractions.
"""

from __future__ import annotations

from collections.abc import Sequence

from .review_settings import NAMES

#: The sparkline's levels, lowest first, and their ASCII stand-ins.
SPARKS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
ASCII_SPARKS = "_.-=+*#@"
#: Widest sparkline; longer reviews show the highest imbalance of each group of rounds.
SPARK_WIDTH = 72
#: Most notes (contradictions) listed one by one.
MOST_NOTES = 10

_DECISION_WORDS = {
    "motion": "motion running",
    "threshold": "under threshold",
    "hold": "held",
    "no-candidates": "no candidates",
    "margin": "gain < margin",
    "moved": "MOVED",
}
_COLUMNS = (
    "round",
    "time (UTC)",
    "mode",
    "nodes",
    "guests",
    "imbalance",
    "threshold",
    "hold",
    "best move -> imbalance",
    "gain",
    "decision",
)


def review_text(review: dict, unicode: bool = True) -> str:
    """The review as text: the rounds' span, the settings and their sources, the round table,
    notes, the summary and the sparkline, and the what-if's differing rounds."""
    rounds = review["rounds"]
    lines = [_heading(rounds), "", "Settings (where each comes from):"]
    lines += _settings_lines(review["settings"])
    if rounds:
        lines += ["", *_table(rounds), *_footnotes(rounds)]
    lines += ["", *_summary_lines(review["summary"], rounds, review["settings"], unicode)]
    if review["what-if"] is not None:
        lines += ["", *_what_if_lines(review)]
    return "\n".join(lines) + "\n"


def _heading(rounds: Sequence[dict]) -> str:
    if not rounds:
        return "No round to review."
    first, last = rounds[0], rounds[-1]
    nodes = sorted({r["nodes"] for r in rounds})
    node_text = f"{nodes[0]}" if len(nodes) == 1 else f"{nodes[0]}-{nodes[-1]}"
    return (
        f"{len(rounds)} HA round{'s' * (len(rounds) != 1)} of {node_text} nodes ({first['mode']}), "
        f"{utc_time(first['time'], True)} .. {utc_time(last['time'], True)} UTC"
    )


def utc_time(stamp: str, full: bool = False) -> str:
    """'20261207T024029.366Z' as '2026-12-07 02:40:29' (``full``) or '12-07 02:40:29'."""
    if len(stamp) < 15:
        return stamp or "?"
    date = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}" if full else f"{stamp[4:6]}-{stamp[6:8]}"
    return f"{date} {stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}"


def _settings_lines(settings: dict) -> list[str]:
    lines = []
    for name in NAMES:
        value = settings[name]["value"]
        lines.append(f"  {name:<10} {shown(value):<11} {settings[name]['source']}")
    return lines


def shown(value: object) -> str:
    if value is None:
        return "recorded"
    return f"{value:g}" if isinstance(value, float | int) else str(value)


def _table(rounds: Sequence[dict]) -> list[str]:
    rows = [_row(r) for r in rounds]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(_COLUMNS)]
    right = {0, 3, 4, 5}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return [line(_COLUMNS), *(line(row) for row in rows)]


def _row(r: dict) -> list[str]:
    gate = r["decision"]
    threshold = hold = best = gain = "-"
    if gate != "motion":
        threshold = f"{'>' if gate != 'threshold' else '<='} {r['threshold']:.4f}"
    if r["held"] is not None:
        hold = f"{r['held']}/{r['hold']:g}"
    if r["best"] is not None:
        b = r["best"]
        best = f"{b['sid']} {b['source']}>{b['target']} -> {b['imbalance']:.4f}"
        sign = "<" if gate == "margin" else ">="
        gain = f"{b['relative']:.1%} {sign} {r['margin']:.0%}"
    decision = _DECISION_WORDS[gate]
    if gate == "motion":
        decision += f" ({', '.join(m['sid'] for m in r['moving'][:2])}{'...' if len(r['moving']) > 2 else ''})"
    if r["candidates"] == "derived":
        decision += " *"
    if r["notes"]:
        decision += " !"
    return [
        str(r["round"]),
        utc_time(r["time"]),
        r["mode"],
        str(r["nodes"]),
        str(r["guests"]),
        f"{r['imbalance']:.4f}",
        threshold,
        hold,
        best,
        gain,
        decision,
    ]


def _footnotes(rounds: Sequence[dict]) -> list[str]:
    lines = []
    if any(r["candidates"] == "derived" for r in rounds):
        lines.append(
            "* scored on candidates derived from the recorded state (every guest not on the move, to every other"
            " node): HA did not score there, and its affinity rules are not in a recording"
        )
    noted = [r for r in rounds if r["notes"]]
    if noted:
        lines.append("! the recording contradicts these settings (were others in force?):")
        for r in noted[:MOST_NOTES]:
            lines.append(f"  round {r['round']}: {'; '.join(r['notes'])}")
        if len(noted) > MOST_NOTES:
            lines.append(f"  ... and {len(noted) - MOST_NOTES} more rounds")
    return lines


def _summary_lines(summary: dict, rounds: Sequence[dict], settings: dict, unicode: bool) -> list[str]:
    longest = summary["longest-above"]
    stretch = f"longest stretch above the threshold: {longest['rounds']} round{'s' * (longest['rounds'] != 1)}" + (
        f" ({longest['first']}-{longest['last']})" if longest["rounds"] else ""
    )
    lines = [
        f"Summary: {summary['rounds']} rounds, {summary['above-threshold']} above the threshold, "
        f"{summary['moves']} move{'s' * (summary['moves'] != 1)}; {stretch}."
    ]
    if summary["skipped"]:
        lines.append(f"{summary['skipped']} file{'s' * (summary['skipped'] != 1)} skipped (see the lines on stderr).")
    if rounds:
        values = [r["imbalance"] for r in rounds]
        threshold = settings["threshold"]["value"]
        lines.append(
            f"Imbalance, oldest to newest ({min(values):.4f} .. {max(values):.4f}; threshold {threshold:g}): "
            + sparkline(values, SPARKS if unicode else ASCII_SPARKS)
        )
    return lines


def sparkline(values: Sequence[float], levels: str = SPARKS, width: int = SPARK_WIDTH) -> str:
    """``values`` as one character each (at most ``width``: beyond, the highest of each group of
    consecutive values), the lowest level at 0 and the highest at the largest value."""
    if len(values) > width:
        size = -(-len(values) // width)
        values = [max(values[i : i + size]) for i in range(0, len(values), size)]
    top = max(values, default=0.0)
    if top <= 0:
        return levels[0] * len(values)
    return "".join(levels[min(len(levels) - 1, int(value / top * (len(levels) - 1) + 0.5))] for value in values)


def _what_if_lines(review: dict) -> list[str]:
    what_if = review["what-if"]
    changed = [name for name in NAMES if what_if[name]["source"] == "--what-if"]
    asked = ", ".join(f"{name}={shown(what_if[name]['value'])}" for name in changed) or "the same settings"
    lines = [
        f"What-if {asked}, beside the settings above. Each round is judged on its own recorded state:",
        "a move the what-if would have made does not change the later recordings.",
    ]
    differing = [r for r in review["rounds"] if r["what-if"]["differs"]]
    if differing:
        rows = [("round", "settings", "what-if")]
        rows += [(str(r["round"]), outcome(r), outcome({**r["what-if"], "moving": r["moving"]})) for r in differing]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines += ["", *(f"{a:>{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows)]
    summary = review["summary"]
    lines += [
        "",
        f"{summary['differ']} of {summary['rounds']} rounds decided otherwise; the what-if moves "
        f"{summary['what-if-moves']} time{'s' * (summary['what-if-moves'] != 1)} (the settings: {summary['moves']}).",
    ]
    return lines


def outcome(d: dict) -> str:
    """A decision in a few words: the move made, or the gate that stopped it and by how much."""
    gate, best = d["decision"], d["best"]
    if gate == "moved":
        return (
            f"move {best['sid']} {best['source']} -> {best['target']} ({d['imbalance']:.4f} -> {best['imbalance']:.4f})"
        )
    if gate == "margin":
        return f"no move: {best['sid']} -> {best['target']} gains {best['relative']:.1%} < {d['margin']:.0%}"
    if gate == "hold":
        return f"held ({d['held']} of {d['hold']:g})"
    if gate == "threshold":
        return f"under the threshold {d['threshold']:g}"
    if gate == "motion":
        return "motion running"
    return "no candidates"
