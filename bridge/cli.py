"""The ``crs-bridge`` command (also ``python -m crs_bridge``).

``crs-bridge serve [--trace FILE|-]``
    Serve JSON-RPC 2.0 on stdin/stdout (see :mod:`bridge.server` for framing and exit rules).
``crs-bridge call METHOD [PARAMS]``
    Start a server, send one request, print the answer. PARAMS is inline JSON or ``@file``
    (``@-``: standard input). The result is pretty-printed on stdout (exit 0); an error is
    printed on stderr as ``error CODE: MESSAGE`` plus its data (exit 1). Exit 2: bad command
    line or unreadable PARAMS; exit 3: the server gave no answer.
``crs-bridge plan CLUSTER [--method M] [--threshold F] [--margin F] [--max-steps N] [--allow-repeat] [--json]``
    Dry-run the HA manager's rebalancing (``plan_rebalance``): the steps as a table and every
    node's load bar before and after. ``crs-bridge explain CLUSTER [...]``: why the scorer picks
    its move, the runner-up, or why nothing moves (``explain_migrations``). CLUSTER is ``@file``,
    ``@-`` or inline JSON shaped like ``examples/dynamic-cluster.json`` (``usage``,
    ``candidates``, options); flags override the file's options. Both go through a fresh server
    like ``call`` (one validation path, the same numbers as the RPC methods); ``--json`` prints
    the result as JSON; exit codes as ``call``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from . import doctor
from .limits import HELP, ServerLimits, env_var, flag, limits_from_env

_LOG_FORMAT = "crs-bridge[%(process)d] %(levelname)s: %(message)s"

EXIT_OK = 0
EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format=_LOG_FORMAT)
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crs-bridge", description="Proxmox VE's CRS over JSON-RPC 2.0 on stdio.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve JSON-RPC on stdin/stdout")
    _common_options(serve)
    for name, default in ServerLimits().as_dict().items():
        serve.add_argument(
            flag(name), type=int, metavar="N", help=f"{HELP[name]}; default {default}, or ${env_var(name)}"
        )
    serve.add_argument("--debug-methods", action="store_true", help=argparse.SUPPRESS)  # test aid: debug.raise
    serve.set_defaults(run=_serve)

    call = commands.add_parser("call", help="send one request to a fresh server and print the answer")
    call.add_argument("method", help="method name, e.g. score_best_balancing_migrations")
    call.add_argument("params", nargs="?", help="params as inline JSON, or @FILE (@- for stdin)")
    _common_options(call)
    call.set_defaults(run=_call)
    _add_plan_commands(commands)
    doctor.add_parser(commands)
    return parser


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace", metavar="FILE|-", help="log every request and response with its duration ('-': stderr)"
    )
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def _serve(args: argparse.Namespace) -> int:
    from . import logsink
    from .server import serve

    try:
        limits = _limits(args)
    except ValueError as exc:
        print(f"crs-bridge serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # stderr may be a pipe nobody reads: logging (and a trace to '-') must never block serving.
    sink = logsink.install(args.log_level, _LOG_FORMAT)
    options = {"limits": limits, "debug_methods": args.debug_methods}
    try:
        if args.trace in (None, "-"):
            return serve(trace=sink if args.trace else None, **options)
        with open(args.trace, "a", encoding="utf-8") as trace:
            return serve(trace=trace, **options)
    finally:
        sink.close()


def _limits(args: argparse.Namespace) -> ServerLimits:
    """The environment's limits (CRS_BRIDGE_MAX_*), overridden by the command line's."""
    given = {name: getattr(args, name) for name in ServerLimits().as_dict() if getattr(args, name) is not None}
    return dataclasses.replace(limits_from_env(), **given)


def _call(args: argparse.Namespace) -> int:
    try:
        params = _read_params(args.params)
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or (UnicodeDecodeError) not UTF-8
        print(f"crs-bridge call: cannot read PARAMS: {exc}", file=sys.stderr)
        return EXIT_USAGE
    status, result = _remote_call(args.method, params, args.trace)
    if status == EXIT_OK:
        _print_json(result)
    return status


def _read_params(text: str | None) -> Any:
    if text is None:
        return None
    if text.startswith("@"):
        source = text[1:]
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as file:
                text = file.read()
    return _json_loads(text)


def _json_loads(text: str | bytes) -> Any:
    """JSON text as Python values; integers beyond 64 bits stay integers (orjson reads them as
    floats, so a text that may hold one, a run of 20 digits, is read by the json module)."""
    value = orjson.loads(text)
    digits = re.search(rb"\d{20}" if isinstance(text, bytes) else r"\d{20}", text)
    return value if digits is None else json.loads(text)


def _json_dumps(value: Any, indent: bool = False) -> str:
    """``value`` as JSON text; integers beyond 64 bits, which orjson cannot write, by the json module."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else None).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, indent=2 if indent else None)


