"""``crs-bridge review DIR...``: the command line of :mod:`crs_bridge.review`.

Settings come from the command line (``--threshold --margin --hold --method --imbalance``, as
``plan`` and ``explain`` name them), else from datacenter.cfg's ``crs`` property
(``--datacenter-cfg FILE``, default ``/etc/pve/datacenter.cfg`` when readable), in the unit the
pve-cluster that wrote it uses (``--pve-cluster VERSION``, default the installed one), else HA
5.2.0's defaults. ``--what-if k=v,...`` judges every round with changed settings beside them.
Text on stdout (``--json``: the review as JSON), ``--html FILE`` writes a page; a file not
reviewed is a line on stderr. Exit 0; 1 when a file was skipped; 2 for a bad command line or
an unreadable datacenter.cfg given by name.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import review_settings as rs
from .remote import EXIT_OK, EXIT_USAGE, json_dumps, say
from .review import review
from .review_records import read_rounds
from .review_settings import Settings, SettingsError

#: Exit status when a file was not reviewed (the others were).
EXIT_SKIPPED = 1


def add_review_command(commands: Any) -> None:
    """Register ``review`` on the CLI's subcommands."""
    parser = commands.add_parser(
        "review",
        help="what HA decided in each recorded round, and what other settings would have (flight recorder files)",
    )
    parser.add_argument("paths", nargs="+", metavar="DIR", help="a flight recorder directory (or files of one)")
    parser.add_argument("--threshold", help="act only above this imbalance (fraction)")
    parser.add_argument("--margin", help="least relative gain of a move (fraction)")
    parser.add_argument("--hold", help="rounds above the threshold before HA balances (hold duration)")
    parser.add_argument("--method", choices=rs.METHODS, help="scorer")
    parser.add_argument("--imbalance", choices=rs.FORMULAS, help="imbalance formula (default: each recording's)")
    parser.add_argument(
        "--datacenter-cfg",
        metavar="FILE",
        help=f"read the settings from this datacenter.cfg (default {rs.DATACENTER_CFG})",
    )
    parser.add_argument(
        "--pve-cluster",
        metavar="VERSION",
        help="the pve-cluster version that wrote the datacenter.cfg: percent from 9.1.5 (default: the installed one)",
    )
    parser.add_argument(
        "--what-if",
        metavar="K=V,...",
        help="judge every round with these settings too (threshold, margin, hold, method, imbalance)",
    )
    parser.add_argument(
        "--html", metavar="FILE", help="write a self-contained page: the imbalance chart, node loads, the table"
    )
    parser.add_argument(
        "--round", type=int, metavar="N", help="the round whose node loads the page shows first (default: the last)"
    )
    parser.add_argument("--json", action="store_true", help="print the review as JSON instead of text")
    parser.set_defaults(run=run, log_level="warning")


def run(args: argparse.Namespace) -> int:
    """The command: returns its exit status."""
    try:
        settings, notes = settings_of(args)
        what_if = settings.changed(rs.parse_pairs(args.what_if), "--what-if") if args.what_if else None
        rounds, skipped = read_rounds(args.paths)
    except (SettingsError, OSError) as problem:
        say(args, str(problem))
        return EXIT_USAGE
    for note in notes:
        say(args, note)
    if not rounds and not skipped:
        say(args, f"no recording in {', '.join(args.paths)}")
        return EXIT_SKIPPED
    result = review(rounds, skipped, settings, what_if, _progress if sys.stderr.isatty() else None).to_wire()
    for path, why in result_skips(result):
        say(args, f"{path}: skipped: {why}")
    if args.html:
        from .review_html import review_html

        try:
            with open(args.html, "w", encoding="utf-8") as page:
                page.write(review_html(result, args.round))
        except OSError as problem:
            say(args, f"cannot write {args.html}: {problem.strerror or problem}")
            return EXIT_USAGE
    if args.json:
        sys.stdout.write(json_dumps(result, indent=True) + "\n")
    else:
        from .review_text import review_text

        sys.stdout.write(review_text(result, unicode=_can_encode(sys.stdout)))
    return EXIT_SKIPPED if result["skipped"] else EXIT_OK


def result_skips(result: dict) -> list[tuple[str, str]]:
    return [(s["file"], s["reason"]) for s in result["skipped"]]


def settings_of(args: argparse.Namespace) -> tuple[Settings, list[str]]:
    """The review's settings: HA's defaults, then datacenter.cfg's, then the command line's;
    and notes on the datacenter.cfg. SettingsError/OSError for what cannot be used."""
    settings, notes = Settings(), []
    path = args.datacenter_cfg or rs.DATACENTER_CFG
    try:
        with open(path, encoding="utf-8") as cfg:
            text = cfg.read()
    except (OSError, UnicodeDecodeError) as problem:
        if args.datacenter_cfg:
            raise OSError(f"cannot read {path}: {getattr(problem, 'strerror', None) or problem}") from None
        text = None
    if text is not None:
        settings, notes = rs.from_datacenter_cfg(settings, path, text, args.pve_cluster or rs.installed_pve_cluster())
    for name in rs.NAMES:
        value = getattr(args, name)
        if value is not None:
            settings = settings.changed({name: value}, f"--{name}")
    return settings, notes


def _progress(done: int, total: int) -> None:
    """A line on the terminal counting the rounds, cleared once all are done."""
    text = f"\rcrs-bridge review: round {done} of {total}"
    print(text + ("\r\033[K" if done == total else ""), end="", file=sys.stderr, flush=True)


def _can_encode(stream: Any) -> bool:
    try:
        "\u2588".encode(stream.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
