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

:func:`serve_ready_io` is the yield that lets ready sockets go first. ``gevent.sleep(0)`` does
not: its continuation is one of the loop's callbacks, which run before the next poll, back to
back with every other callback queued meanwhile, so 10 ms of work cut by ``sleep(0)`` into
1 ms pieces kept a socket that was ready all along waiting the whole 10 ms (issue 14).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, Generic, TypeVar

import gevent
from gevent.hub import Waiter

T = TypeVar("T")
RECHECK_S = 0.005  # while the loop is busy, how often the backlog and age limits are looked at
_LOWEST_PRIORITY = -2  # libev's EV_MINPRI: after every watcher of the default priority


def serve_ready_io() -> None:
    """Yield until the loop has polled its sockets and run every greenlet they woke.

    A zero timer at the lowest priority: it makes the next poll non-blocking, and it fires after
    that poll, after the watchers of every socket found ready (default priority). A kill
    (``GreenletExit``) can arrive here like at any other yield."""
    first_of((gevent.get_hub().loop.timer(0.0, priority=_LOWEST_PRIORITY), None))


def first_of(*watchers: tuple[Any, str | None]) -> str | None:
    """Start each (watcher, value), wait for the first to fire, close them all; its value."""
    waiter: Waiter = Waiter()
    for w, value in watchers:
        w.start(waiter.switch, value)
    try:
        return waiter.get()
    finally:
        for w, _ in watchers:
            w.close()


class IdleQueue(Generic[T]):
    """Items in, ``process(item)`` for each, in order, when the loop is idle (or on flush).

    One worker greenlet per queue, started by the first item and parked (no watcher, no
    wake-ups) while the queue is empty; an item put into an empty queue wakes it with one
    callback. A greenlet spawned per burst cost about 30 us of the putting user's time per
    record at 60 streams, where nearly every record is a burst of its own (issue 14)."""

    def __init__(self, process: Callable[[T], None], *, max_backlog: int = 256, max_age_s: float = 0.5) -> None:
        self.process = process
        self.max_backlog = max_backlog
        self.max_age_s = max_age_s
        self._items: deque[tuple[int, T]] = deque()
        self._worker: gevent.Greenlet | None = None
        self._parked: Waiter | None = None  # the worker's, while it waits for an item

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        self._items.append((perf_counter_ns(), item))
        parked = self._parked
        if parked is not None:
            self._parked = None
            gevent.get_hub().loop.run_callback(parked.switch, None)
        elif self._worker is None:
            self._worker = gevent.spawn(self._run)

    def flush(self) -> None:
        """Process every waiting item now, in this greenlet."""
        items = self._items
        while items:
            self.process(items.popleft()[1])

    def close(self) -> None:
        """Stop the worker (items still waiting stay for :meth:`flush`)."""
        worker, self._worker, self._parked = self._worker, None, None
        if worker is not None:
            worker.kill(block=False)

    def _urgent(self) -> bool:
        items = self._items
        return len(items) >= self.max_backlog or perf_counter_ns() - items[0][0] >= self.max_age_s * 1e9

    def _run(self) -> None:
        items = self._items
        try:
            while True:
                if not items:
                    parked = self._parked = Waiter()
                    parked.get()  # put() switches back here
                    continue
                if self._urgent():
                    serve_ready_io()  # still one item per turn: ready sockets go first
                elif self._wait_quiet() != "idle":
                    continue  # the loop is still busy: look at the limits again
                if items:
                    self.process(items.popleft()[1])
        finally:
            if self._worker is gevent.getcurrent():
                self._worker = self._parked = None

    @staticmethod
    def _wait_quiet() -> str | None:
        """Until the loop idles ("idle") or RECHECK_S has passed ("recheck"). Fresh watchers
        each time: an idle watcher stopped and started again beside a timer was seen never to
        fire (gevent 26.9, libev), leaving only the recheck."""
        loop = gevent.get_hub().loop
        return first_of((loop.idle(), "idle"), (loop.timer(RECHECK_S), "recheck"))
