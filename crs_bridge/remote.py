"""What the commands that ask a server share: a fresh server asked one request at a time, one
remote call with its error printed, reading params, JSON text, exit statuses and common options.

:mod:`crs_bridge.cli` and :mod:`crs_bridge.replay` both use it; neither imports the other's
private parts.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import orjson

#: Exit statuses of the commands: done; the server answered an error; bad command line or
#: unreadable input; the server gave no answer.
EXIT_OK = 0
EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 3


def common_options(parser: argparse.ArgumentParser) -> None:
    """Add the options every command has: ``--trace`` and ``--log-level``."""
    parser.add_argument(
        "--trace", metavar="FILE|-", help="log every request and response with its duration ('-': stderr)"
    )
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def say(args: argparse.Namespace, text: str) -> None:
    """One line on stderr, prefixed with the command that says it (``crs-bridge plan: ...``)."""
    print(f"crs-bridge {args.command}: {text}", file=sys.stderr)


def read_params(text: str | None) -> Any:
    """Params from the command line: inline JSON, ``@FILE`` or ``@-`` (standard input); None if
    not given. ValueError for text that is not JSON (naming a file given without ``@``)."""
    if text is None:
        return None
    if text.startswith("@"):
        source = text[1:]
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as file:
                text = file.read()
    try:
        return json_loads(text)
    except ValueError:
        if os.path.isfile(text):
            raise ValueError(f"{text!r} is the name of a file: write @{text} to read it") from None
        raise


def json_loads(text: str | bytes) -> Any:
    """JSON text as Python values; integers beyond 64 bits stay integers (orjson reads them as
    floats, so a text that may hold one, a run of 20 digits, is read by the json module)."""
    value = orjson.loads(text)
    digits = re.search(rb"\d{20}" if isinstance(text, bytes) else r"\d{20}", text)
    return value if digits is None else json.loads(text)


def json_dumps(value: Any, indent: bool = False) -> str:
    """``value`` as JSON text; integers beyond 64 bits, which orjson cannot write, by the json module."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else None).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, indent=2 if indent else None)


class Server:
    """A fresh server for one command (``--trace`` passed on; its stderr is the command's), asked
    one request at a time; :attr:`methods` asks it for its methods when first needed."""

    def __init__(self, trace: str | None) -> None:
        from .client import BridgeClient

        command = [sys.executable, "-P", "-m", "crs_bridge", "serve", *(["--trace", trace] if trace else [])]
        self.client = BridgeClient(command=command, timeout=None, capture_stderr=False)

    def ask(self, method: str, params: Any) -> dict | None:
        """The response to one request, or None if the server ended without answering."""
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            request["params"] = params
        try:
            self.client.send_raw(json_dumps(request).encode())
            return json_loads(self.client.read_raw()[1])
        except (EOFError, BrokenPipeError):
            return None

    @functools.cached_property
    def methods(self) -> dict[str, dict] | None:
        """The server's methods by name (its ``rpc.discover`` document), or None without an answer."""
        response = self.ask("rpc.discover", None)
        if response is None or "result" not in response:
            return None
        return {method["name"]: method for method in response["result"]["methods"]}

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)


def call_fresh_server(
    args: argparse.Namespace,
    method: str,
    params: Any,
    from_file: bool = False,
    prepare: Callable[[Server], dict] | None = None,
) -> tuple[int, Any]:
    """Send one request to a fresh server: (EXIT_OK, result), or an exit status and None after
    printing the error (or the lack of an answer) on stderr, with the close method names when
    the method is unknown. ``from_file``: params from a file, see :func:`_params_taken`.
    ``prepare``: sets the server up first and returns params to add (exceptions pass through)."""
    with Server(args.trace) as server:
        if from_file and isinstance(params, dict):
            params = _params_taken(args, method, params, server.methods)
        if prepare is not None:
            params = {**params, **prepare(server)}
        response = server.ask(method, params)
        if response is None:
            say(args, f"the server gave no answer (exit status {server.client.close()})")
            return EXIT_NO_ANSWER, None
        if "error" not in response:
            return EXIT_OK, response.get("result")
        error = response["error"]
        say(args, f"error {error.get('code')}: {error.get('message')}")
        if "data" in error:
            print(json_dumps(error["data"], indent=True), file=sys.stderr)
        methods = server.methods if error.get("code") == -32601 else None
        if methods and method not in methods:
            say(args, did_you_mean(method, list(methods)))
        return EXIT_RPC_ERROR, None


def _params_taken(args: argparse.Namespace, method: str, params: dict, methods: dict[str, dict] | None) -> dict:
    """``params`` read from a file without the keys ``method`` does not take but another method
    does (a cluster file holds the params of several methods), saying which; other unknown keys
    stay, for the server to name. Unchanged if the methods are unknown (or ``method`` is)."""
    if methods is None or method not in methods:
        return params
    taken = _param_names(methods[method])
    known = set().union(*map(_param_names, methods.values()))
    left_out = [key for key in params if key not in taken and key in known]
    if left_out:
        them = "them" if len(left_out) > 1 else "it"
        source = "standard input" if args.params == "@-" else args.params[1:]
        say(args, f"not sent from {source}: {', '.join(left_out)} ({method} does not take {them})")
    return {key: value for key, value in params.items() if key not in left_out}


def _param_names(method: dict) -> set[str]:
    return {param["name"] for param in method["params"]}


def did_you_mean(name: str, names: Sequence[str]) -> str:
    """A hint naming up to three methods whose names, or their part after ``scheduler.``, are
    close to ``name`` (difflib's ratio of at least 0.6)."""
    full_names: dict[str, str] = {}
    for full in names:
        full_names.setdefault(full, full)
        full_names.setdefault(full.removeprefix("scheduler."), full)
    close = dict.fromkeys(full_names[match] for match in difflib.get_close_matches(name, list(full_names), n=3))
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return f"{hint}('crs-bridge methods' lists them all)"
