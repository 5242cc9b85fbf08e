"""``crs-bridge serve`` log targets and client watch, end to end (a real server process).

syslog is a unix datagram socket bound by the test (``--syslog-socket``), never the machine's.
What the server logs: an internal error, provoked by the test method ``debug.raise``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

RAISE = b'{"jsonrpc":"2.0","id":1,"method":"debug.raise"}\n'
SERVE = [sys.executable, "-m", "crs_bridge", "serve", "--debug-methods"]


@pytest.fixture
def syslog(tmp_path):
    """A bound unix datagram socket: (its path, the socket)."""
    path = str(tmp_path / "log.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    yield path, sock
    sock.close()


def _provoke(args, stderr, env=None):
    """Run a server with ``args``, make it log an internal error, let it end; return it."""
    process = subprocess.run(
        SERVE + args, input=RAISE, stdout=subprocess.PIPE, stderr=stderr, env=env, timeout=60, check=False
    )
    assert process.returncode == 0
    assert json.loads(process.stdout)["error"]["code"] == -32603
    return process


def test_syslog_target_sends_tagged_messages(syslog):
    path, sock = syslog
    me = os.getpid()  # the client: it must be alive, or the server leaves at once
    _provoke(["--log-target", "syslog", "--syslog-socket", path, "--client-pid", str(me)], subprocess.PIPE)
    message = sock.recv(65536).decode()
    # facility daemon (3) * 8 + severity err (3); the ident names the server's pid
    assert message.startswith("<27>crs-bridge[")
    head, _, text = message.partition("]: ")
    assert head[len("<27>crs-bridge[") :].isdigit()
    assert text.startswith(f"[client {me}] ERROR: internal error (a bug in crs-bridge)")
    assert "debug.raise: deliberate failure" in text  # the traceback comes along


@pytest.mark.parametrize("stderr", [subprocess.DEVNULL, "closed"])
def test_auto_target_uses_syslog_when_stderr_is_unusable(syslog, stderr):
    path, sock = syslog
    if stderr == "closed":
        command = SERVE + ["--syslog-socket", path]
        process = subprocess.run(
            ["sh", "-c", 'exec "$@" 2>&-', "sh", *command], input=RAISE, stdout=subprocess.PIPE, timeout=60, check=False
        )
        assert process.returncode == 0
    else:
        _provoke(["--syslog-socket", path], stderr)
    assert "ERROR: internal error" in sock.recv(65536).decode()


def test_auto_target_keeps_a_usable_stderr(syslog):
    path, sock = syslog
    process = _provoke(["--syslog-socket", path, "--client-pid", str(os.getpid())], subprocess.PIPE)
    assert f"] [client {os.getpid()}] ERROR: internal error (a bug in crs-bridge)" in process.stderr.decode()
    sock.settimeout(0)
    with pytest.raises(BlockingIOError):
        sock.recv(65536)


def test_environment_gives_the_defaults(syslog):
    path, sock = syslog
    env = dict(os.environ, CRS_BRIDGE_LOG_TARGET="syslog", CRS_BRIDGE_CLIENT_PID=str(os.getpid()))
    _provoke(["--syslog-socket", path], subprocess.PIPE, env=env)
    assert f"[client {os.getpid()}] ERROR" in sock.recv(65536).decode()


def test_bad_target_is_a_usage_error():
    process = subprocess.run(SERVE + ["--log-target", "journal"], input=b"", capture_output=True, check=False)
    assert process.returncode == 2
    assert "log target must be one of auto, stderr, syslog, got 'journal'" in process.stderr.decode()


def test_server_exits_when_its_client_is_gone_although_its_input_stays_open():
    client = subprocess.Popen(["sleep", "600"])
    # stdin is a pipe the test keeps open: no end of input ever comes
    server = subprocess.Popen(
        SERVE + ["--client-pid", str(client.pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    server.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"bridge.info"}\n')
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 1  # serving
    client.send_signal(signal.SIGKILL)
    client.wait()
    assert server.wait(timeout=30) == 0
    assert "Traceback" not in server.stderr.read().decode()
    server.stdin.close()


def test_server_exits_at_once_when_its_client_is_gone_already():
    gone = subprocess.Popen(["true"])
    gone.wait()
    server = subprocess.Popen(SERVE + ["--client-pid", str(gone.pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.wait(timeout=30) == 0
    server.stdin.close()
