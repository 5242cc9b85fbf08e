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

log = logging.getLogger("crs-bridge")

#: Seconds between the SIGTERM and a second one, should the first find the server stuck writing
#: answers nobody reads (the second one makes it leave at once, see bridge.server).
SECOND_SIGNAL_SECONDS = 5.0


def watch(client_pid: int) -> bool:
    """Terminate this process (SIGTERM to itself) once process ``client_pid`` has ended, from a
    daemon thread; at once if it is gone already. Returns False, doing nothing, where the system
    cannot watch a process that is not a child (no pidfd: Linux before 5.3, other systems)."""
    try:
        pidfd = os.pidfd_open(client_pid)
    except ProcessLookupError:
        _terminate(client_pid, None)
        return True
    except (AttributeError, OSError) as exc:
        log.debug("cannot watch client %d (%s): the server ends at the end of its input only", client_pid, exc)
        return False
    threading.Thread(target=_terminate, args=(client_pid, pidfd), name="lifeline", daemon=True).start()
    return True


def _terminate(client_pid: int, pidfd: int | None) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])
    log.info("client %d is gone: exiting", client_pid)
    os.kill(os.getpid(), signal.SIGTERM)
    if pidfd is not None:
        select.select([], [], [], SECOND_SIGNAL_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)
