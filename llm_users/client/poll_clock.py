"""When the event loop's last poll returned: a read's time without the wait behind other
greenlets' work in the same turn of the loop.

A read used to be stamped with ``time.perf_counter_ns()`` when its greenlet ran again. Every
socket the loop finds ready in one poll wakes its greenlet in turn, one after the other, so the
tenth stream's bytes were stamped after the nine before it had parsed their chunks and, at a
request's end, kept its record): "queued behind ready work" was the cause named for 7 and 10
of the 11 first-token stamps over 1 ms late at 120 streams in ceiling run 8 (docs/benchmarks.md,
"A read's time is its poll's"). The bytes were in the socket when the poll returned, so that
moment is the truer stamp: no earlier than they arrived, and the same for every socket of that
poll.

:class:`PollClock` is a libev *check* watcher of the highest priority. libev queues check
watchers after the poll and the clock update and runs them before the watchers the poll made
pending (libev's ``ev_run``: "queue check watchers, to be executed first"), so ``ns`` holds
``perf_counter_ns()`` taken right after each poll, before any greenlet it woke has run. A read
that waited and was woken by the poll takes ``ns``; one that did not wait through a poll (no new
turn since it began waiting: data already there, or a loop that is not libev's) takes
``perf_counter_ns()`` as before (:meth:`PollClock.stamp`).
"""

from __future__ import annotations

import time
from typing import Any

import gevent

perf_counter_ns = time.perf_counter_ns

_HIGHEST_PRIORITY = 2  # libev's EV_MAXPRI: before any watcher of the default priority


class PollClock:
    """``ns``: ``perf_counter_ns()`` right after the loop's latest poll (0 until the first, or
    forever where the loop is not libev's)."""

    __slots__ = ("ns", "_watcher")

    def __init__(self, loop: Any = None) -> None:
        self.ns = 0
        self._watcher = None
        if loop is not None and _is_libev(loop):
            self._watcher = loop.check(ref=False, priority=_HIGHEST_PRIORITY)  # never keeps the loop alive
            self._watcher.start(self._tick)

    def _tick(self) -> None:
        self.ns = perf_counter_ns()

    def stamp(self, before: int) -> int:
        """A read's time: the latest poll's if one returned since ``before`` (``ns`` read when the
        read began waiting), else now."""
        ns = self.ns
        return ns if ns != before else perf_counter_ns()

    @property
    def running(self) -> bool:
        return self._watcher is not None

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.close()
            self._watcher = None


def _is_libev(loop: Any) -> bool:
    """libev's loop (gevent's default on CPython) runs check watchers before the poll's others;
    libuv's runs its I/O callbacks inside the poll, before any check handle, so there a check's
    time would be the previous turn's."""
    return "libev" in type(loop).__module__


def for_this_thread() -> PollClock:
    """The clock of the current thread's event loop, started on first use: one per hub, kept on
    the hub (a destroyed hub takes its clock with it)."""
    hub = gevent.get_hub()
    clock = getattr(hub, "_locust_llm_poll_clock", None)
    if clock is None:
        clock = hub._locust_llm_poll_clock = PollClock(hub.loop)
    return clock
