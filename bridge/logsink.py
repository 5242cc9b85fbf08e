"""Logging to stderr that never blocks the protocol.

A client may never read the server's stderr: a pipe nobody drains is full after 64 KiB, and a
plain logging handler would then block the server in the middle of a request. Here records go
through a bounded queue to a writer thread: the serving thread never waits for stderr. When the
queue is full a record is dropped and counted; the next record written says how many were
dropped. Each write is cut to :data:`MAX_WRITE_CHARS`, so one request can never log unbounded
output (a traceback, a huge name in a message, a traced 100 MB request).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading

#: Records (or trace lines) waiting for stderr; more are dropped and counted.
QUEUE_CAPACITY = 1024

#: One write (a log record with its traceback, a trace line) is cut to this many characters.
MAX_WRITE_CHARS = 64 * 1024

_STOP = None


class StderrSink:
    """A text stream whose ``write`` never blocks: what is written reaches file descriptor
    ``fd`` from a background thread, in order, unless the queue was full (then dropped and
    counted in :attr:`dropped`). Usable as the trace stream of :class:`bridge.server.Tracer`."""

    def __init__(self, fd: int = 2, capacity: int = QUEUE_CAPACITY, max_chars: int = MAX_WRITE_CHARS) -> None:
        self._fd = fd
        self._max_chars = max_chars
        self._queue: queue.Queue[str | None] = queue.Queue(capacity)
        self._lock = threading.Lock()
        self.dropped = 0  # writes lost to a full queue, in total
        self._unreported = 0
        self._thread = threading.Thread(target=self._run, name="stderr-sink", daemon=True)
        self._thread.start()

    def write(self, text: str) -> int:
        """Queue ``text`` (cut to the size limit); drop it if the queue is full. Never blocks."""
        if len(text) > self._max_chars:
            cut = len(text) - self._max_chars
            text = f"{text[: self._max_chars]}...[{cut} more characters not logged]\n"
        with self._lock:
            if self._unreported:
                try:
                    self._queue.put_nowait(f"crs-bridge: {self._unreported} log writes dropped (stderr not read)\n")
                    self._unreported = 0
                except queue.Full:
                    pass
            try:
                self._queue.put_nowait(text)
            except queue.Full:
                self.dropped += 1
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
        while (text := self._queue.get()) is not _STOP:
            data = memoryview(text.encode("utf-8", "replace"))
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError:  # stderr is gone: keep draining the queue, writing nothing
                self._fd = -1


class SinkHandler(logging.Handler):
    """A logging handler writing formatted records to a :class:`StderrSink`."""

    def __init__(self, sink: StderrSink) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        # A record that cannot be formatted is dropped: reporting it would go to stderr, which
        # this handler exists never to block on.
        with contextlib.suppress(Exception):
            self.sink.write(self.format(record) + "\n")


def install(level: str, fmt: str) -> StderrSink:
    """Route all logging (and Python warnings) at ``level`` and above through a new sink on
    stderr, replacing the root logger's handlers; return the sink (close it before exiting)."""
    sink = StderrSink()
    handler = SinkHandler(sink)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # warnings too: their default printer writes stderr directly
    return sink
