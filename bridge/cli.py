"""The ``crs-bridge`` command (also ``python -m bridge``).

``crs-bridge serve [--trace FILE|-]``
    Serve JSON-RPC 2.0 on stdin/stdout (see :mod:`bridge.server` for framing and exit rules).
``crs-bridge call METHOD [PARAMS]``
    Start a server, send one request, print the answer. PARAMS is inline JSON or ``@file``
    (``@-``: standard input). The result is pretty-printed on stdout (exit 0); an error is
    printed on stderr as ``error CODE: MESSAGE`` plus its data (exit 1). Exit 2: bad command
    line or unreadable PARAMS; exit 3: the server gave no answer.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from .transport import DEFAULT_MAX_MESSAGE_BYTES

EXIT_OK = 0
EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="crs-bridge[%(process)d] %(levelname)s: %(message)s"
    )
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crs-bridge", description="Proxmox VE's CRS over JSON-RPC 2.0 on stdio.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve JSON-RPC on stdin/stdout")
    _common_options(serve)
    serve.add_argument(
        "--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES, help="refuse larger messages (-32600)"
    )
    serve.add_argument("--debug-methods", action="store_true", help=argparse.SUPPRESS)  # test aid: debug.raise
    serve.set_defaults(run=_serve)

    call = commands.add_parser("call", help="send one request to a fresh server and print the answer")
    call.add_argument("method", help="method name, e.g. score_best_balancing_migrations")
    call.add_argument("params", nargs="?", help="params as inline JSON, or @FILE (@- for stdin)")
    _common_options(call)
    call.set_defaults(run=_call)
    return parser


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace", metavar="FILE|-", help="log every request and response with its duration ('-': stderr)"
    )
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def _serve(args: argparse.Namespace) -> int:
    from .server import serve

    options = {"max_message_bytes": args.max_message_bytes, "debug_methods": args.debug_methods}
    if args.trace in (None, "-"):
        return serve(trace=sys.stderr if args.trace else None, **options)
    with open(args.trace, "a", encoding="utf-8") as trace:
        return serve(trace=trace, **options)


def _call(args: argparse.Namespace) -> int:
    try:
        params = _read_params(args.params)
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"crs-bridge call: cannot read PARAMS: {exc}", file=sys.stderr)
        return EXIT_USAGE
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": args.method}
    if params is not None:
        request["params"] = params
    response = _one_request(orjson.dumps(request), args.trace)
    if response is None:
        return EXIT_NO_ANSWER
    if "error" in response:
        _print_error(response["error"])
        return EXIT_RPC_ERROR
    sys.stdout.write(orjson.dumps(response.get("result"), option=orjson.OPT_INDENT_2).decode() + "\n")
    return EXIT_OK


def _read_params(text: str | None) -> Any:
    if text is None:
        return None
    if text.startswith("@"):
        source = text[1:]
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    return orjson.loads(text)


def _one_request(request: bytes, trace: str | None) -> dict | None:
    command = [sys.executable, "-m", "bridge", "serve"] + (["--trace", trace] if trace else [])
    done = subprocess.run(command, input=request + b"\n", stdout=subprocess.PIPE, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        print(f"crs-bridge call: the server gave no answer (exit status {done.returncode})", file=sys.stderr)
        return None
    return orjson.loads(lines[0])


def _print_error(error: dict) -> None:
    print(f"error {error.get('code')}: {error.get('message')}", file=sys.stderr)
    if "data" in error:
        print(orjson.dumps(error["data"], option=orjson.OPT_INDENT_2).decode(), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
