"""Two source trees' servers, the same few thousand messages, the same answer bytes?

A differential check for changes that must keep every answer and error byte for byte (a
refactoring of the wire layer): one ``crs-bridge serve`` per tree (the tree through PYTHONPATH,
the Python of this checkout's venv), fed the same stream of messages, their whole outputs
compared. The stream holds, after a session that sets up live schedulers: requests drawn from
every method's params model (``tests/test_wire.py``'s strategies: valid, at and beyond the bounds,
lax forms, wrong types, named and positional), the fuzzer's templates with random values in every
position, random envelopes, batches, ids of every JSON type (integers beyond 64 bits too), random
and mutated bytes, Content-Length framings with odd headers and oversize bodies, ``rpc.discover``.
The stream is run three times: with the default limits and with low ones (sizes, and a depth just
under and at that of the deepest valid batch, 7).

Run: ``.venv/bin/python benchmarks/diff_trees.py BASE_TREE .`` (``--examples N`` per strategy,
default 400). Exit status 0 when every output is the same; else the first difference is shown.
Generation is derandomized: the same trees give the same stream.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from trees import python_path  # noqa: E402

from tests import test_hardening_fuzz as fuzz  # noqa: E402
from tests import test_wire as wire  # noqa: E402

GiB = 1 << 30
MAX_MESSAGE = 1 << 20
LOW_SIZES = ["--max-nodes", "2", "--max-resources", "3", "--max-candidates", "4"]
#: The servers' flags of each run of the stream: default limits, then low ones.
LIMIT_SETS = [[], ["--max-json-depth", "6", *LOW_SIZES], ["--max-json-depth", "7", *LOW_SIZES]]


def message(method: str, params: Any, ident: Any = 1) -> dict:
    request: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": ident}
    if params is not None:
        request["params"] = params
    return request


def line(value: Any) -> bytes:
    return fuzz.encode(value).replace(b"\n", b" ") + b"\n"


class Handles:
    """The fuzzer's templates want ``S`` and ``D``: live static and dynamic handles."""

    S, D = "S", "D"


def setup_session() -> list[bytes]:
    """Live schedulers under the handles the strategies use: S/A static, D/B dynamic."""
    out = []
    for handle, mode in (("S", "static"), ("A", "static"), ("D", "dynamic"), ("B", "dynamic")):
        out.append(line(message("scheduler.new", {"mode": mode, "scheduler": handle})))
        for i, name in enumerate(["n1", "n2", "n3", "A", "B", "C"]):
            if mode == "static":
                out.append(line(message("scheduler.add_node", [handle, name, 4 * (i + 1), 16 * GiB])))
            else:
                stats = {"cpu": 1.5 * i, "maxcpu": 8, "mem": i * GiB, "maxmem": 32 * GiB}
                out.append(line(message("scheduler.add_node", [handle, name, stats])))
        for sid, node in [("vm:1", "n1"), ("vm:2", "A"), ("vm:3", "n2")]:
            if mode == "static":
                out.append(line(message("scheduler.add_service", [handle, sid, fuzz.service(node)])))
            else:
                out.append(line(message("scheduler.add_resource", [handle, sid, fuzz.resource(node)])))
    return out


def collect(strategy: st.SearchStrategy, examples: int) -> list[Any]:
    drawn: list[Any] = []

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(value: Any) -> None:
        drawn.append(value)

    draw()
    return drawn


@st.composite
def fuzzed_template(draw: Any) -> tuple[str, Any]:
    """A fuzzer template with random values put, removed or added (as the fuzz test does)."""
    method, params = draw(st.sampled_from(fuzz.templates(Handles)))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(fuzz.positions(params)))
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "remove" and path:
            params = fuzz.removed(params, path)
        elif action == "add" and isinstance(fuzz._at(params, path), dict):
            key = draw(st.sampled_from(["scheduler", "limit", "stats", "cpu", "x"]) | st.text(max_size=8))
            params = fuzz.replaced(params, (*path, key), draw(fuzz.json_values))
        else:
            params = fuzz.replaced(params, path, draw(fuzz.json_values))
    return method, params


@st.composite
def envelope(draw: Any) -> Any:
    request = draw(st.dictionaries(st.text(max_size=6), fuzz.json_values, max_size=2))
    for key, valid in (("jsonrpc", "2.0"), ("id", 5), ("method", "scheduler.list_nodes"), ("params", ["S"])):
        choice = draw(st.sampled_from(["absent", "valid", "value"]))
        if choice == "valid":
            request[key] = valid
        elif choice == "value":
            request[key] = draw(fuzz.json_values)
    return request


IDS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -0.0, 1.0, 2**63, 2**64, 1e20, 12345678901234567890123, "x", "", None]),
    st.text(max_size=5),
)


def framed(body: bytes, framing: str) -> bytes:
    return fuzz.frame(body, framing)


