"""Message framing on byte streams: newline-delimited JSON and LSP-style Content-Length.

:class:`FrameReader` splits what arrives on a file descriptor into :class:`Frame` objects,
detecting the framing per message: a line starting with ``Content-Length:`` (any case) opens an
LSP header block (``Content-Length: N``, optional other headers, an empty line, then N bytes);
any other non-blank line is one JSON message. Blank lines between messages are skipped.
:class:`FrameWriter` writes each answer in the framing its request came in.

Output is buffered and flushed whenever the reader is about to wait for input (and on close), so
a pipelining client gets answers in large writes while an interactive one never waits for an
answer sitting in a buffer. :class:`BriefPoll` then keeps the reader awake a moment longer, for
the next request of a client that is still working. A message is never written half: a signal
arriving during a write takes effect after it (:meth:`FrameWriter.interrupt`).

:func:`serve_frames` is the serving loop: each frame read is answered by a handler (the
protocol), in the frame's framing.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from . import phases

#: Default limit on one message's size (bytes): ample for 100k candidates.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

NDJSON = "ndjson"
CONTENT_LENGTH = "content-length"

_HEADER = re.compile(rb"content-length:[ \t]*(\d+)[ \t]*\r?$", re.IGNORECASE)
_MAX_HEADER_BYTES = 8192
_READ_SIZE = 1 << 20
_FLUSH_AT = 1 << 20
#: What :func:`enlarge_pipe` asks for: the most an unprivileged process may set by default.
PIPE_BYTES = 1 << 20


def enlarge_pipe(fd: int, size: int = PIPE_BYTES) -> bool:
    """Ask for a pipe buffer of ``size`` bytes on ``fd`` (Linux); False if ``fd`` is no pipe or
    the system refuses.

    With the default 64 KiB a 1.6 MB request crosses the pipe in some 25 rounds of the writer
    filling it and the server being woken to drain it; with 1 MiB in two.
    """
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except (OSError, AttributeError):  # not a pipe, over the user's limit, or not Linux
        return False
    return True


#: How long (seconds) :class:`BriefPoll` polls for input before the reader sleeps in read(2): the
#: client's work between a round's requests up to 4 nodes x 300 guests (docs/performance.md).
POLL_SECONDS = 1e-3
_LOADAVG = "/proc/loadavg"


def cpu_free(loadavg: bytes, cpus: int) -> bool:
    """Whether no runnable task waits for a CPU: the running count of ``loadavg`` (the text of
    /proc/loadavg, whose fourth field is "running/total"; the reader itself included) is at
    most ``cpus``. False for a text it cannot read."""
    fields = loadavg.split()
    try:
        return int(fields[3].split(b"/")[0]) <= cpus
    except (IndexError, ValueError):
        return False


class BriefPoll:
    """Before the server sleeps waiting for its next request, poll for it for up to
    :data:`POLL_SECONDS`, while a CPU is free.

    An HA round is a few requests in quick succession, the client working in between. A process
    that sleeps and is woken costs the round more than the wake-up itself: its CPU may have gone
    idle (a virtual one: left to the host) and its caches gone cold (figures in
    docs/performance.md). On a busy machine polling costs the round instead (a poller competes
    with the process it waits for and loses the priority a sleeper gets when woken), so it polls
    only while /proc/loadavg counts no more running tasks than CPUs (without /proc it never
    polls). The cost: up to :data:`POLL_SECONDS` of CPU per wait.
    """

    def __init__(self, fd: int) -> None:
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        try:
            self._loadavg: int | None = os.open(_LOADAVG, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._loadavg = None

    def __call__(self) -> None:
        """Return once input is waiting, :data:`POLL_SECONDS` have passed, or at once when no
        CPU is free or the load cannot be read. Reads nothing."""
        if self._loadavg is None:
            return
        try:
            loadavg = os.pread(self._loadavg, 128, 0)
        except OSError:  # e.g. lxcfs restarted under a container (ENOTCONN): no polling, no failure
            return
        if not cpu_free(loadavg, self._cpus):
            return
        deadline = time.perf_counter() + POLL_SECONDS
        while not self._poll.poll(0) and time.perf_counter() < deadline:
            pass


@dataclass(frozen=True, slots=True)
class Frame:
    """One message: its ``framing``, its ``body`` (None when it exceeded the size limit and was
    skipped unread) and its ``size`` in bytes."""

    framing: str
    body: bytes | None
    size: int


def _declared_length(digits: bytes) -> int:
    """A Content-Length header's value; a value of over 20 digits (past any size limit) as 2**64,
    since Python refuses to convert more than 4300 digits at all."""
    digits = digits.lstrip(b"0")
    return int(digits or b"0") if len(digits) <= 20 else 1 << 64


class FrameReader:
    """Iterate over the messages arriving on file descriptor ``fd``.

    ``max_message_bytes`` bounds one message body; a longer one is skipped without being kept
    in memory and yielded with ``body=None`` (a line once its end arrived; a Content-Length body
    is skipped after its frame was yielded, so that the refusal is answered first).
    ``before_wait`` is called before every read that may block. At end of input a last line
    without ``\\n`` still counts as a message, and a Content-Length body cut short by the end of
    input is yielded as far as it arrived (it will not parse, and so gets answered with a parse
    error).
    """

    def __init__(self, fd: int, max_message_bytes: int, before_wait: Callable[[], None] = lambda: None) -> None:
        self._fd = fd
        self._max = max_message_bytes
        self._before_wait = before_wait
        self._buf = bytearray()
        self._pos = 0  # start of unconsumed data in _buf
        self._eof = False
        self._skip = 0  # body bytes of a refused Content-Length message still to skip

    def __iter__(self) -> Iterator[Frame]:
        return self

    def drained(self) -> bool:
        """Whether every byte read so far belongs to a message already yielded (and no body
        waits to be skipped): the next message starts with a read."""
        return self._pos == len(self._buf) and not self._skip

    def __next__(self) -> Frame:
        if self._skip:
            count, self._skip = self._skip, 0
            self._skip_bytes(count)
        while True:
            line = self._line()
            if line is None:
                raise StopIteration
            if isinstance(line, Frame):
                return line
            if not line.strip():
                continue
            header = _HEADER.match(line)
            if header is not None:
                return self._content_length_frame(_declared_length(header.group(1)))
            return Frame(NDJSON, line, len(line))

    # -- lines ----------------------------------------------------------------------------

    def _line(self) -> bytes | Frame | None:
        """The next line without its ``\\n``; a Frame if it was over the limit; None at the end."""
        searched = 0  # bytes after _pos known to hold no newline (_fill moves _pos, not this)
        skipped = 0  # bytes of a line over the limit, dropped as they arrived
        while True:
            end = self._buf.find(b"\n", self._pos + searched)
            if end >= 0:
                if skipped + end - self._pos > self._max:
                    size, self._pos = skipped + end - self._pos, end + 1
                    return Frame(NDJSON, None, size)
                line = bytes(memoryview(self._buf)[self._pos : end])  # one copy, not two
                self._pos = end + 1
                return line
            searched = len(self._buf) - self._pos
            if skipped or searched > self._max:  # consumed: _fill drops it
                skipped, searched, self._pos = skipped + searched, 0, len(self._buf)
            if self._eof:
                if skipped or self._pos == len(self._buf):
                    return Frame(NDJSON, None, skipped) if skipped else None
                line = bytes(self._buf[self._pos :])
                self._pos = len(self._buf)
                return line
            self._fill()

    # -- Content-Length -------------------------------------------------------------------

    def _content_length_frame(self, length: int) -> Frame:
        header_bytes = 0
        while True:  # the remaining headers, up to the empty line
            line = self._line()
            if line is None or isinstance(line, Frame):
                return Frame(CONTENT_LENGTH, b"", 0)
            header_bytes += len(line)
            if not line.strip() or header_bytes > _MAX_HEADER_BYTES:
                break
        if length > self._max:
            # Skipped on the next call, after the refusal was answered: the client hears of it
            # before it has sent the whole body (a bogus length would keep it waiting forever).
            self._skip = length
            return Frame(CONTENT_LENGTH, None, length)
        while len(self._buf) - self._pos < length and not self._eof:
            self._fill()
        body = bytes(memoryview(self._buf)[self._pos : self._pos + length])  # one copy, not two
        self._pos += len(body)
        return Frame(CONTENT_LENGTH, body, len(body))

    def _skip_bytes(self, count: int) -> None:
        while True:
            step = min(len(self._buf) - self._pos, count)
            self._pos += step
            count -= step
            if count == 0 or self._eof:
                return
            self._fill()

    # -- input ----------------------------------------------------------------------------

    def _fill(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._before_wait()
        chunk = os.read(self._fd, _READ_SIZE)
        if chunk:
            self._buf += chunk
        else:
            self._eof = True


class Terminated(BaseException):
    """Raised by :meth:`FrameWriter.interrupt` to leave the serving loop (a BaseException so that
    no ``except Exception`` in a method swallows it)."""


class FrameWriter:
    """Buffered writer of framed messages to file descriptor ``fd``, whose writes no signal cuts
    (see :meth:`interrupt`)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending: list[bytes] = []
        self._size = 0
        self._writing = False
        self._signalled = False

    def fileno(self) -> int:
        return self._fd

    def interrupt(self, signum: int, frame: object) -> None:
        """The SIGTERM/SIGINT handler: raise :class:`Terminated`, after the write in progress."""
        # A second signal during the same write means the write is stuck (the client does
        # not read): leave at once rather than never.
        if self._writing and not self._signalled:
            self._signalled = True
        else:
            raise Terminated

    def write(self, framing: str, body: bytes) -> None:
        """Queue ``body`` framed as ``framing``; flushes once a lot is queued."""
        if framing == CONTENT_LENGTH:
            self._pending.append(b"Content-Length: %d\r\n\r\n" % len(body))
            self._pending.append(body)
        else:
            self._pending.append(body)
            self._pending.append(b"\n")
        self._size += len(body)
        if self._size >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Write everything queued (BrokenPipeError if the reader is gone)."""
        if not self._pending:
            return
        data = memoryview(b"".join(self._pending))
        self._pending.clear()
        self._size = 0
        self._writing = True
        try:
            while data:
                written = os.write(self._fd, data)
                data = data[written:]
        finally:
            self._writing = False
        if self._signalled:
            raise Terminated


# -- serving ------------------------------------------------------------------------------------

#: A request at least this big (bytes) is answered at once, before its objects are freed (which
#: takes long enough to matter); smaller ones' answers are written with the next ones, and at the
#: latest before the server waits for input.
SEND_BEFORE_FREEING = 64 << 10


def serve_frames(
    in_fd: int, writer: FrameWriter, handler: Any, max_message_bytes: int, trace: IO[str] | None = None
) -> None:
    """Answer the messages arriving on ``in_fd`` through ``writer``, each in its framing, until
    the end of input or until the handler is ``finished``; every answer is written before it
    returns.

    ``handler`` (:class:`bridge.protocol.Protocol`): ``answer(frame)`` gives a frame's answer
    (None: none); ``release()`` frees what answering left, after the answer was sent if the client
    waits for it (nothing else has arrived) or the request was big; ``idle()`` tidies up when the
    server is about to wait for input, the answers sent; ``finished`` ends serving. ``trace``: a
    stream that each frame and its answer are written to, with the time taken (:func:`write_trace`).
    """
    enlarge_pipe(in_fd)  # big requests arrive in a few reads, not dozens
    poll = BriefPoll(in_fd)

    def before_wait() -> None:
        writer.flush()  # the answers leave first
        handler.idle()  # then the handler tidies up, while the client reads them
        poll()

    reader = FrameReader(in_fd, max_message_bytes, before_wait=before_wait)
    for frame in reader:
        if trace is not None:
            started = time.perf_counter()
            phases.start()
        try:
            answer = handler.answer(frame)
            if answer is not None:
                writer.write(frame.framing, answer)
                if reader.drained() or frame.size >= SEND_BEFORE_FREEING:
                    writer.flush()  # the answer leaves before the request's objects are freed
        finally:
            handler.release()
        if trace is not None:
            write_trace(trace, frame, answer, time.perf_counter() - started, phases.take())
        if handler.finished:
            break
    writer.flush()


def write_trace(trace: IO[str], frame: Frame, answer: bytes | None, seconds: float, spent: dict[str, float]) -> None:
    """Write ``frame`` and its ``answer`` (None: none) to the stream ``trace``: taking ``seconds``
    in all, with the seconds ``spent`` per phase (see :mod:`bridge.phases`) in brackets if any
    (both written in ms)."""
    stamp = time.strftime("%H:%M:%S")
    request = "<over the size limit>" if frame.body is None else frame.body.decode("utf-8", "replace")
    response = "(no response)" if answer is None else answer.decode("utf-8", "replace")
    split = f"[{', '.join(f'{p} {s * 1000:.3f}' for p, s in spent.items())}] " if spent else ""
    trace.write(f"{stamp} --> [{frame.framing}] {request}\n")
    trace.write(f"{stamp} <-- {seconds * 1000:.3f} ms {split}{response}\n")
    trace.flush()
