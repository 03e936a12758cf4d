"""A thread's CPU time and run delay from ``/proc/self/task/TID/schedstat``: what other processes
took of this thread's core (the lag trace and the self-check read it)."""

from __future__ import annotations

import os
import threading


def open_schedstat() -> int | None:
    """A descriptor on the calling thread's /proc schedstat (None where there is none)."""
    try:
        return os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
    except OSError:
        return None


def read_schedstat(fd: int | None) -> tuple[int, int]:
    """(CPU time, run delay) of a thread in ns, cumulative; (-1, -1) when unreadable."""
    if fd is None:
        return -1, -1
    try:
        f = os.pread(fd, 64, 0).split()
        return int(f[0]), int(f[1])
    except (OSError, ValueError, IndexError):
        return -1, -1
