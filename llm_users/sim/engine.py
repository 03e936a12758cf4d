"""The capacity model: a batch of at most ``max_batch`` streams, a FIFO queue in front of it.

A request takes a slot when it is admitted and keeps it through prefill (TTFT) and decode
until its last chunk is written (or it fails or its client goes away). While all slots are
busy, new requests wait in arrival order; the wait adds to their TTFT. With ``max_queue`` set,
a request that finds the queue full is refused at once (the route answers in its server's
overload shape). The chunk gap of every running stream grows with the batch:
``itl + itl_slope * (running - 1)``, which gives a ramp a knee like a real server's.
"""

from __future__ import annotations

import asyncio
from collections import deque


class QueueFull(Exception):
    """The waiting queue is at ``max_queue``."""


class Engine:
    __slots__ = ("max_batch", "max_queue", "running", "_waiters")

    def __init__(self, max_batch: int, max_queue: int | None = None) -> None:
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> asyncio.Future[None] | None:
        """Take a slot now (returns None) or join the queue (returns a future that resolves
        when the slot is granted). Raises :class:`QueueFull` when the queue is full."""
        if self.running < self.max_batch and not self._waiters:
            self.running += 1
            return None
        if self.max_queue is not None and len(self._waiters) >= self.max_queue:
            raise QueueFull
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def release(self) -> None:
        self.running -= 1
        while self._waiters and self.running < self.max_batch:
            fut = self._waiters.popleft()
            if not fut.done():
                self.running += 1
                fut.set_result(None)

    def leave(self, fut: asyncio.Future[None]) -> None:
        """A queued request whose client went away: its place goes at once (``waiting`` drops)."""
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def kv_usage(self) -> float:
        return min(1.0, self.running / self.max_batch)