def stream(examples: int) -> tuple[list[bytes], int]:
    """The messages, each as sent (framed), and how many there are."""
    not_shutdown = wire.REQUESTS.filter(lambda drawn: drawn[0].name != "shutdown")
    out = setup_session()
    for n, ((spec, params), ident, framing) in enumerate(
        collect(st.tuples(not_shutdown, IDS, fuzz.framings), examples * 3)
    ):
        out.append(framed(fuzz.encode(message(spec.name, params, ident)), framing))
        if n % 100 == 0:  # schedulers a drawn request freed come back
            out += setup_session()
    for (method, params), framing in collect(st.tuples(fuzzed_template(), fuzz.framings), examples * 2):
        if method != "shutdown":
            out.append(framed(fuzz.encode(message(method, params, 7)), framing))
    for requests, batch, framing in collect(
        st.tuples(st.lists(envelope(), min_size=1, max_size=3), st.booleans(), fuzz.framings), examples
    ):
        requests = [r for r in requests if r.get("method") != "shutdown"]
        if requests:
            out.append(framed(fuzz.encode(requests if batch else requests[0]), framing))
    batches = st.lists(not_shutdown.map(lambda d: message(d[0].name, d[1], 3)), min_size=0, max_size=5)
    for requests in collect(batches, examples):
        out.append(line(requests))
    for spec, params in collect(not_shutdown, examples // 4):  # notifications: no answer
        out.append(line({"jsonrpc": "2.0", "method": spec.name, "params": params}))
    for data in collect(_random_bytes(), examples):
        out.append(data.replace(b"\n", b"") + b"\n")
    for data in collect(_framings(), examples):
        out.append(data + b"\n")
    out.append(line(message("rpc.discover", None, "doc")))
    out.append(line(message("rpc.discover", [], 2**65)))
    out.append(line(message("bridge.info", {}, 1.5)))
    out.append(framed(orjson.dumps(message("scheduler.list_nodes", ["S"], "cl")), fuzz.CONTENT_LENGTH))
    out.append(line(message("shutdown", None, "end")))
    return out, len(out)


def _random_bytes() -> st.SearchStrategy:
    valid = fuzz.valid_request
    return st.one_of(
        st.binary(max_size=300),
        st.lists(
            st.tuples(st.integers(0, len(valid)), st.binary(max_size=3), st.integers(0, 3)), min_size=1, max_size=4
        ).map(lambda edits: fuzz._mutate(valid, edits)),
        st.sampled_from([b"NaN", b"[NaN]", b"1e400", b'{"a":', b"[" * 1100, b"[" * 8 + b"]" * 8, b"[]", b"{}" * 3]),
    ).filter(lambda data: fuzz.not_a_header(data))


@st.composite
def _framings(draw: Any) -> bytes:
    """A Content-Length message with odd headers, a bad length, or an oversize body."""
    name, end = draw(fuzz.header_name), draw(fuzz.line_end)
    headers = draw(st.lists(st.sampled_from([b"Content-Type: x", b"X-A: b"]), max_size=2))
    body = draw(st.one_of(st.just(fuzz.valid_request), fuzz.json_values.map(fuzz.encode), st.binary(max_size=100)))
    if draw(st.booleans()):  # oversize: skipped unread
        body = body + b" " * (MAX_MESSAGE + 1 - len(body))
    length = b"%d" % len(body)
    return name + b": " + length + end + b"".join(h + end for h in headers) + end + body


def run(tree: Path, data: Path, extra: list[str]) -> bytes:
    env = dict(os.environ, PYTHONPATH=python_path(tree))
    command = [sys.executable, "-P", "-m", "crs_bridge", "serve", "--max-message-bytes", str(MAX_MESSAGE), *extra]
    with data.open("rb") as stdin:
        done = subprocess.run(command, stdin=stdin, capture_output=True, env=env, cwd=tree, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit status {done.returncode}\n{done.stderr.decode()[-3000:]}")
    return done.stdout


def show_differences(base: bytes, new: bytes, shown: int = 5) -> None:
    """How many output lines differ, and the first ``shown`` of them (each cut around where it
    starts to differ), so that every kind of difference can be told apart and listed."""
    pairs = list(itertools.zip_longest(base.split(b"\n"), new.split(b"\n"), fillvalue=b""))
    differing = [(a, b) for a, b in pairs if a != b]
    documents = sum(b'"openrpc":' in a and b'"openrpc":' in b for a, b in differing)
    print(f"  {len(differing)} of {len(pairs)} lines differ ({documents} of them rpc.discover documents)")
    others = [(a, b) for a, b in differing if not (b'"openrpc":' in a and b'"openrpc":' in b)]
    for a, b in (others or differing)[:shown]:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        for label, line in (("base", a), ("new", b)):
            print(f"  {label} at byte {at}: {line[max(0, at - 200) : at + 200]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--examples", type=int, default=400)
    args = parser.parse_args()
    messages, count = stream(args.examples)
    failed = 0
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        tmp.write(b"".join(messages))
        tmp.flush()
        for extra in LIMIT_SETS:
            outputs = [run(tree.resolve(), Path(tmp.name), extra) for tree in (args.base, args.new)]
            same = outputs[0] == outputs[1]
            answers = outputs[0].count(b'"jsonrpc"')
            print(
                f"limits {' '.join(extra) or 'default'}: {count} messages, {answers} responses, "
                f"{len(outputs[0])} bytes: {'same' if same else 'DIFFERENT'}"
            )
            if not same:
                failed += 1
                show_differences(*outputs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
