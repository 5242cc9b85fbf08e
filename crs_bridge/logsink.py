"""Logging to stderr or syslog that never blocks the protocol.

A client may never read the server's stderr: a pipe nobody drains is full after 64 KiB, and a
plain logging handler would then block the server in the middle of a request (and a syslog
socket blocks too while the journal is behind). Here records go through a bounded queue to a
writer thread: the serving thread never waits for its log. When the queue is full a record is
dropped and counted; the next record written says how many were dropped. Each write is cut to
:data:`MAX_WRITE_CHARS`, so one request can never log unbounded output (a traceback, a huge name
in a message, a traced 100 MB request).

Under a daemon the server's stderr is /dev/null (or closed): the ``auto`` target then logs to
syslog (``/dev/log``, where journald listens too), with the ident ``crs-bridge`` and the client's
process id in every message.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import queue
import stat
import threading

#: Records (or trace lines) waiting for stderr; more are dropped and counted.
QUEUE_CAPACITY = 1024

#: One write (a log record with its traceback, a trace line) is cut to this many characters.
MAX_WRITE_CHARS = 64 * 1024

_STOP = None


#: Log targets of ``crs-bridge serve --log-target``: ``auto`` is stderr when it is usable (open,
#: and not /dev/null), else syslog.
TARGETS = ("auto", "stderr", "syslog")

#: Where syslog (and journald) takes messages.
SYSLOG_SOCKET = "/dev/log"


class StderrSink:
    """A text stream whose ``write`` never blocks: what is written reaches file descriptor
    ``fd`` from a background thread, in order, unless the queue was full (then dropped, and
    counted by the next write that gets through). Usable as the trace stream of
    :func:`bridge.server.serve`. Subclasses deliver elsewhere by overriding :meth:`_deliver`."""

    def __init__(self, fd: int = 2, capacity: int = QUEUE_CAPACITY, max_chars: int = MAX_WRITE_CHARS) -> None:
        self._fd = fd
        self._max_chars = max_chars
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue(capacity)
        self._lock = threading.Lock()
        self._unreported = 0  # writes lost to a full queue since the last report
        self._thread = threading.Thread(target=self._run, name="log-sink", daemon=True)
        self._thread.start()

    def write(self, text: str, level: str = "INFO") -> int:
        """Queue ``text`` (cut to the size limit) at ``level`` (a logging level name, for
        syslog's priority); drop it if the queue is full. Never blocks."""
        if len(text) > self._max_chars:
            cut = len(text) - self._max_chars
            text = f"{text[: self._max_chars]}...[{cut} more characters not logged]\n"
        with self._lock:
            if self._unreported:
                try:
                    dropped = f"crs-bridge: {self._unreported} log writes dropped (the log was not read)\n"
                    self._queue.put_nowait(("WARNING", dropped))
                    self._unreported = 0
                except queue.Full:
                    pass
            try:
                self._queue.put_nowait((level, text))
            except queue.Full:
                self._unreported += 1
        return len(text)

    def flush(self) -> None:
        """Nothing to do: the writer thread writes as soon as it can."""

    def close(self, timeout: float = 1.0) -> None:
        """Let the writer thread finish what is queued, waiting at most ``timeout`` seconds
        (stderr may never be read: then what is queued is lost)."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            self._deliver(*item)

    def _deliver(self, level: str, text: str) -> None:
        data = memoryview(text.encode("utf-8", "replace"))
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:  # stderr is gone: keep draining the queue, writing nothing
            self._fd = -1


class _Syslog(logging.handlers.SysLogHandler):
    """SysLogHandler that drops what it could not send instead of printing to stderr."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


class SyslogSink(StderrSink):
    """A :class:`StderrSink` whose writes go to the syslog socket ``address`` (a unix datagram
    socket), one message per write, from the writer thread: facility daemon, the ident
    ``crs-bridge[PID]``, the priority of the write's level. A missing socket loses the message
    and is tried again for the next."""

    def __init__(self, address: str = SYSLOG_SOCKET, **kwargs: int) -> None:
        self._handler = _Syslog(address=address, facility=logging.handlers.SysLogHandler.LOG_DAEMON)
        self._handler.ident = f"crs-bridge[{os.getpid()}]: "
        super().__init__(**kwargs)

    def _deliver(self, level: str, text: str) -> None:
        record = logging.makeLogRecord({"msg": text.rstrip("\n"), "levelname": level})
        self._handler.emit(record)

    def close(self, timeout: float = 1.0) -> None:
        super().close(timeout)
        self._handler.close()


class SinkHandler(logging.Handler):
    """A logging handler writing formatted records to a :class:`StderrSink`."""

    def __init__(self, sink: StderrSink) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        # A record that cannot be formatted is dropped: reporting it would go to stderr, which
        # this handler exists never to block on.
        with contextlib.suppress(Exception):
            self.sink.write(self.format(record) + "\n", record.levelname)


def stderr_usable(fd: int = 2) -> bool:
    """Whether ``fd`` can take log lines someone may read: open, and not /dev/null."""
    try:
        st = os.fstat(fd)
        null = os.stat(os.devnull)
    except OSError:
        return False
    return not (stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev)


def open_sink(target: str = "auto", syslog_socket: str = SYSLOG_SOCKET) -> StderrSink:
    """A sink for ``target`` (one of :data:`TARGETS`): syslog at ``syslog_socket`` for
    ``syslog``, and for ``auto`` when stderr is closed or /dev/null; else stderr."""
    if target not in TARGETS:
        raise ValueError(f"log target must be one of {', '.join(TARGETS)}, got {target!r}")
    if target == "syslog" or (target == "auto" and not stderr_usable()):
        return SyslogSink(syslog_socket)
    return StderrSink()


def install(level: str, fmt: str, sink: StderrSink | None = None) -> StderrSink:
    """Route all logging (and Python warnings) at ``level`` and above, formatted by ``fmt``,
    through ``sink`` (default: a new one on stderr), replacing the root logger's handlers;
    return the sink (close it before exiting)."""
    sink = sink or StderrSink()
    handler = SinkHandler(sink)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # warnings too: their default printer writes stderr directly
    return sink
