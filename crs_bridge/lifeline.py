"""Ending the server when its client is gone.

The server ends at the end of its input; but a client that forked keeps no say over its pipes:
a forked child holds copies of them, and a server whose client was killed would wait, idle, for
as long as that child lives. Given the client's process id, a watcher thread waits for that
process to end (Linux pidfd: no polling) and then terminates the server as SIGTERM does (answers
already computed are flushed; a request being computed is dropped).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
from collections.abc import Callable

log = logging.getLogger("crs-bridge")

#: Seconds between the SIGTERM and a second one, should the first find the server stuck writing
#: answers nobody reads (the second one makes it leave at once, see bridge.server).
SECOND_SIGNAL_SECONDS = 5.0


class _Watch:
    def __init__(self, client_pid: int, pidfd: int | None) -> None:
        self._client_pid = client_pid
        self._pidfd = pidfd
        self._lock = threading.Lock()
        self._armed = True

    def run(self) -> None:
        if self._pidfd is not None:
            select.select([self._pidfd], [], [])
        log.info("client %d is gone: exiting", self._client_pid)
        self._terminate()
        if self._pidfd is not None:
            select.select([], [], [], SECOND_SIGNAL_SECONDS)
            self._terminate()

    def _terminate(self) -> None:
        with self._lock:
            if self._armed:
                os.kill(os.getpid(), signal.SIGTERM)

    def stop(self) -> None:
        with self._lock:
            self._armed = False
        # A SIGTERM sent just before must not interrupt the exit under way: Python skips the
        # handler of a signal that arrived before its disposition became SIG_IGN.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def watch(client_pid: int) -> Callable[[], None]:
    """Terminate this process (SIGTERM to itself) once process ``client_pid`` has ended, from a
    daemon thread; at once if it is gone already. Returns a function that stops the watch, to be
    called when the server leaves by itself (SIGTERM is ignored from then on). Where the system
    cannot watch a process that is not a child (no pidfd: Linux before 5.3, other systems) the
    server ends at the end of its input only."""
    try:
        pidfd = os.pidfd_open(client_pid)
    except ProcessLookupError:
        pidfd = None
    except (AttributeError, OSError) as exc:
        log.debug("cannot watch client %d (%s): the server ends at the end of its input only", client_pid, exc)
        return lambda: None
    watcher = _Watch(client_pid, pidfd)
    threading.Thread(target=watcher.run, name="lifeline", daemon=True).start()
    return watcher.stop
