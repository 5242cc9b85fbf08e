"""The stdio server process: set up, serve (:func:`bridge.transport.serve_frames`, the protocol
answering), exit cleanly.

Exit status 0 in every orderly case: end of input (after answering everything read), after a
``shutdown`` request (answered first, together with the rest of its message), on SIGTERM or
SIGINT (answers already computed are flushed; a request being computed is dropped), and when
the client closes our stdout (status 1 only if stdin or stdout fail otherwise, e.g. EIO). A
message that makes the server itself fail (not a method: those are answered as their error codes)
is answered -32603 with a null id, logged, and serving goes on. A message is never written half:
a signal arriving during a write takes effect after it (a second one, should the write be stuck,
at once: :meth:`bridge.transport.FrameWriter.interrupt`).

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
import types
from contextlib import suppress
from typing import IO

from . import memory
from .limits import ServerLimits
from .protocol import Protocol
from .schedulers import State
from .transport import FrameWriter, Terminated, serve_frames

log = logging.getLogger("crs-bridge")


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
    writer = FrameWriter(_protect_stdout())
    signal.signal(signal.SIGTERM, writer.interrupt)
    signal.signal(signal.SIGINT, writer.interrupt)
    memory.keep_freed_memory()  # no page faults for every call's arrays
    skip_pydantic_plugin_discovery()
    limits = limits or ServerLimits()
    protocol = Protocol(State(limits=limits), debug_methods)
    # Start-up objects never become garbage; keep them out of every collection.
    gc.freeze()
    try:
        serve_frames(in_fd, writer, protocol, limits.max_message_bytes, trace)
    except Terminated:
        _flush_quietly(writer)
        log.info("terminated by signal")
    except ConnectionError:  # EPIPE, ECONNRESET: the client is gone, nobody to answer
        log.info("the client closed the output stream")
    except OSError as exc:  # e.g. EIO, EBADF: the streams are unusable; say so once and leave
        log.error("cannot use stdin/stdout: %s", exc)
        return 1
    return 0


def _flush_quietly(writer: FrameWriter) -> None:
    """Write what is ready without waiting: a client that stopped reading must not keep us."""
    with suppress(OSError, Terminated):
        os.set_blocking(writer.fileno(), False)
        writer.flush()
