"""Every answer that differs between two trees' servers, by kind: diff_trees.py's messages (the
same stream, under default and low limits), each answer of one tree set against the other's, and
each difference named by the deliberate change that explains it (jsonrpcserver's answers to what
is not JSON, not a request or an unknown method), or UNEXPLAINED, shown.

    .venv/bin/python benchmarks/answer_kinds.py BEFORE_TREE AFTER_TREE
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diff_trees as dt  # noqa: E402


def frames(out: bytes):
    """The answers' bodies in a server's output (newline or Content-Length framed)."""
    i = 0
    while i < len(out):
        if out.startswith(b"Content-Length:", i):
            head_end = out.index(b"\r\n\r\n", i)
            n = int(out[i + 15 : head_end])
            yield out[head_end + 4 : head_end + 4 + n]
            i = head_end + 4 + n
        else:
            j = out.index(b"\n", i)
            yield out[i:j]
            i = j + 1


REFUSED = {"code": -32600, "message": "Invalid request", "data": "The request failed schema validation"}


def kind_one(a, b):
    if a == b:
        return None
    ea, eb = a.get("error"), b.get("error")
    if ea and eb and a.get("id") == b.get("id"):
        if (
            eb["code"] == -32700
            and eb["message"] == "Parse error"
            and ea["code"] == -32700
            and ea["message"] == f"Parse error: {eb['data']}"
        ):
            return "parse error: text as data"
        if (
            eb["code"] == -32700
            and ea["code"] == -32600
            and ea["message"] == f"Invalid request: {eb.get('data')}"
            and "nested deeper" in eb["data"]
        ):
            return "too deep: -32600 -> -32700, text as data"
        if (
            eb["code"] == -32601
            and eb["message"] == "Method not found"
            and ea["message"].startswith("Method not found: '")
        ):
            return "unknown method: jsonrpcserver's text" + (
                "" if eb.get("data") == ea.get("data") else " (data differs: full name)"
            )
    return "UNEXPLAINED"


def kind(a, b):
    if a == b:
        return None
    if b == {"jsonrpc": "2.0", "error": REFUSED, "id": None}:
        if (
            isinstance(a, dict)
            and a["error"]["code"] == -32600
            and a["error"]["message"].startswith("Invalid request: ")
        ):
            return "invalid request: jsonrpcserver's text"
        if isinstance(a, list) and any(
            isinstance(x, dict) and x.get("error", {}).get("code") == -32600 and x["id"] is None for x in a
        ):
            return "batch with an invalid element: refused whole"
    if isinstance(a, dict) and isinstance(b, dict):
        if "openrpc" in json.dumps(a.get("result", ""))[:200]:
            return "rpc.discover document"
        return kind_one(a, b)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        kinds = {kind_one(x, y) for x, y in zip(a, b)} - {None}
        return "batch: " + ", ".join(sorted(kinds))
    return "UNEXPLAINED"


def main() -> None:
    messages, _ = dt.stream(400)
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        tmp.write(b"".join(messages))
        tmp.flush()
        for extra in dt.LIMIT_SETS:
            compare(Path(tmp.name), extra)


def compare(data: Path, extra: list[str]) -> None:
    """Both trees' answers to the messages in ``data`` under the server flags ``extra``, the
    differences counted by kind."""
    outs = [list(frames(dt.run(Path(tree).resolve(), data, extra))) for tree in sys.argv[1:3]]
    print(f"limits {' '.join(extra) or 'default'}: {len(outs[0])} / {len(outs[1])} answers")
    kinds: collections.Counter = collections.Counter()
    shown = 0
    for a, b in zip(*outs):
        if a == b:
            continue
        found = kind(json.loads(a), json.loads(b))
        kinds[found] += 1
        if "UNEXPLAINED" in found and shown < 5:
            shown += 1
            print("  base:", a[:400])
            print("  new: ", b[:400])
    for found, count in kinds.most_common():
        print(f"  {count:5d}  {found}")


if __name__ == "__main__":
    main()
