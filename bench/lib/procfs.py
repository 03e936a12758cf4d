"""The /proc readers of the bench scripts: CPU time, memory, open files, run delay and
preemptions of a process or of its tree (the process and its live descendants), and one core's
busy and steal time. Linux only; a process that is gone reads as nothing (0, None or [])
unless a function says otherwise."""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _read_stat(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2:].split()  # fields from 3 (state) on


def stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields from the third (state) on: proc(5)'s field k is [k - 3]. None
    when the process is gone."""
    try:
        return _read_stat(pid)
    except OSError:
        return None


def tree(pid: int) -> list[int]:
    """The process and its live descendants, found by the parent pid of every process in /proc."""
    parent: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None:
                parent[int(fields[1])].append(int(entry))
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo.extend(parent.get(p, ()))
    return pids


def children(pid: int, all_threads: bool = True) -> list[int]:
    """The process's child processes (/proc/PID/task/TID/children of each of its threads; with
    ``all_threads`` false, of its main thread only). [] when it is gone."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task") if all_threads else [str(pid)]
    except OSError:
        return out
    for task in tasks:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def tree_by_children(pid: int) -> list[int]:
    """The process and its descendants, walked down the children lists (``children``): cheaper
    than ``tree``, which reads every process's stat."""
    pids, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        pids.append(p)
        todo += children(p)
    return pids


def cpu_s(pid: int) -> float:
    """utime+stime of one process (its threads, not its children), in seconds. Raises OSError
    when the process is gone."""
    fields = _read_stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # stat fields 14 and 15


def cpu_ms(pid: int) -> float:
    """utime+stime of the process and its live descendants (``tree``), in ms."""
    total = 0
    for p in tree(pid):
        fields = stat_fields(p)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # stat fields 14 and 15
    return total * 1000.0 / CLK_TCK


def tree_cpu_s(pid: int) -> float:
    """utime+stime of the process and its live descendants (``tree_by_children``), in seconds."""
    total = 0.0
    for p in tree_by_children(pid):
        fields = stat_fields(p)
        if fields is not None:
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def vmrss_kb(pid: int) -> int | None:
    """Resident memory of one process (VmRSS), in KiB; None when it is gone or has none."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and its parts (RssAnon: the process's own pages; RssFile: mapped files, code
    included, which grow as more of a library's code is first run; RssShmem), in KiB, from
    one read of /proc/PID/status; {} when the process is gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(value.split()[0])
    except OSError:
        return {}
    return out


def rss_kb(pid: int) -> int:
    """Resident memory of the process and its live descendants (``tree``), in KiB."""
    return sum(vmrss_kb(p) or 0 for p in tree(pid))


def open_fds(pid: int) -> int | None:
    """The process's open file descriptors; None when it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def core_busy_ms(cpu: int) -> tuple[float, float]:
    """(busy, steal) milliseconds of one CPU since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:9]]
                user, nice, system, _idle, _iowait, irq, softirq, steal = v
                return (user + nice + system + irq + softirq) * 1000.0 / CLK_TCK, steal * 1000.0 / CLK_TCK
    return 0.0, 0.0


def run_delay_ms(pid: int) -> float:
    """Time the main threads of the process and its children spent runnable but waiting for
    a CPU (/proc/PID/task/PID/schedstat). Helper threads (our self-check probe) are left out:
    they queue behind the main thread on the same core by design."""
    total = 0
    for p in tree(pid):
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{p}/task/{p}/schedstat") as f:
            total += int(f.read().split()[1])
    return total / 1e6


def preemptions(pid: int) -> int:
    """Involuntary context switches of all the process's threads: times it was made to wait
    for its core while it still had work."""
    total = 0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{p}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("nonvoluntary_ctxt_switches:"):
                            total += int(line.split()[1])
    return total
