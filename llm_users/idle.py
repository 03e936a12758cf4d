"""Work that waits for a quiet event loop: per-record bookkeeping off the streams' critical path.

A finished request's statistics (HDR buckets for its ITL gaps, about 60 us for 128 tokens) ran
in the user's greenlet as the request ended. Requests end in bursts, so a burst of them ran
back to back while other streams' bytes waited in their sockets, unstamped: the client's
``stats`` time owned its TTFT error p99 at 24-28k chunks/s (issue 14).

:class:`IdleQueue` takes items and processes them one at a time when the loop has nothing
else to do (a libev idle watcher, re-checked every RECHECK_S), so a ready socket is always
served before the next item. If the loop never idles (a saturated client), items are processed anyway
once :attr:`IdleQueue.max_backlog` wait or the oldest has waited :attr:`IdleQueue.max_age_s`,
still one per turn of the loop. :meth:`IdleQueue.flush` processes everything now, in order: a
reader that needs exact figures (a summary, a payload to the master) flushes first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Generic, TypeVar

import gevent
from gevent.hub import Waiter

T = TypeVar("T")
RECHECK_S = 0.005  # while the loop is busy, how often the backlog and age limits are looked at


class IdleQueue(Generic[T]):
    """Items in, ``process(item)`` for each, in order, when the loop is idle (or on flush)."""

    def __init__(self, process: Callable[[T], None], *, max_backlog: int = 256, max_age_s: float = 0.5) -> None:
        self.process = process
        self.max_backlog = max_backlog
        self.max_age_s = max_age_s
        self._items: deque[tuple[int, T]] = deque()
        self._worker: gevent.Greenlet | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        self._items.append((perf_counter_ns(), item))
        if self._worker is None:
            self._worker = gevent.spawn(self._drain)

    def flush(self) -> None:
        """Process every waiting item now, in this greenlet."""
        items = self._items
        while items:
            self.process(items.popleft()[1])

    def _urgent(self) -> bool:
        items = self._items
        return len(items) >= self.max_backlog or perf_counter_ns() - items[0][0] >= self.max_age_s * 1e9

    def _wait_quiet(self) -> str:
        """Until the loop idles ("idle") or RECHECK_S has passed ("recheck")."""
        loop = gevent.get_hub().loop
        waiter: Waiter = Waiter()
        idle = loop.idle()
        timer = loop.timer(RECHECK_S)
        idle.start(waiter.switch, "idle")
        timer.start(waiter.switch, "recheck")
        try:
            return waiter.get()
        finally:
            idle.close()
            timer.close()

    def _drain(self) -> None:
        items = self._items
        try:
            while items:
                if self._urgent():
                    gevent.sleep(0)  # still one item per turn: ready sockets go first
                elif self._wait_quiet() != "idle":
                    continue  # the loop is still busy: look at the limits again
                if items:
                    self.process(items.popleft()[1])
        finally:
            self._worker = None