def _remote_call(method: str, params: Any, trace: str | None) -> tuple[int, Any]:
    """Send one request to a fresh server: (EXIT_OK, result), or an exit status and None after
    printing the error (or the lack of an answer) on stderr."""
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        request["params"] = params
    response = _one_request(_json_dumps(request).encode(), trace)
    if response is None:
        return EXIT_NO_ANSWER, None
    if "error" in response:
        _print_error(response["error"])
        return EXIT_RPC_ERROR, None
    return EXIT_OK, response.get("result")


def _print_json(value: Any) -> None:
    sys.stdout.write(_json_dumps(value, indent=True) + "\n")


def _one_request(request: bytes, trace: str | None) -> dict | None:
    import subprocess  # here, not at the top: `serve` never needs it and starts faster without

    command = [sys.executable, "-P", "-m", "crs_bridge", "serve"] + (["--trace", trace] if trace else [])
    done = subprocess.run(command, input=request + b"\n", stdout=subprocess.PIPE, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        print(f"crs-bridge call: the server gave no answer (exit status {done.returncode})", file=sys.stderr)
        return None
    return _json_loads(lines[0])


def _print_error(error: dict) -> None:
    print(f"error {error.get('code')}: {error.get('message')}", file=sys.stderr)
    if "data" in error:
        print(_json_dumps(error["data"], indent=True), file=sys.stderr)


# -- plan and explain: readable views of plan_rebalance and explain_migrations ----------------

#: Keys of a cluster file that belong to the single-move methods, not to plan/explain (explain
#: takes ``--limit`` instead: a file's ``limit`` is for scoring, explain shows one HA decision).
_SCORING_ONLY = ("limit", "imbalance_threshold")
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
    _common_options(parser)


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
        print(f"crs-bridge {args.kind}: cannot read CLUSTER: {exc}", file=sys.stderr)
        return EXIT_USAGE
    status, result = _remote_call(args.rpc_method, params, args.trace)
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
    cluster = _read_params(args.cluster)
    if not isinstance(cluster, dict):
        raise ValueError("expected a JSON object with 'usage' and 'candidates'")
    params = {key: value for key, value in cluster.items() if key not in _SCORING_ONLY}
    params.update({key: value for key in ("method", "imbalance") if (value := getattr(args, key)) is not None})
    if args.kind == "plan":
        _given_options(params, args, ("threshold", "margin", "max_steps", "allow_repeat"))
        return params
    from .models import HA_MARGIN, HA_THRESHOLD

    # explain checks as an HA round does unless told otherwise (the RPC method's default is no
    # checks); '--threshold none' turns a check off.
    params.setdefault("threshold", HA_THRESHOLD)
    params.setdefault("margin", HA_MARGIN)
    _given_options(params, args, ("threshold", "margin"))
    params["limit"] = args.limit
    return params


def _given_options(params: dict, args: argparse.Namespace, options: Sequence[str]) -> None:
    """Override ``params`` with the options given on the command line, None ('none') included."""
    params.update({key: value for key in options if (value := getattr(args, key)) is not _UNSET})


if __name__ == "__main__":
    sys.exit(main())
