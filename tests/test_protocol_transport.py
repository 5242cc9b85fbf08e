"""Framing and process lifecycle of the real server: both framings, size limit, end of input,
``shutdown``, SIGTERM, stdout carrying protocol only, and the size of the input pipe."""

from __future__ import annotations

import fcntl
import os
import signal

import orjson
import pytest

from crs_bridge.bridge.transport import PIPE_BYTES, BriefPoll, FrameReader, cpu_free, enlarge_pipe
from crs_bridge.client import CONTENT_LENGTH, NDJSON, BridgeClient

INFO = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "bridge.info"})


def request(ident, method="bridge.info", params=None) -> bytes:
    return orjson.dumps(BridgeClient.message(method, params, ident))


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient(["--max-message-bytes", "4096"]) as client:
        yield client


def test_content_length_framing_is_answered_in_kind(bridge):
    bridge.send_raw(request("lsp"), framing=CONTENT_LENGTH)
    framing, body = bridge.read_raw()
    assert framing == CONTENT_LENGTH and orjson.loads(body)["id"] == "lsp"


def test_framing_is_detected_per_message(bridge):
    bridge.send_raw(request(1), framing=NDJSON)
    bridge.send_raw(request(2), framing=CONTENT_LENGTH)
    bridge.send_raw(b"\n\r\n" + request(3), framing=NDJSON)  # blank lines are skipped
    bridge.send_raw(
        b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(request(4))
        + request(4),
        framing=NDJSON,
    )
    answers = [bridge.read_raw() for _ in range(4)]
    assert [(f, orjson.loads(b)["id"]) for f, b in answers] == [
        (NDJSON, 1),
        (CONTENT_LENGTH, 2),
        (NDJSON, 3),
        (CONTENT_LENGTH, 4),
    ]


def test_lsp_body_may_hold_newlines(bridge):
    body = b'{\n  "jsonrpc": "2.0",\n  "id": 5,\n  "method": "bridge.info"\n}'
    bridge.send_raw(body, framing=CONTENT_LENGTH)
    assert bridge.read()["id"] == 5


@pytest.mark.parametrize("framing", [NDJSON, CONTENT_LENGTH])
def test_message_over_the_limit_is_refused_and_serving_goes_on(bridge, framing):
    big = request(6, "bridge.info", {"padding": "x" * 10_000})
    bridge.send_raw(big, framing=framing)
    got_framing, body = bridge.read_raw()
    answer = orjson.loads(body)
    assert got_framing == framing
    assert answer["error"]["code"] == -32600 and "exceeds the limit of 4096 bytes" in answer["error"]["message"]
    assert bridge.call("bridge.info")["limits"]["max_message_bytes"] == 4096


def test_end_of_input_answers_everything_read_then_exits_0():
    with BridgeClient() as client:
        # Written in one go, the last one without a final newline, before reading anything.
        client.process.stdin.write(b"\n".join(request(i) for i in range(50)))
        assert client.close() == 0
        answers = [client.read() for _ in range(50)]
        assert [a["id"] for a in answers] == list(range(50))
        assert client.process.stdout.read() == b""


def test_shutdown_answers_its_message_then_exits_0_ignoring_the_rest():
    with BridgeClient() as client:
        batch = orjson.dumps(
            [BridgeClient.message("shutdown", None, "bye"), BridgeClient.message("bridge.info", None, "info")]
        )
        client.process.stdin.write(batch + b"\n" + request("after") + b"\n")
        client.process.stdin.flush()
        assert client.process.wait(10) == 0  # stdin still open: the server left on its own
        answers = client.read()
        assert {a["id"] for a in answers} == {"bye", "info"}
        assert client.process.stdout.read() == b""


def test_sigterm_exits_promptly_with_status_0():
    with BridgeClient() as client:
        assert client.call("bridge.info")["schedulers"] == 0
        client.process.send_signal(signal.SIGTERM)
        assert client.process.wait(10) == 0


def test_stdout_carries_protocol_only_even_when_tracing_to_stderr():
    with BridgeClient(["--trace", "-", "--log-level", "debug"]) as client:
        client.process.stdin.write(b"".join(request(i) + b"\n" for i in range(3)) + b"not json\n")
        assert client.close() == 0
        out = client.process.stdout.read()
        answers = [orjson.loads(line) for line in out.splitlines()]
        assert [a["id"] for a in answers] == [0, 1, 2, None]
        assert all(a["jsonrpc"] == "2.0" for a in answers)
        trace = client.stderr()
        assert trace.count("-->") == 4 and trace.count("<--") == 4 and " ms " in trace


def _pipe_bytes(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)


