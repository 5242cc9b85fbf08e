"""The ``crs-bridge`` command (also ``python -m crs_bridge``).

``crs-bridge serve [--trace FILE|-] [--log-target auto|stderr|syslog] [--client-pid PID]``
    Serve JSON-RPC 2.0 on stdin/stdout (see :mod:`bridge.server` for framing and exit rules).
    Logs go to stderr, or to syslog when stderr is closed or /dev/null (or always, with
    ``--log-target syslog``; see :mod:`crs_bridge.logsink`). With ``--client-pid`` every log line
    names the client, and the server exits once that process is gone (:mod:`crs_bridge.lifeline`).
    Started with stdin or stdout closed, it says so in one log line and exits 1.
``crs-bridge call METHOD [PARAMS]``
    Start a server, send one request, print the answer. PARAMS is inline JSON or ``@file``
    (``@-``: standard input). The result is pretty-printed on stdout (exit 0); an error is
    printed on stderr as ``crs-bridge call: error CODE: MESSAGE`` plus its data (exit 1). Exit 2: bad command
    line or unreadable PARAMS; exit 3: the server gave no answer. An unknown method is answered
    with the close names; PARAMS read from a file (a cluster file holds the params of several
    methods) lose the keys the method does not take but another method does, with a note.
``crs-bridge methods [NAME]``
    List the methods with their summaries, or one method's params (from ``rpc.discover``).
``crs-bridge plan CLUSTER [--method M] [--threshold F] [--margin F] [--max-steps N] [--allow-repeat] [--json]``
    Dry-run the HA manager's rebalancing (``plan_rebalance``): the steps as a table and every
    node's load bar before and after. ``crs-bridge explain CLUSTER [...]``: why the scorer picks
    its move, the runner-up, or why nothing moves (``explain_migrations``). CLUSTER is ``@file``,
    ``@-`` or inline JSON shaped like ``examples/dynamic-cluster.json`` (``usage``,
    ``candidates``, options); flags override the file's options. Both go through a fresh server
    like ``call`` (one validation path, the same numbers as the RPC methods); ``--json`` prints
    the result as JSON; exit codes as ``call``. A threshold or margin that reads as a percentage
    (30, as datacenter.cfg writes it) is refused, naming the fraction meant (0.3). CLUSTER may be
    a flight recorder file: the recorded object at its decision (:mod:`crs_bridge.replay`).
``crs-bridge replay FILE``
    Re-run a flight recorder file on a fresh server, checking every answer bit for bit
    (:mod:`crs_bridge.replay`).
``crs-bridge review DIR [--what-if K=V,...] [--html FILE] [--json] [...]``
    What HA decided in each round a flight recorder directory holds, and what other settings would
    have (:mod:`crs_bridge.review_command`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from . import doctor
from .bridge import __version__
from .bridge.limits import LIMITS, ServerLimits, env_var, flag
from .remote import (
    EXIT_OK,
    EXIT_USAGE,
    call_fresh_server,
    common_options,
    did_you_mean,
    json_dumps,
    read_params,
    say,
)

_LOG_PREFIX = "crs-bridge[%(process)d] "  # syslog's ident says this itself
_LOG_MESSAGE = "%(levelname)s: %(message)s"
_LOG_FORMAT = _LOG_PREFIX + _LOG_MESSAGE

#: ``serve`` started with stdin or stdout closed (as when its streams fail otherwise).
EXIT_STREAMS_CLOSED = 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format=_LOG_FORMAT)
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crs-bridge", description="Proxmox VE's CRS over JSON-RPC 2.0 on stdio.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve JSON-RPC on stdin/stdout")
    common_options(serve)
    for name, default in ServerLimits().as_dict().items():
        serve.add_argument(
            flag(name), type=int, metavar="N", help=f"{LIMITS[name]}; default {default}, or ${env_var(name)}"
        )
    serve.add_argument(
        "--log-target",
        default=os.environ.get("CRS_BRIDGE_LOG_TARGET") or "auto",
        help="where logs go: auto (default: stderr, or syslog when stderr is closed or /dev/null), stderr or"
        " syslog; or $CRS_BRIDGE_LOG_TARGET",
    )
    serve.add_argument(
        "--syslog-socket", default="/dev/log", metavar="PATH", help="syslog's unix datagram socket (default /dev/log)"
    )
    serve.add_argument(
        "--client-pid",
        type=int,
        default=os.environ.get("CRS_BRIDGE_CLIENT_PID") or None,
        metavar="PID",
        help="the client's process id: tags every log line, and the server exits once that process is gone;"
        " or $CRS_BRIDGE_CLIENT_PID",
    )
    serve.add_argument("--debug-methods", action="store_true", help=argparse.SUPPRESS)  # test aid: debug.raise
    serve.set_defaults(run=_serve)

    call = commands.add_parser("call", help="send one request to a fresh server and print the answer")
    call.add_argument("method", help="method name, e.g. score_best_balancing_migrations")
    call.add_argument("params", nargs="?", help="params as inline JSON, or @FILE (@- for stdin)")
    common_options(call)
    call.set_defaults(run=_call)

    methods = commands.add_parser("methods", help="list the methods with their summaries, or one method's params")
    methods.add_argument("name", nargs="?", help="show this method's params")
    common_options(methods)
    methods.set_defaults(run=_methods)
    _add_plan_commands(commands)
    from .replay import add_replay_command

    add_replay_command(commands)
    from .review_command import add_review_command

    add_review_command(commands)
    doctor.add_parser(commands)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from . import logsink
    from .bridge.server import Terminated, serve

    # Before any file is opened: a closed fd 0 or 1 would be the next file's, the trace's say.
    closed = _closed_stdio()
    try:
        limits = _limits(args)
        # stderr may be a pipe nobody reads: logging (and a trace to '-') must never block serving.
        sink = logsink.open_sink(args.log_target, args.syslog_socket)
    except ValueError as exc:
        print(f"crs-bridge serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logsink.install(args.log_level, _serve_log_format(sink, args.client_pid), sink)
    if closed:
        log = logging.getLogger("crs-bridge")
        log.error("cannot serve: %s is closed (start it with stdin and stdout open)", closed)
        sink.close()
        return EXIT_STREAMS_CLOSED
    stop_watch = lambda: None  # noqa: E731
    options = {"limits": limits, "debug_methods": args.debug_methods}
    try:
        try:
            if args.client_pid is not None:
                from . import lifeline

                # Until serve() installs its own handler, the watch's SIGTERM (a client gone
                # already, or during the start) must end the server as cleanly: caught below.
                signal.signal(signal.SIGTERM, _terminate_start)
                stop_watch = lifeline.watch(args.client_pid)
            if args.trace in (None, "-"):
                return serve(trace=sink if args.trace else None, **options)
            with open(args.trace, "a", encoding="utf-8") as trace:
                return serve(trace=trace, **options)
        finally:
            stop_watch()
    except Terminated:  # the client ended before serving began, or just as the server was leaving
        return 0
    finally:
        sink.close()


def _closed_stdio() -> str | None:
    """The name of the first of stdin and stdout that the process was started without, or None."""
    for name, fd in (("stdin", 0), ("stdout", 1)):
        try:
            os.fstat(fd)
        except OSError:
            return name
        if getattr(sys, name) is None:  # closed at start-up, and the fd taken since
            return name
    return None


def _terminate_start(signum: int, frame: object) -> None:
    from .bridge.server import Terminated

    raise Terminated


def _serve_log_format(sink: object, client_pid: int | None) -> str:
    """The server's log line format: syslog's ident already names crs-bridge and its pid."""
    from .logsink import SyslogSink

    client = "" if client_pid is None else f"[client {client_pid}] "
    return ("" if isinstance(sink, SyslogSink) else _LOG_PREFIX) + client + _LOG_MESSAGE


def _limits(args: argparse.Namespace) -> ServerLimits:
    """The environment's limits (CRS_BRIDGE_MAX_*), overridden by the command line's."""
    given = {name: getattr(args, name) for name in ServerLimits().as_dict() if getattr(args, name) is not None}
    return dataclasses.replace(limits_from_env(), **given)


def limits_from_env(environ: Mapping[str, str] = os.environ) -> ServerLimits:
    """Defaults overridden by the ``CRS_BRIDGE_MAX_*`` variables set in ``environ``
    (ValueError naming the variable for a value that is not a positive integer in range)."""
    values: dict[str, int] = {}
    for name in ServerLimits().as_dict():
        text = environ.get(env_var(name), "").strip()
        if text:
            try:
                values[name] = int(text)
            except ValueError:
                raise ValueError(f"{env_var(name)} must be a positive integer, got {text!r}") from None
    try:
        return ServerLimits(**values)
    except ValueError as exc:
        raise ValueError(f"{exc} (from the environment)") from None


def _call(args: argparse.Namespace) -> int:
    try:
        params = read_params(args.params)
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or (UnicodeDecodeError) not UTF-8
        say(args, f"cannot read PARAMS: {exc}")
        return EXIT_USAGE
    from_file = args.params is not None and args.params.startswith("@")
    status, result = call_fresh_server(args, args.method, params, from_file)
    if status == EXIT_OK:
        _print_json(result)
    return status


def _print_json(value: Any) -> None:
    sys.stdout.write(json_dumps(value, indent=True) + "\n")


def _methods(args: argparse.Namespace) -> int:
    from .render import method_text, methods_text

    status, document = call_fresh_server(args, "rpc.discover", None)
    if status != EXIT_OK:
        return status
    methods = {method["name"]: method for method in document["methods"]}
    if args.name is None:
        sys.stdout.write(methods_text(methods.values()))
    elif args.name in methods:
        sys.stdout.write(method_text(methods[args.name]))
    else:
        say(args, f"no method {args.name!r}; {did_you_mean(args.name, list(methods))}")
        return EXIT_USAGE
    return EXIT_OK


# -- plan and explain: readable views of plan_rebalance and explain_migrations ----------------

#: Keys of a cluster file that belong to the single-move methods, not to plan/explain (explain
#: takes ``--limit`` instead: a file's ``limit`` is for scoring, explain shows one HA decision;
#: ``stats`` is the guest of ``score_nodes_to_start_resource``).
_SCORING_ONLY = ("limit", "imbalance_threshold", "stats")
#: Options that are fractions: a margin is a relative gain (at most 1), and a threshold above the
#: largest imbalance the cluster's nodes can have would never let anything move. Past those they
#: read as the percentages datacenter.cfg writes since pve-cluster 9.1.5 (30 and 10), which HA
#: 5.2.0 would take as fractions.
_FRACTIONS = ("threshold", "margin")
#: The default of every plan/explain option: not given on the command line. None is a given value
#: ('none': no limit, no check) and overrides the file's option like any other.
_UNSET = object()


def _add_plan_commands(commands: Any) -> None:
    plan = commands.add_parser(
        "plan", help="dry-run the HA manager's rebalancing: the moves it would make, round after round"
    )
    _cluster_options(plan)
    plan.add_argument(
        "--threshold", type=_number, default=_UNSET, help="act only above this imbalance (fraction; default 0.3)"
    )
    plan.add_argument(
        "--margin", type=_number, default=_UNSET, help="least relative gain of a move (fraction; default 0.1)"
    )
    plan.add_argument(
        "--max-steps", type=_count_or_none, default=_UNSET, help="at most N moves ('none': no limit; default 10)"
    )
    plan.add_argument("--allow-repeat", action="store_true", default=_UNSET, help="a bundle that moved may move again")
    plan.set_defaults(run=_plan_command, rpc_method="plan_rebalance", kind="plan")

    explain = commands.add_parser("explain", help="why the scorer picks its move, the runner-up, or why nothing moves")
    _cluster_options(explain)
    explain.add_argument(
        "--threshold",
        type=_number_or_none,
        default=_UNSET,
        help="act only above this imbalance (default 0.3; 'none': no check)",
    )
    explain.add_argument(
        "--margin", type=_number_or_none, default=_UNSET, help="least relative gain (default 0.1; 'none': no check)"
    )
    explain.add_argument("--limit", type=int, default=1, help="explain the top N choices (default 1, as one HA round)")
    explain.set_defaults(run=_plan_command, rpc_method="explain_migrations", kind="explain")


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", help="@FILE (@- for stdin) or inline JSON: {usage, candidates, options...}")
    parser.add_argument("--method", choices=["bruteforce", "topsis"], help="scorer (default bruteforce)")
    parser.add_argument("--imbalance", choices=["normalized", "raw"], help="imbalance formula (default raw)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of text")
    common_options(parser)


def _number(text: str) -> float:
    # NaN and infinities would reach the server as null; the server checks the range itself.
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _number_or_none(text: str) -> float | None:
    return None if text.lower() == "none" else _number(text)


def _count_or_none(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'none', got {text!r}") from None


def _plan_command(args: argparse.Namespace) -> int:
    try:
        params = _cluster_params(args)
    except (OSError, ValueError) as exc:
        say(args, f"cannot read CLUSTER: {exc}")
        return EXIT_USAGE
    problems = _percentages(args, params)
    for problem in problems:
        say(args, problem)
    if problems:
        return EXIT_USAGE
    from .replay import remote_call  # a flight recorder file is the recorded object at its decision

    status, result = remote_call(args, args.rpc_method, params)
    if status != EXIT_OK:
        return status
    if args.json:
        _print_json(result)
        return EXIT_OK
    from .render import explanation_text, plan_text

    sys.stdout.write(plan_text(result) if args.kind == "plan" else explanation_text(result))
    return EXIT_OK


def _cluster_params(args: argparse.Namespace) -> dict:
    """The request's params: the cluster file's keys (without the single-move methods' options),
    then the options given on the command line. Unknown keys go to the server, which names them."""
    cluster = read_params(args.cluster)
    if not isinstance(cluster, dict):
        raise ValueError("expected a JSON object with 'usage' and 'candidates'")
    params = {key: value for key, value in cluster.items() if key not in _SCORING_ONLY}
    params.update({key: value for key in ("method", "imbalance") if (value := getattr(args, key)) is not None})
    if args.kind == "plan":
        _given_options(params, args, ("threshold", "margin", "max_steps", "allow_repeat"))
        return params
    from .core.verdicts import HA_MARGIN, HA_THRESHOLD

    # explain checks as an HA round does unless told otherwise (the RPC method's default is no
    # checks); '--threshold none' turns a check off.
    params.setdefault("threshold", HA_THRESHOLD)
    params.setdefault("margin", HA_MARGIN)
    _given_options(params, args, ("threshold", "margin"))
    params["limit"] = args.limit
    return params


def _percentages(args: argparse.Namespace, params: dict) -> list[str]:
    """What is wrong with each option of :data:`_FRACTIONS` above 1 (read as a percentage), and
    the fraction probably meant."""
    problems = []
    for key in _FRACTIONS:
        value = params.get(key)
        if not (isinstance(value, int | float) and value > _largest_fraction(key, params)):
            continue
        on_command_line = getattr(args, key) is not _UNSET

        def shown(number: float, key: str = key, flag: bool = on_command_line) -> str:
            return f"--{key} {number:g}" if flag else f"'{key}': {number:g}"

        where = "" if on_command_line else " in CLUSTER"
        problems.append(
            f"{shown(value)}{where} reads as a percentage ({key}s are fractions here, datacenter.cfg "
            f"writes percent): did you mean {shown(value / 100)}?"
        )
    return problems


def _largest_fraction(key: str, params: dict) -> float:
    """The largest value ``key`` can mean as a fraction: 1 for a margin and for a normalized
    threshold; for a raw threshold the largest raw imbalance of the file's n nodes, sqrt(n - 1)
    (all load on one node), so that 1.2 stays a valid raw threshold on 3 nodes and more."""
    from .core.imbalance import DEFAULT_FORMULA
    from .replay import recorded_node_count

    nodes = params.get("usage", {}).get("nodes") if isinstance(params.get("usage"), dict) else None
    count = len(nodes) if isinstance(nodes, list) else recorded_node_count(params)
    if key == "margin" or params.get("imbalance", DEFAULT_FORMULA) != "raw" or not count:
        return 1.0
    return max(1.0, math.sqrt(count - 1))


def _given_options(params: dict, args: argparse.Namespace, options: Sequence[str]) -> None:
    """Override ``params`` with the options given on the command line, None ('none') included."""
    params.update({key: value for key in options if (value := getattr(args, key)) is not _UNSET})


if __name__ == "__main__":
    sys.exit(main())
