"""One timer for all streams: a heap of (target_ns, n, callback) and a single event-loop timer
armed for the earliest target.

Per chunk this costs a C-level heap push and pop of a tuple, instead of an asyncio TimerHandle
(created in Python, ordered by a Python ``__lt__``) per stream per chunk: at several hundred
concurrent streams that is the simulator's biggest saving. When the timer fires, every entry
due within ``EARLY_NS`` is run in target order; a callback may schedule itself again.

Firing precision: asyncio's selector loop rounds its poll timeout UP to whole milliseconds, so
the timer is armed ``lead_ns`` (0.5 ms) early and entries up to ``EARLY_NS`` (0.5 ms) ahead of
their target run: the error is centred on the target (about +-0.5 ms) instead of 0..1 ms late.
uvloop rounds to the nearest millisecond, so it is armed on time (lead 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from heapq import heappop, heappush
from time import perf_counter_ns

EARLY_NS = 500_000
BUDGET_NS = 2_000_000  # at most this much chunk work per timer firing before other events get a turn


def timer_lead_ns(loop: asyncio.AbstractEventLoop) -> int:
    return 500_000 if type(loop).__module__.startswith("asyncio") else 0


class Clock:
    __slots__ = ("loop", "lead_ns", "_heap", "_n", "_handle", "_armed_for", "_firing")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or asyncio.get_running_loop()
        self.lead_ns = timer_lead_ns(self.loop)
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._n = 0
        self._handle: asyncio.Handle | None = None
        self._armed_for: int | None = None
        self._firing = False

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, target_ns: int, callback: Callable[[], None]) -> None:
        """Run ``callback()`` at ``target_ns`` (a ``perf_counter_ns`` time)."""
        self._n += 1
        heappush(self._heap, (target_ns, self._n, callback))
        if self._firing:
            return  # _fire arms for the earliest entry when it is done
        armed = self._armed_for
        if armed is None or target_ns < armed:
            self._arm(target_ns, perf_counter_ns())

    def _arm(self, target_ns: int, now: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_for = target_ns
        delay = (target_ns - self.lead_ns - now) * 1e-9
        if delay > 0:
            self._handle = self.loop.call_later(delay, self._fire)
        else:  # already due (behind schedule): after the pending I/O of this loop iteration
            self._handle = self.loop.call_soon(self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_for = None
        heap = self._heap
        now = perf_counter_ns()
        limit = now + EARLY_NS
        budget_end = now + BUDGET_NS
        count = 0
        self._firing = True
        try:
            while heap and heap[0][0] <= limit:
                heappop(heap)[2]()
                count += 1
                if count & 31 == 0 and perf_counter_ns() > budget_end:
                    break  # overloaded: let the loop serve its sockets before going on
        finally:
            self._firing = False
            if heap:
                self._arm(heap[0][0], perf_counter_ns())
