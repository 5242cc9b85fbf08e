"""Keep freed memory for the next request instead of handing it back to the kernel.

glibc serves every allocation of 128 KiB or more with fresh pages from mmap and unmaps them when
it is freed. A scoring call's candidate-sized arrays are that big (30k float64 are 240 KiB), so
each call faulted all of them in anew, and in a VM a round's scoring spent more time in page
faults than in its math (docs/performance.md). :func:`keep_freed_memory` raises glibc's mmap threshold to
32 MiB, so such arrays come from the heap, whose freed memory is reused, and its trim threshold to
128 MiB, so the heap keeps up to that much free memory. Allocations of 32 MiB and more (the
arrays of 100k-candidate requests) are still mapped and unmapped, so the server's resident size
stays within about 128 MiB of its live data. With another C library nothing changes.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("crs-bridge")

#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Allocations below this many bytes come from the heap.
MMAP_THRESHOLD = 32 << 20
#: The heap keeps up to this many free bytes at its top.
TRIM_THRESHOLD = 128 << 20


def keep_freed_memory() -> bool:
    """Set glibc's malloc thresholds (see the module doc); False when there is no glibc mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    done = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not done:
        log.debug("mallopt refused the thresholds; freed memory goes back to the kernel")
    return done
