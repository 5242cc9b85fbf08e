"""Faults around the real server process: its client vanishes (stdin closed mid-message, stdout
closed, both), and its stderr is never read. The server must exit cleanly (status 0, no
traceback), never spin, and never let stderr block its protocol work."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from crs_bridge.client import BridgeClient
from tests import ROOT

WAIT = 30  # seconds: a guard against hanging, not a measurement


def request(ident, method="bridge.info", params=None) -> bytes:
    return orjson.dumps(BridgeClient.message(method, params, ident)) + b"\n"


def state(pid: int) -> str:
    """The process state letter from /proc (R running, S sleeping, ...)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_stdin_closed_mid_message_answers_what_it_read_and_exits_0():
    with BridgeClient() as client:
        client.process.stdin.write(request(1) + b'{"jsonrpc": "2.0", "id": 2, "method": "bridge.in')
        assert client.close() == 0
        answers = [client.read(), client.read()]
        assert answers[0]["id"] == 1 and answers[1]["error"]["code"] == -32700
        assert "Traceback" not in client.stderr()


def test_stdin_closed_mid_content_length_body_exits_0():
    with BridgeClient() as client:
        client.process.stdin.write(b"Content-Length: 500\r\n\r\n" + request(1)[:20])
        assert client.close() == 0
        assert client.read()["error"]["code"] == -32700  # the body as far as it came
        assert "Traceback" not in client.stderr()


def test_stdout_closed_by_the_client_exits_0_quietly():
    with BridgeClient() as client:
        assert client.call("bridge.info")["name"] == "crs-bridge"
        client.process.stdout.close()  # the reader is gone: the next write fails with EPIPE
        try:
            for i in range(200):
                client.process.stdin.write(request(i, "rpc.discover"))
            client.process.stdin.flush()
        except BrokenPipeError:
            pass  # the server already left
        assert client.process.wait(WAIT) == 0
        assert "Traceback" not in client.stderr()
        client.process.stdout = open(os.devnull, "rb")  # noqa: SIM115 (closed by BridgeClient)


def test_client_gone_entirely_mid_message_exits_0_quietly():
    with BridgeClient() as client:
        client.process.stdin.write(request(1, "rpc.discover") * 50 + b'{"jsonrpc": "2.0", "id": 3')
        client.process.stdin.flush()
        client.process.stdout.close()
        client.process.stdin.close()
        assert client.process.wait(WAIT) == 0
        assert "Traceback" not in client.stderr()
        client.process.stdout = open(os.devnull, "rb")  # noqa: SIM115 (closed by BridgeClient)


def test_idle_server_whose_stdout_is_closed_sleeps_instead_of_spinning():
    with BridgeClient() as client:
        client.call("bridge.info")
        client.process.stdout.close()
        samples = []
        for _ in range(20):
            samples.append(state(client.process.pid))
            time.sleep(0.05)  # spread the samples; a spinning server is R in nearly all of them
        assert samples.count("R") <= 5, samples  # blocked reading stdin, not looping
        client.process.stdout = open(os.devnull, "rb")  # noqa: SIM115 (closed by BridgeClient)
        assert client.close() == 0


@pytest.mark.parametrize("extra", [[], ["--trace", "-"]], ids=["errors-logged", "traced"])
def test_stderr_nobody_reads_never_blocks_serving(extra):
    """Each debug.raise logs a traceback (and a trace logs every message): far more than a pipe
    holds. The server must answer every request all the same."""
    count = 3000
    process = subprocess.Popen(
        [sys.executable, "-m", "crs_bridge", "serve", "--debug-methods", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # never read until the end
        cwd=ROOT,
    )
    payload = b"".join(request(i, "debug.raise") for i in range(count)) + request("last")

    def feed() -> None:
        process.stdin.write(payload)
        process.stdin.close()

    writer = threading.Thread(target=feed)
    writer.start()
    answers = [orjson.loads(line) for line in iter(process.stdout.readline, b"")]  # EOF: the server left
    writer.join(WAIT)
    assert process.wait(WAIT) == 0
    assert len(answers) == count + 1
    assert all(a["error"]["code"] == -32603 for a in answers[:-1]) and answers[-1]["result"]["name"] == "crs-bridge"
    log = process.stderr.read().decode("utf-8", "replace")
    assert "Traceback" in log  # it logged while it could
    assert len(log) < count * 1000  # and dropped what the pipe could not take
    process.stdout.close()
    process.stderr.close()


def test_stderr_closed_by_the_client_changes_nothing():
    process = subprocess.Popen(
        [sys.executable, "-m", "crs_bridge", "serve", "--debug-methods", "--log-level", "debug", "--trace", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    process.stderr.close()  # every log write now fails with EPIPE
    payload = b"".join(request(i, "debug.raise" if i % 2 else "bridge.info") for i in range(200))
    out, _ = process.communicate(payload, timeout=WAIT)
    answers = [orjson.loads(line) for line in out.splitlines()]
    assert process.returncode == 0 and [a["id"] for a in answers] == list(range(200))
    assert all(("error" in a) == (a["id"] % 2 == 1) for a in answers)


#: The installed command, as the Perl client and an operator start it.
COMMAND = str(Path(sys.executable).parent / "crs-bridge")


@pytest.mark.parametrize(("closing", "stream"), [("<&-", "stdin"), (">&-", "stdout"), ("<&- >&-", "stdin")])
def test_serve_started_without_stdin_or_stdout_says_so_in_one_line_and_exits_1(closing, stream):
    """Started with fd 0 or 1 closed, the server cannot serve: one line naming the stream on
    stderr (no traceback), exit 1, and nothing written anywhere as protocol."""
    shell = f'exec "$0" serve {closing}'
    done = subprocess.run(
        ["sh", "-c", shell, COMMAND], input=request(1), capture_output=True, timeout=WAIT, cwd=ROOT, check=False
    )
    said = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b""
    assert len(said.splitlines()) == 1 and "Traceback" not in said
    assert f"{stream} is closed" in said and said.startswith("crs-bridge[")
