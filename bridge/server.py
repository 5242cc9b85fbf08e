"""The stdio server loop: read framed messages, answer them, exit cleanly.

Exit status 0 in every orderly case: end of input (after answering everything read), after a
``shutdown`` request (answered first, together with the rest of its message), on SIGTERM or
SIGINT (answers already computed are flushed; a request being computed is dropped), and when
the client closes our stdout (status 1 only if stdin or stdout fail otherwise, e.g. EIO). A
message that makes the server itself fail (not a method: those are answered as their error codes)
is answered -32603 with a null id, logged, and serving goes on. A message is never written half:
a signal arriving during a write takes effect after it (a second one, should the write be stuck,
at once).

stdout carries protocol messages only: the protocol keeps a private duplicate of file
descriptor 1, and fd 1 itself is pointed at stderr so that a stray print cannot corrupt the
stream. Logs go to stderr.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import time
import types
from contextlib import suppress
from typing import IO

from . import memory, phases
from .codes import INTERNAL_ERROR
from .errors import shorten
from .limits import ServerLimits
from .protocol import Protocol, error_response
from .schedulers import State
from .transport import BriefPoll, Frame, FrameReader, FrameWriter, enlarge_pipe

log = logging.getLogger("crs-bridge")

#: A request at least this big (bytes) is answered at once, before its objects are freed (which
#: takes long enough to matter); smaller ones' answers are written with the next ones, and at the
#: latest before the server waits for input.
_SEND_BEFORE_FREEING = 64 << 10


class Terminated(BaseException):
    """Raised by the SIGTERM/SIGINT handler to leave the loop (a BaseException so that no
    ``except Exception`` in a method swallows it)."""


class _GuardedWriter(FrameWriter):
    """A FrameWriter whose writes no signal cuts: :meth:`interrupt`, the SIGTERM/SIGINT handler,
    raises :class:`Terminated` once the write in progress is done."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self._writing = False
        self._signalled = False

    def interrupt(self, signum: int, frame: object) -> None:
        """Leave the serving loop (raise :class:`Terminated`), after the write in progress."""
        # A second signal during the same write means the write is stuck (the client does
        # not read): leave at once rather than never.
        if self._writing and not self._signalled:
            self._signalled = True
        else:
            raise Terminated

    def flush(self) -> None:
        self._writing = True
        try:
            super().flush()
        finally:
            self._writing = False
        if self._signalled:
            raise Terminated


def _trace(trace: IO[str], frame: Frame, answer: bytes | None, seconds: float, spent: dict[str, float]) -> None:
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


#: pydantic's plugin loader: imported at the first validation, it imports importlib.metadata to
#: look for plugins among the installed packages' entry points.
_PYDANTIC_PLUGIN_LOADER = "pydantic.plugin._loader"


def skip_pydantic_plugin_discovery() -> bool:
    """Make pydantic find no plugins without looking for them; False if it already looked.

    The search costs a server start a noticeable part of its time (importing importlib.metadata
    with email, zipfile and csv, then reading every installed package's entry points), for
    plugins that would only change how the models validate: this server wants none. The loader
    module is stood in for by one whose ``get_plugins`` finds none (what ``PYDANTIC_DISABLE_PLUGINS``
    does after the import). ``tests/test_cli.py`` checks that validation works and skips the search.
    """
    if _PYDANTIC_PLUGIN_LOADER in sys.modules:
        return False
    loader = types.ModuleType(_PYDANTIC_PLUGIN_LOADER, "crs-bridge: no pydantic plugins (bridge.server)")
    loader.get_plugins = lambda: ()
    sys.modules[_PYDANTIC_PLUGIN_LOADER] = loader
    return True


def _protect_stdout() -> int:
    """Return a private fd for the protocol stream and point fd 1 at stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    return protocol_fd


def serve(
    *,
    limits: ServerLimits | None = None,
    trace: IO[str] | None = None,
    debug_methods: bool = False,
    in_fd: int = 0,
) -> int:
    """Serve JSON-RPC on stdin/stdout until the end of input, ``shutdown`` or SIGTERM; return 0
    (1 when reading or writing fails other than by the client going away)."""
    writer = _GuardedWriter(_protect_stdout())
    signal.signal(signal.SIGTERM, writer.interrupt)
    signal.signal(signal.SIGINT, writer.interrupt)
    memory.keep_freed_memory()  # no page faults for every call's arrays
    skip_pydantic_plugin_discovery()
    limits = limits or ServerLimits()
    state = State(limits=limits)
    protocol = Protocol(state, debug_methods)
    enlarge_pipe(in_fd)  # big requests arrive in a few reads, not dozens
    poll = BriefPoll(in_fd)

    def before_wait() -> None:
        writer.flush()  # the answers leave first
        state.drop_freed()  # then freed schedulers go, while the client reads the answers
        poll()

    reader = FrameReader(in_fd, limits.max_message_bytes, before_wait=before_wait)
    # Start-up objects never become garbage; keep them out of every collection.
    gc.freeze()
    try:
        for frame in reader:
            _answer(frame, protocol, writer, trace, reader.drained())
            if state.shutdown_requested:
                break
        writer.flush()
    except Terminated:
        _flush_quietly(writer)
        log.info("terminated by signal")
    except ConnectionError:  # EPIPE, ECONNRESET: the client is gone, nobody to answer
        log.info("the client closed the output stream")
    except OSError as exc:  # e.g. EIO, EBADF: the streams are unusable; say so once and leave
        log.error("cannot use stdin/stdout: %s", exc)
        return 1
    return 0


def _answer(frame: Frame, protocol: Protocol, writer: FrameWriter, trace: IO[str] | None, last: bool) -> None:
    """Answer ``frame``; ``last``: nothing has arrived after it, so the client waits for its
    answer, which is written at once, before the request is freed."""
    if trace is not None:
        started = time.perf_counter()
        phases.start()
    # A large message decodes into hundreds of thousands of containers, none of them cyclic;
    # collecting while they are built costs more than the work itself, so collect afterwards.
    gc.disable()
    try:
        try:
            answer = protocol.oversize(frame.size) if frame.body is None else protocol.handle(frame.body)
            if phases.timing:
                phases.mark("encode")
        except Exception as exc:  # a bug outside any method (methods' own are answered by the protocol)
            log.error("internal error handling a message (a bug in crs-bridge)", exc_info=exc)
            reply = error_response(INTERNAL_ERROR, f"{type(exc).__name__}: {shorten(exc, 500)}")
            answer = protocol.encode(reply)
        if answer is not None:
            writer.write(frame.framing, answer)
            if last or frame.size >= _SEND_BEFORE_FREEING:
                writer.flush()  # the answer leaves before the request's objects are freed
    finally:
        # Freed only now, and before collections resume: a collection would walk them all.
        protocol.release()
        gc.enable()
    if trace is not None:
        _trace(trace, frame, answer, time.perf_counter() - started, phases.take())


def _flush_quietly(writer: FrameWriter) -> None:
    """Write what is ready without waiting: a client that stopped reading must not keep us."""
    with suppress(OSError, Terminated):
        os.set_blocking(writer.fileno(), False)
        writer.flush()
