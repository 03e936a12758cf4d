"""Counters and histograms the simulator keeps about itself, for /_sim/stats and /metrics.

Plain Python, updated on the hot path at the cost of an integer add (per chunk) or a bisect
(per chunk gap); turned into Prometheus families only when /metrics is scraped.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from typing import Any

# vLLM's own bucket boundaries (seconds), so dashboards made for vLLM read the simulator too.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
               1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
QUEUE_BUCKETS = E2E_BUCKETS
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)


class Hist:
    """A fixed-bucket histogram: ``counts[i]`` counts values <= ``bounds[i]``; the last slot
    is +Inf."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out = []
        acc = 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += c
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
        return out


class RouteStats:
    __slots__ = ("started", "served", "aborted", "errors")

    def __init__(self) -> None:
        self.started = 0
        self.served = 0
        self.aborted = 0
        self.errors = 0

    def as_dict(self) -> dict[str, int]:
        return {"started": self.started, "served": self.served, "aborted": self.aborted, "errors": self.errors}


class Stats:
    """Everything counted since start. ``chunks`` is bumped on the hot path."""

    def __init__(self) -> None:
        self.started = 0
        self.served = 0
        self.aborted = 0
        self.errors = 0
        self.rejected = 0
        self.active = 0
        self.chunks = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.images = 0  # images read in requests (sim/images.py)
        self.image_tokens = 0  # the prompt tokens they cost
        self.faults: dict[str, int] = {}
        self.finished: dict[str, int] = {}
        self.by_route: dict[str, RouteStats] = {}
        self.cache_resets: dict[str, int] = {}  # POST /reset_prefix_cache, /flush_cache: calls by path
        self.tokenize_calls = 0  # POST /tokenize and /extras/tokenize answered
        self.ttft = Hist(TTFT_BUCKETS)
        self.itl = Hist(ITL_BUCKETS)
        self.e2e = Hist(E2E_BUCKETS)
        self.queue = Hist(QUEUE_BUCKETS)
        self.tpot = Hist(ITL_BUCKETS)
        self.gen_tokens = Hist(TOKEN_BUCKETS)
        self.prompt_hist = Hist(TOKEN_BUCKETS)
        self._samples: deque[tuple[float, int]] = deque(maxlen=6)
        self.started_at = time.monotonic()

    def route(self, name: str) -> RouteStats:
        rs = self.by_route.get(name)
        if rs is None:
            rs = self.by_route[name] = RouteStats()
        return rs

    def sample(self) -> None:
        """Called about once a second: remembers the chunk counter for ``chunks_per_s``."""
        self._samples.append((time.monotonic(), self.chunks))

    def chunks_per_s(self) -> float:
        now = time.monotonic()
        if not self._samples:
            elapsed = now - self.started_at
            return self.chunks / elapsed if elapsed > 0 else 0.0
        t0, c0 = self._samples[0]
        if now - t0 <= 0:
            return 0.0
        return (self.chunks - c0) / (now - t0)

    def as_dict(self, running: int, queued: int) -> dict[str, Any]:
        return {
            "served": self.served,
            "started": self.started,
            "active": self.active,
            "running": running,
            "queued": queued,
            "aborted": self.aborted,
            "errors": self.errors,
            "rejected": self.rejected,
            "chunks": self.chunks,
            "chunks_per_s": round(self.chunks_per_s(), 1),
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "images": self.images,
            "image_tokens": self.image_tokens,
            "faults": dict(self.faults),
            "by_route": {k: v.as_dict() for k, v in self.by_route.items()},
            "cache_resets": dict(self.cache_resets),
            "tokenize_calls": self.tokenize_calls,
            "uptime_s": round(time.monotonic() - self.started_at, 3),
        }
