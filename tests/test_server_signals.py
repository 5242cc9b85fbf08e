"""SIGTERM while the server writes answers its client does not read (bridge.server's guarded
writer): the first signal waits for the write, a second one ends the server at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest

INFO = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "bridge.info"}) + b"\n"

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/syscall"), reason="needs Linux /proc")


def _blocked_writing(pid: int, fd: int) -> bool:
    """Whether ``pid`` sits in write(2) on ``fd`` with no SIGTERM left to deliver."""
    with open(f"/proc/{pid}/syscall") as f:
        fields = f.read().split()
    with open(f"/proc/{pid}/status") as f:
        pending = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    term = 1 << (signal.SIGTERM - 1)
    return fields[:2] == ["1", hex(fd)] and not any(p & term for p in pending)


def _wait_until(predicate, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "the server never blocked in its write"
        time.sleep(0.01)


def _protocol_fd(process: subprocess.Popen) -> int | None:
    """The server's fd of the pipe we read its answers from (its private copy of stdout)."""
    pipe = f"pipe:[{os.fstat(process.stdout.fileno()).st_ino}]"
    for fd in os.listdir(f"/proc/{process.pid}/fd"):
        if fd != "1" and os.readlink(f"/proc/{process.pid}/fd/{fd}") == pipe:
            return int(fd)
    return None


def _stuck(process: subprocess.Popen) -> int:
    """Wait until ``process`` blocks writing answers; return the fd it writes."""
    _wait_until(lambda: _protocol_fd(process) is not None and _blocked_writing(process.pid, _protocol_fd(process)))
    return _protocol_fd(process)


@pytest.fixture
def stuck_server():
    """A server blocked writing answers nobody reads (requests keep it writing)."""
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "crs_bridge", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    process.stdin.write(INFO * 2000)
    process.stdin.flush()
    yield process
    process.kill()
    process.wait()


def test_a_second_sigterm_ends_a_write_nobody_reads(stuck_server):
    fd = _stuck(stuck_server)
    stuck_server.send_signal(signal.SIGTERM)
    # Handled (no SIGTERM pending) and back in the same write: the first signal waits for it.
    _wait_until(lambda: _blocked_writing(stuck_server.pid, fd))
    assert stuck_server.poll() is None
    stuck_server.send_signal(signal.SIGTERM)
    assert stuck_server.wait(10) == 0  # without anyone reading


def test_after_the_first_sigterm_the_write_in_progress_completes(stuck_server):
    _stuck(stuck_server)
    stuck_server.send_signal(signal.SIGTERM)
    out = stuck_server.stdout.read()
    assert stuck_server.wait(10) == 0
    lines = out.split(b"\n")
    assert lines[-1] == b""  # no answer cut short
    assert len(lines) > 1 and all(orjson.loads(line)["id"] == 1 for line in lines[:-1])
