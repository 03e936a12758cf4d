"""Per-second time series of a run, built incrementally from records. No I/O.

A second stays open while late records can still arrive (workers report every few seconds);
once it is older than ``settle_s`` it is closed into a fixed row and its raw values dropped,
so memory stays bounded however long the run.

Closing a second finds nearest-rank percentiles over that second's values (14,000 ITL gaps at
14k chunks/s). One ``sorted`` of them held the event loop 3-6 ms every second; the values are
now sorted in slices of :data:`SLICE` and the ranks found by bisection across the sorted
slices, with ``pause()`` (``idle.serve_ready_io`` from the run's loop) between slices so ready
reads are served in between (docs/benchmarks.md, issue 14). A master merging many workers
closes seconds of millions of values (10,000 streams of 20 ms gaps: 500,000 a second), where
sorting took most of its merge's time: above :data:`SELECT_ABOVE` values, when numpy is
installed (the ``fast`` extra), the ranks are selected in C (``numpy.partition``, the same
nearest-rank values) in one piece (issue 34).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llm_users.health.lagtrace import span
from llm_users.metrics import RequestRecord
from llm_users.metrics.by_arrival import record_by_second
from llm_users.metrics.seconds import SecondColumns, SecondSeries, joint_span

COLUMNS = [
    "time", "users", "requests_started", "requests_finished", "failures", "output_tokens_per_s",
    "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms",
]


#: The columns a closed second keeps: counts, then percentiles in ms (None: no value that second).
COUNTS = COLUMNS[2:6]
CLOSED = COLUMNS[2:]


@dataclass(slots=True)
class _Second:
    started: int = 0
    finished: int = 0
    failures: int = 0
    tokens: int = 0
    ttft: array = field(default_factory=lambda: array("q"))
    itl: array = field(default_factory=lambda: array("q"))


#: Values sorted per slice when a second closes (about 0.1 ms of sorting each).
SLICE = 1024
#: Above this many values a second's ranks are selected by numpy, when installed: one piece
#: of about 0.3 ms per 32,768 values instead of slices (a local run's seconds stay below it).
SELECT_ABOVE = 32 * SLICE


def _rank(p: float, n: int) -> int:
    """0-based nearest-rank index of percentile ``p`` among ``n`` values."""
    return max(0, min(n - 1, math.ceil(p / 100 * n) - 1))


def pcts_ms(values: array, ps: tuple[float, ...], pause: Callable[[], None] | None = None) -> list[float | None]:
    """Nearest-rank percentiles of ``values`` (ns) in ms, sorting at most SLICE values at a time."""
    n = len(values)
    if not n:
        return [None] * len(ps)
    if n <= SLICE:
        s = sorted(values)
        return [s[_rank(p, n)] / 1e6 for p in ps]
    if n > SELECT_ABOVE:
        picked = _select(values, [_rank(p, n) for p in ps])
        if picked is not None:
            return [v / 1e6 for v in picked]
    runs = []
    for i in range(0, n, SLICE):
        with span("timeline"):
            runs.append(sorted(values[i:i + SLICE]))
        if pause is not None:
            pause()
    lo0, hi0 = min(r[0] for r in runs), max(r[-1] for r in runs)
    out: list[float | None] = []
    for p in ps:
        if pause is not None and out:
            pause()
        want = _rank(p, n) + 1  # the smallest value with at least ``want`` values <= it
        lo, hi = lo0, hi0
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(bisect_right(r, mid) for r in runs) >= want:
                hi = mid
            else:
                lo = mid + 1
        out.append(lo / 1e6)
    return out


def _select(values: array, ranks: list[int]) -> list[int] | None:
    """The values at these 0-based ranks of ``values`` sorted (numpy's selection, in C, on
    the array's own buffer); None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
    with span("timeline"):
        picked = np.partition(np.frombuffer(values, dtype=np.int64), sorted(set(ranks)))
        return [int(picked[r]) for r in ranks]


class Timeline:
    """Rows keyed by whole Unix second. Requests count as started in the second they started
    and as finished (or failed) in the second they ended; TTFT counts in the second the first
    token arrived, output tokens and ITL gaps in the second their chunks arrived
    (:mod:`llm_users.metrics.by_arrival`: a steady load draws a flat line).

    A record can arrive after some of its seconds were closed (a request longer than
    ``settle_s``, a worker's late payload): its counts (requests, failures, tokens) are still
    added to the closed rows, never dropped; the closed rows' percentiles stay as they were
    (their raw values are gone), its TTFT and ITL samples for those seconds are left out of them."""

    def __init__(self, settle_s: float = 15.0) -> None:
        self.settle_s = settle_s
        self._open: dict[int, _Second] = {}
        # closed seconds, a column each: 8 bytes a second however long the run (metrics/seconds.py)
        self._closed = {c: SecondSeries() for c in CLOSED}
        self._started = self._closed["requests_started"]  # set for every closed second
        self._users = SecondSeries()
        self.extra = SecondColumns()  # other series (GPU, server) by second: ``extra.get(t)``

    def _sec(self, t: int) -> _Second | None:
        """The open second ``t`` (opened if new), or None when it was closed already."""
        s = self._open.get(t)
        if s is None:
            if t in self._started:
                return None
            s = self._open[t] = _Second()
        return s

    def _count(self, t: int, column: str, n: int) -> _Second | None:
        """Add ``n`` to a count of second ``t``: the open second's, or the closed row's."""
        s = self._sec(t)
        if s is None:
            self._closed[column].add(t, n)
        elif column == "requests_started":
            s.started += n
        elif column == "requests_finished":
            s.finished += n
        elif column == "failures":
            s.failures += n
        else:
            s.tokens += n
        return s

    def add(self, rec: RequestRecord) -> None:
        if rec.warmup or rec.status in ("interrupted", "cancelled"):  # interrupted, cancelled: in requests.jsonl only
            return
        self._count(int(rec.start_time), "requests_started", 1)
        end = int(rec.end_time)
        self._count(end, "requests_finished", 1)
        if not rec.ok:
            self._count(end, "failures", 1)
            return
        if rec.ttft_ns is not None:
            first = self._sec(int(rec.start_time + rec.ttft_ns / 1e9))
            if first is not None:
                first.ttft.append(rec.ttft_ns)
        itl = rec.itl_ns
        grow = array.fromlist if type(itl) is list else array.extend  # a merged record's gaps: array("q")
        opened = self._open
        for t, tokens, lo, hi in record_by_second(rec):  # about 11 pieces for 512 gaps of 20 ms
            s = opened.get(t) or self._sec(t)  # inline: this loop is most of a master's merge (issue 34)
            if s is None:
                self._closed["output_tokens_per_s"].add(t, tokens)
            else:
                s.tokens += tokens
                if hi > lo:
                    grow(s.itl, itl[lo:hi])  # a list: fromlist, half extend's cost (sized once, no iterator)

    def users(self, t: float, count: int) -> None:
        self._users.set(int(t), count)

    def users_between(self, first: int, last: int) -> list[tuple[int, int]]:
        """(second, users) for each second from ``first`` to ``last`` whose user count was taken."""
        return [(t, int(v)) for t in range(first, last + 1) if (v := self._users.get(t)) is not None]

    def add_extra(self, t: float, values: dict[str, float | None]) -> None:
        self.extra.update(int(t), values)

    def settle(self, now: float, pause: Callable[[], None] | None = None) -> None:
        """Close every second older than ``settle_s``; ``pause`` is called between slices of
        the work (the run passes ``idle.serve_ready_io``: reads due meanwhile are served)."""
        for t in [t for t in self._open if t < now - self.settle_s]:
            self._close(t, pause)

    def _close(self, t: int, pause: Callable[[], None] | None = None) -> None:
        s = self._open.pop(t)
        ttft50, ttft99 = pcts_ms(s.ttft, (50, 99), pause)
        itl50, itl99 = pcts_ms(s.itl, (50, 99), pause)
        for c, v in zip(CLOSED, (s.started, s.finished, s.failures, s.tokens, ttft50, ttft99, itl50, itl99), strict=True):
            if v is not None:
                self._closed[c].set(t, v)

    def rows(self) -> list[dict[str, Any]]:
        """Every second from the first to the last seen, gaps filled with zeros."""
        for t in list(self._open):
            self._close(t)
        out = []
        closed = self._closed
        for t in joint_span([self._started, self._users, *self.extra.columns.values()]):
            users = self._users.get(t)
            row: dict[str, Any] = {"time": t, "users": None if users is None else int(users)}
            for c in COUNTS:
                row[c] = int(closed[c].get(t) or 0)
            for c in COLUMNS[6:]:
                row[c] = closed[c].get(t)
            row.update(self.extra.get(t, {}))
            out.append(row)
        return out
