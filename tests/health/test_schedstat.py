"""health/schedstat.py: a thread's CPU time and run delay read from its own /proc schedstat, and
(-1, -1) for anything unreadable."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import gevent
import pytest

from llm_users.health.schedstat import open_schedstat, read_schedstat

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="no /proc/self/task (not Linux)")


def _file(tid: int) -> tuple[int, int]:
    f = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
    return int(f[0]), int(f[1])


def test_the_calling_threads_cumulative_cpu_and_run_delay() -> None:
    fd = open_schedstat()
    assert fd is not None
    try:
        tid = threading.get_native_id()
        before = _file(tid)
        cpu, delay = read_schedstat(fd)
        after = _file(tid)
        assert before[0] <= cpu <= after[0] and before[1] <= delay <= after[1]
        sum(i * i for i in range(200_000))  # some CPU of this thread's own
        assert read_schedstat(fd)[0] > cpu  # the same descriptor reads again from the start
    finally:
        os.close(fd)


def test_each_thread_opens_its_own() -> None:
    def other() -> tuple[int, str]:
        fd = open_schedstat()
        assert fd is not None
        try:
            return threading.get_native_id(), os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

    # a native thread even where gevent patched threading (Locust imported in this process)
    tid, link = gevent.get_hub().threadpool.apply(other)
    assert tid != threading.get_native_id()
    assert link.endswith(f"/task/{tid}/schedstat")


def test_anything_unreadable_is_minus_one(tmp_path) -> None:
    assert read_schedstat(None) == (-1, -1)
    for text in ("", "12", "cpu delay slices"):
        p = tmp_path / "schedstat"
        p.write_text(text)
        fd = os.open(p, os.O_RDONLY)
        try:
            assert read_schedstat(fd) == (-1, -1), text
        finally:
            os.close(fd)
    p.write_text("7 8 9\n")
    fd = os.open(p, os.O_RDONLY)
    assert read_schedstat(fd) == (7, 8)  # the first two fields
    os.close(fd)
    assert read_schedstat(fd) == (-1, -1)  # a closed descriptor
