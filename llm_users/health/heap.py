"""glibc's heap in a long run: a fixed mmap threshold, so large transient buffers go back.

glibc serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with its
own ``mmap`` and unmaps it on free. But the threshold is dynamic: each time such a block is
freed, glibc raises the threshold to that block's size (up to 32 MiB), so from then on blocks
of that size come from the ordinary heap instead, and the heap fragments around the small,
long-lived objects allocated between them; its pages are never given back. A worker builds
such buffers every ship interval (a payload of records packed by msgpack, and the copies zmq
makes of it): its resident memory crept up by megabytes a minute while its Python heap
(tracemalloc) stayed flat (issue 10, docs/benchmarks.md "soak"). The load-generating roles
and the simulator set it at start.

Setting the threshold explicitly turns the dynamic adjustment off: blocks of 64 KiB and more
are always mapped and unmapped (a few system calls per second at most). ``LOCUST_LLM_MALLOC=off``
leaves glibc's default; on other C libraries this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

ENV = "LOCUST_LLM_MALLOC"
M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 64 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; True when it was set."""
    if os.environ.get(ENV) == "off" or not sys.platform.startswith("linux"):
        return False
    try:
        # the process's own symbols (the C library it runs on): ``find_library`` would run
        # ``ldconfig`` in a subprocess, which yields to the event loop at a worker's start-up
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
