"""Where a process's resident memory is, by allocator: what ``bench/soak_probe_locustfile.py``
samples in a soak's masters and ``bench/soak_probe.py`` turns into slopes.

A CPython process's anonymous RSS is mostly two allocators' pages: **pymalloc**'s arenas (1 MiB
anonymous mappings holding every object of up to 512 bytes) and **glibc malloc**'s main arena
(``[heap]``: larger objects, dict tables, lists, arrays, bytes, and C libraries' buffers). Each
keeps pages it once used: live bytes flat with RSS rising is the allocator's, not a structure's.
The parsers take text and return numbers (no I/O); ``sample()`` reads this process. Linux and
glibc only (``mallinfo2`` needs glibc 2.33).
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from typing import Any

STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmData", "Threads")
PYMALLOC_KEYS = ("arenas allocated current", "arenas highwater mark", "bytes in allocated blocks",
                 "bytes in available blocks", "bytes lost to pool headers", "bytes lost to quantization")
MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                    "fordblks", "keepcost")


def status_kb(text: str) -> dict[str, int]:
    """/proc/PID/status -> the memory lines (kB) and Threads."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_KEYS:
            out[key] = int(value.split()[0])
    return out


def _mapping(parts: list[str]) -> bool:
    """A smaps header line: ``lo-hi perms offset dev inode [path]``."""
    return len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]


def smaps_by_kind(text: str) -> dict[str, int]:
    """/proc/PID/smaps -> Rss (kB) by kind of mapping: ``[heap]`` (glibc's main arena),
    ``anon`` (anonymous: pymalloc's arenas, thread stacks, glibc's thread arenas, large
    mallocs), ``so`` (shared libraries), ``file`` (other files), and the other ``[...]`` names."""
    kinds: dict[str, int] = {}
    kind = ""
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if _mapping(parts):
            path = parts[5] if len(parts) > 5 else ""
            kind = path if path.startswith("[") else "anon" if not path else "so" if ".so" in path else "file"
        elif parts[0] == "Rss:":
            kinds[kind] = kinds.get(kind, 0) + int(parts[1])
    return kinds


def pymalloc_stats(text: str) -> dict[str, int]:
    """``sys._debugmallocstats()``'s report -> its totals (arenas, bytes)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip().lstrip("#").strip()
        if sep and key in PYMALLOC_KEYS:
            out[key] = int(value.strip().replace(",", ""))
    return out


def debugmallocstats() -> str:
    """The text ``sys._debugmallocstats()`` writes to fd 2, caught in a temporary file (it
    writes nothing while tracemalloc runs)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as f:
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2_FIELDS]


def mallinfo2() -> dict[str, int] | None:
    """glibc's ``mallinfo2()`` in kB (``arena``: the main arena's size, ``uordblks``: bytes in
    use, ``fordblks``: free, ``hblkhd``: mmapped blocks); None without it (musl, glibc < 2.33)."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    info = fn()
    return {name: getattr(info, name) // 1024 for name in MALLINFO2_FIELDS}


def sample(pid: int | str = "self") -> dict[str, Any]:
    """One row: /proc status and smaps of ``pid``; pymalloc and glibc of this process."""
    with open(f"/proc/{pid}/status") as f:
        row: dict[str, Any] = status_kb(f.read())
    with open(f"/proc/{pid}/smaps") as f:
        row["smaps"] = smaps_by_kind(f.read())
    row["pymalloc"] = pymalloc_stats(debugmallocstats())
    row["mallinfo2"] = mallinfo2()
    return row


def components_mb(row: dict[str, Any]) -> dict[str, float]:
    """A row -> the figures a soak's breakdown compares, in MB."""
    kb = 1024
    smaps, pym, glibc = row.get("smaps") or {}, row.get("pymalloc") or {}, row.get("mallinfo2") or {}
    out = {
        "VmRSS": row["VmRSS"] / kb,
        "RssAnon": row.get("RssAnon", 0) / kb,
        "RssFile": row.get("RssFile", 0) / kb,
        "[heap] (glibc main arena)": smaps.get("[heap]", 0) / kb,
        "anonymous maps (pymalloc arenas...)": smaps.get("anon", 0) / kb,
        "pymalloc live bytes": pym.get("bytes in allocated blocks", 0) / 2**20,
        "pymalloc arenas (count)": float(pym.get("arenas allocated current", 0)),
    }
    if glibc:
        out["glibc in use"] = glibc["uordblks"] / kb
        out["glibc free, kept"] = glibc["fordblks"] / kb
        out["glibc mmapped"] = glibc["hblkhd"] / kb
    return out