def test_enlarge_pipe_sets_the_capacity_and_refuses_what_is_no_pipe(tmp_path):
    read_end, write_end = os.pipe()
    try:
        if _pipe_bytes(read_end) >= PIPE_BYTES:
            pytest.skip("this system's pipes start at the size asked for")
        assert enlarge_pipe(read_end) is True
        assert _pipe_bytes(write_end) == PIPE_BYTES  # one pipe: the writer's end sees it too
    finally:
        os.close(read_end)
        os.close(write_end)
    with open(tmp_path / "plain", "wb") as plain:
        assert enlarge_pipe(plain.fileno()) is False


def test_the_server_enlarges_its_input_pipe():
    with BridgeClient() as client:
        if _pipe_bytes(client.process.stdin.fileno()) >= PIPE_BYTES:
            pytest.skip("this system's pipes start at the size asked for")
        client.call("bridge.info")  # answered: the server is past its start
        assert _pipe_bytes(client.process.stdin.fileno()) == PIPE_BYTES


def test_content_length_of_thousands_of_digits_is_read_as_a_number():
    """Python refuses to convert over 4300 digits: the server used to fail on such a header."""
    with BridgeClient() as client:
        client.send_raw(b"Content-Length: " + b"0" * 5000 + b"%d\r\n\r\n" % len(INFO) + INFO, framing=NDJSON)
        assert client.read()["id"] == 1
        client.send_raw(b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n" + INFO, framing=NDJSON)
        refused = client.read()
        assert refused["error"]["code"] == -32600 and "exceeds the limit" in refused["error"]["message"]
        assert client.close() == 0


@pytest.mark.parametrize(
    ("loadavg", "cpus", "free"),
    [
        (b"0.10 0.20 0.30 2/345 999\n", 2, True),  # the poller and its client: each has a CPU
        (b"0.10 0.20 0.30 3/345 999\n", 2, False),  # one task more waits for a CPU
        (b"0.10 0.20 0.30 1/345 999\n", 1, True),
        (b"", 8, False),  # unreadable: never poll
        (b"0.10 0.20 0.30 x/345 999\n", 8, False),
    ],
)
def test_cpu_free_compares_the_running_tasks_with_the_cpus(loadavg, cpus, free):
    assert cpu_free(loadavg, cpus) is free


@pytest.fixture
def pipe():
    """A pipe's (read end, write end), closed afterwards."""
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def test_brief_poll_returns_with_input_waiting_and_reads_none_of_it(pipe):
    read_end, write_end = pipe
    poll = BriefPoll(read_end)
    poll()  # nothing waiting: returns all the same (at once or after polling briefly)
    os.write(write_end, b"next request\n")
    poll()
    assert os.get_blocking(read_end)  # the descriptor's mode is left alone
    assert os.read(read_end, 100) == b"next request\n"


def test_brief_poll_never_fails_when_the_load_cannot_be_read(pipe, monkeypatch, tmp_path):
    # An open /proc/loadavg that stops being readable (lxcfs restarted under a container:
    # ENOTCONN) must not end the server: it only stops polling. A directory opens, then fails
    # to read (EISDIR).
    monkeypatch.setattr("crs_bridge.bridge.transport._LOADAVG", str(tmp_path))
    read_end, write_end = pipe
    poll = BriefPoll(read_end)
    poll()
    os.write(write_end, b"next request\n")
    poll()
    assert os.read(read_end, 100) == b"next request\n"


def test_frame_reader_is_drained_only_once_every_message_read_was_yielded(pipe):
    # The server writes a message's answer at once when the reader is drained (nothing read
    # waits): that must not hold while another message, whole or in part, has been read.
    read_end, write_end = pipe
    reader = FrameReader(read_end, 4096)
    os.write(write_end, b'{"a":1}\n{"b":2}\n{"c"')
    assert next(reader).body == b'{"a":1}'
    assert not reader.drained()  # a whole message waits
    assert next(reader).body == b'{"b":2}'
    assert not reader.drained()  # part of one waits
    os.write(write_end, b":3}\n")
    assert next(reader).body == b'{"c":3}'
    assert reader.drained()


def test_frame_reader_with_a_body_to_skip_is_not_drained(pipe):
    # A Content-Length message over the limit is yielded before its body is skipped (read or
    # not): the refusal then waits for the reader's next read, as before.
    read_end, write_end = pipe
    reader = FrameReader(read_end, 30)
    os.write(write_end, b"Content-Length: 40\r\n\r\n")
    frame = next(reader)
    assert frame.body is None and frame.size == 40
    assert not reader.drained()
    os.write(write_end, b"x" * 40 + b'{"d":4}\n')
    assert next(reader).body == b'{"d":4}'
    assert reader.drained()
