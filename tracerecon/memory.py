"""How tracerecon's processes use glibc's malloc: freed memory reused while a load runs, and
given back to the system after work done in threads.

Reuse (``reuse_freed_memory``, asked for by ``tracerecon.own_process`` only: the settings are
process-wide). By default glibc maps each allocation over 128 kB afresh (raising that bound as
such blocks are freed) and returns the free top of a heap to the system once it passes 128 kB.
The analysis makes and drops numpy arrays of a few MB each, so the kernel kept zeroing pages
the process had just freed: 134,000 minor page faults in a cold report of the 76 MB trace on
the H200 host, 82,000 with blocks under 32 MB taken from the heap and up to 256 MB of free heap
kept (medians of 6 alternating runs; on the 2-core machine, a load run in-process: 115,000 and
65,000, its analysis 0.67 s and 0.47 s). Where the imports happen to free a large block first,
glibc's own bound rises early and the two come out alike (the 2-core CLI: 74,000 faults either
way). Setting the mapping bound without the trim bound made it worse (78,000 faults in the
analysis instead of 66,000): the heap was then trimmed on every free. Blocks of 32 MB and more
(the 1 GiB export's columns) are still mapped and unmapped as before.

glibc's malloc gives each thread that allocates an arena of its own and keeps what is freed
there for that arena's next use: after the tables are read on several threads, or a rank's
stream clock is worked out beside its ownership, hundreds of MB that the main thread cannot
reuse stay resident. On a 1 GiB export that raised the peak RSS to 3.0 GB (H200 host);
``malloc_trim`` after those steps (with the reader's columns released as converted) brought it
to 2.3 GB on the 2-core machine and 2.6-2.9 GB on the H200 host, at no measurable cost in time.
That host still peaked at 2,859 MiB: glibc allows 8 arenas per core (128 there), and each
thread of the reads and of the analysis kept filling an arena of its own. At
most 8 arenas (threads beyond share them) took the peak to 2,249 MiB, 5.97 s against 5.99 s
(3 alternating runs; 4 arenas: 2,383 MiB, 5.94 s); the 76 MB trace's report 0.611 s against
0.619 s, 8 ranks 1.042 s against 1.068 s (10 and 6 runs; 16-core H100 host, 2026-12-06).

Standard library only; a no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import os

_TRIM = None

# glibc's mallopt parameters (malloc.h) and the values reuse_freed_memory sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_KEEP_FREE_BYTES = 256 << 20
_MAP_FROM_BYTES = 32 << 20  # glibc's largest mapping bound on 64-bit
_ARENAS = 8


def _libc_function(name: str, argtypes: list, restype):
    """``name`` from the C library this process already loaded (``ctypes.util.find_library``
    would run ``ldconfig``, 3-10 ms), or None where there is none of that name (musl has no
    ``malloc_trim``, macOS no ``mallopt``; Windows no C library by that handle)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return fn


def reuse_freed_memory() -> None:
    """From now on in this process, malloc takes blocks under 32 MB from its heap, keeps up
    to 256 MB of free heap for reuse, and makes at most 8 arenas, which threads share once
    that many are in use (glibc's ``mallopt``; the module docstring says why). A user's own
    ``MALLOC_ARENA_MAX`` or ``GLIBC_TUNABLES`` keeps deciding the arenas.
    ``release_free_memory`` still gives everything free back where it is called. Does
    nothing on other C libraries; idempotent."""
    mallopt = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    if mallopt:
        mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE_BYTES)
        mallopt(_M_MMAP_THRESHOLD, _MAP_FROM_BYTES)
        if not os.environ.get("MALLOC_ARENA_MAX") and "arena_max" not in os.environ.get("GLIBC_TUNABLES", ""):
            mallopt(_M_ARENA_MAX, _ARENAS)


def release_free_memory() -> None:
    """Return the pages malloc holds free, in every arena, to the system (glibc's
    ``malloc_trim(0)``; a few ms). Does nothing on other C libraries."""
    global _TRIM
    if _TRIM is None:
        _TRIM = _libc_function("malloc_trim", [ctypes.c_size_t], ctypes.c_int) or False
    if _TRIM:
        _TRIM(0)


def free_in_background(objects: list) -> None:
    """Free what ``objects`` holds on a thread of its own, which empties the list; the caller
    must hold no other reference. Several ranks' analysis is mapped from the worker processes'
    shared memory (``tracerecon.handoff``): freeing it took 0.13 s for 8 ranks of the 76 MB
    trace on the 2-core machine, most of it unmapping with the GIL released, so printing the
    report beside it ends 0.07 s sooner there. The thread is not a daemon: the interpreter
    waits for it before it exits (a daemon stopped inside Arrow's C++ could abort)."""
    import threading

    thread = threading.Thread(target=objects.clear, name="tracerecon-free")
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: free them here
        objects.clear()
        return
    _FREEING.append(thread)


_FREEING: list = []


def wait_freed() -> None:
    """Return once what ``free_in_background`` was given is freed (before worker processes
    fork: a child must not inherit a lock the freeing thread held)."""
    while _FREEING:
        _FREEING.pop().join()
