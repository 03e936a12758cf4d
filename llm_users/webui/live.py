"""The live view behind the web UI's LLM tab: statistics since the last reset, current rates
and per-second chart series. No I/O, no Locust.

Locust resets its own table on "Reset stats" and when a new test starts; :meth:`LiveView.reset`
follows it (the run's report is not touched: it still covers the whole run). Rates are
*current*: over the last :data:`RATE_WINDOW_S` complete seconds. Chart points are per second
(TTFT/ITL p50 and p99, nearest rank, output tokens/s, goodput/s with SLOs, GPU utilization
from the scraped sidecars, mean requests in flight and arrivals/s), the last :data:`KEEP_S`
seconds. In flight: the request-seconds spent in each second (its mean in-flight count, Little's
law), complete at the same horizon; arrivals by the second a request started.

Goodput counts the measured requests that met every SLO (warm-up and cool-down are not judged, as
in summary.json), from the first second; the users running are the run's count each second.

Requests, failures and goodput count in the second a request ended, complete ``lag_s`` back
from now (a master hears from workers every couple of seconds). Output tokens, TTFT and ITL
count in the second their chunk *arrived*
(:mod:`llm_users.metrics.by_arrival`, the timeline's rule: a steady load draws a flat line), so
a second is complete only once every request that streamed in it has ended and reported: the
**complete horizon** is ``now - lag_s - hold``, ``hold`` the longest E2E among the successful
requests that ended in the last :data:`HOLD_WINDOW_S` seconds (at most :data:`HOLD_MAX_S`). Points and
the current rates (all of them, over the same seconds) stop at that horizon, so the newest point is not drawn low only because the
streams still producing in it have not reported yet; before any request has ended there is no
point. A record that arrives later still (a request longer than the others) adds its tokens
and requests to its seconds, settled ones included; a settled point's percentiles stay as they
were.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_users.metrics import RequestRecord, StatsByName
from llm_users.metrics.by_arrival import record_by_second
from llm_users.outputs.timeline import pcts_ms
from llm_users.slo import slo_results

RATE_WINDOW_S = 10
KEEP_S = 300
SETTLE_S = 5  # a second this much older than the horizon: its point is kept, its raw values dropped
HOLD_WINDOW_S = 60  # the hold back is the longest E2E among requests that ended this recently
HOLD_MAX_S = 60.0  # ... and never more than this (one stuck request must not hide the chart)


@dataclass(slots=True)
class _Second:
    finished: int = 0
    failures: int = 0
    tokens: int = 0
    good: int = 0
    ttft: array = field(default_factory=lambda: array("q"))
    itl: array = field(default_factory=lambda: array("q"))
    busy: float = 0.0  # request-seconds in flight during this second: its mean in-flight count
    started: int = 0  # requests that started in this second: the arrival rate
    point: dict[str, Any] | None = None  # computed once settled; the raw values are then dropped
    by_name: dict[str, list[int]] = field(default_factory=dict)  # name -> [finished, failures, tokens, good]
    e2e_max: float = 0.0  # the longest E2E (s) of the successful requests that ended in this second


def _ms2(values: array) -> list[float | None]:
    """p50 and p99 (nearest rank, the timeline's slice-sorted way) in ms, 2 decimals."""
    return [None if v is None else round(v, 2) for v in pcts_ms(values, (50, 99))]


class LiveView:
    def __init__(self, slos: dict[str, float] | None = None, lag_s: float = 1.0) -> None:
        self.slos = slos or {}
        self.lag_s = lag_s
        self.stats = StatsByName(self.slos)
        self.since = 0.0
        self._seconds: dict[int, _Second] = {}

    def reset(self, now: float) -> None:
        self.stats = StatsByName(self.slos)
        self.since = now
        self._seconds = {}

    # feeding --------------------------------------------------------------------------------
    def merge_wire(self, wire: dict[str, Any]) -> None:
        """A worker's statistics delta (the master then counts its records one by one)."""
        self.stats.merge_wire(wire)

    def _sec(self, t: int) -> _Second:
        sec = self._seconds.get(t)
        if sec is None:
            sec = self._seconds[t] = _Second()
            self._prune(t)
        return sec

    def count(self, rec: RequestRecord) -> None:
        """Every record, once (its statistics come through ``stats``): the per-second counts."""
        end = rec.end_time
        if end < self.since or rec.status in ("interrupted", "cancelled"):  # cut by the stop / the client: in requests.jsonl only
            return
        self._in_flight(rec.start_time, end)
        sec = self._sec(int(end))
        named = sec.by_name.get(rec.name)
        if named is None:
            named = sec.by_name[rec.name] = [0, 0, 0, 0]
        sec.finished += 1
        named[0] += 1
        if not rec.ok:
            sec.failures += 1
            named[1] += 1
            self._update_point(sec)
            return
        sec.e2e_max = max(sec.e2e_max, (rec.e2e_ns or 0) / 1e9)  # failures add no tokens: not held for
        measured = not (rec.warmup or rec.cooldown)
        if measured and self.slos and all(slo_results(rec, self.slos).values()):  # goodput: measured ones only
            sec.good += 1
            named[3] += 1
        self._update_point(sec)
        oldest = int(self.since)
        if measured and rec.ttft_ns is not None and rec.start_time + rec.ttft_ns / 1e9 >= oldest:
            first = self._sec(int(rec.start_time + rec.ttft_ns / 1e9))
            if first.point is None:
                first.ttft.append(rec.ttft_ns)
        itl = rec.itl_ns
        grow = array.fromlist if type(itl) is list else array.extend  # a merged record's gaps: array("q")
        for t, tokens, lo, hi in record_by_second(rec):
            if t < oldest:  # before the reset
                continue
            s = self._sec(t)
            s.tokens += tokens
            per = s.by_name.get(rec.name)
            if per is None:
                per = s.by_name[rec.name] = [0, 0, 0, 0]
            per[2] += tokens
            if s.point is not None:
                self._update_point(s)
            elif measured and hi > lo:
                grow(s.itl, itl[lo:hi])  # (timeline.py)

    def _update_point(self, s: _Second) -> None:
        """A settled second's point follows its counts (its percentiles stay as they were)."""
        if s.point is not None:
            s.point.update(outTokS=s.tokens, reqS=s.finished)
            if self.slos:
                s.point["goodputS"] = s.good

    def _in_flight(self, start: float, end: float) -> None:
        """The request's time in flight, second by second, and its arrival (as records end: a
        second's in-flight mean fills in as its requests end)."""
        arrived = start >= self.since
        start = max(start, self.since, end - KEEP_S)
        for t in range(int(start), int(end) + 1):
            self._sec(t).busy += max(0.0, min(end, t + 1) - max(start, t))
        if arrived:
            self._sec(int(start)).started += 1

    def _prune(self, newest: int) -> None:
        for t in [t for t in self._seconds if t < newest - KEEP_S]:
            del self._seconds[t]

    def horizon(self, now: float) -> int:
        """The first second whose tokens may still be incomplete (the module docstring): ``now -
        lag_s - hold``; the oldest second kept while no request has ended yet."""
        end = int(now - self.lag_s)
        recent = [s.e2e_max for t, s in self._seconds.items() if s.e2e_max and t >= end - HOLD_WINDOW_S]
        if not recent:
            if any(s.finished for s in self._seconds.values()):
                return end  # none in flight is known: nothing to wait for
            return min(self._seconds, default=end)
        return min(end, int(now - self.lag_s - min(max(recent), HOLD_MAX_S)))

    # reading --------------------------------------------------------------------------------
    def _window(self, end: int) -> range:
        """The last RATE_WINDOW_S seconds before ``end`` (exclusive), none before the reset."""
        start = end - RATE_WINDOW_S
        if self.since:
            start = max(start, int(self.since) + 1)
        return range(start, end)

    def rates(self, now: float, name: str | None = None) -> dict[str, float]:
        """Per second over the last complete seconds before the complete horizon (up to
        RATE_WINDOW_S, none before a reset); of one request name, or of all. Requests, failures
        and goodput by the second they ended, tokens by the second they arrived: over the same
        seconds, tokens/s = requests/s x tokens per request for a steady load."""
        seconds = self._window(self.horizon(now))
        totals = [0, 0, 0, 0]
        for t in seconds:
            s = self._seconds.get(t)
            if s is None:
                continue
            counts = (s.finished, s.failures, s.tokens, s.good) if name is None else s.by_name.get(name)
            for i, v in enumerate(counts or ()):
                totals[i] += v
        span = len(seconds)
        keys = ("requests", "failures", "tokens", "good")
        return {k: v / span if span > 0 else 0.0 for k, v in zip(keys, totals, strict=True)}

    def series(self, now: float, extra: dict[int, dict[str, float]] | None = None,
               users: Mapping[int, int] | None = None) -> list[dict[str, Any]]:
        """One point per complete second since the reset, up to the complete horizon: the chart data;
        ``users``: the users running, by second (the run's count each second, a master's its workers' total)."""
        if not self._seconds:
            return []
        end = self.horizon(now)
        first = max(min(self._seconds), end - KEEP_S)
        out = []
        for t in range(first, end):
            s = self._seconds.get(t) or _Second()
            point = s.point or self._point(t, s)
            if t < end - SETTLE_S and s.point is None and t in self._seconds:
                s.point, s.ttft, s.itl = point, array("q"), array("q")
            point = {**point, "inflight": round(s.busy, 2), "arrivalS": s.started}
            gpu = gpu_utilization((extra or {}).get(t))
            if gpu is not None:
                point["gpuUtil"] = gpu
            point.update(server_point((extra or {}).get(t)))
            if users and t in users:
                point["users"] = users[t]
            out.append(point)
        return out

    def _point(self, t: int, s: _Second) -> dict[str, Any]:
        (ttft50, ttft99), (itl50, itl99) = _ms2(s.ttft), _ms2(s.itl)
        point: dict[str, Any] = {
            "time": t, "ttftP50": ttft50, "ttftP99": ttft99,
            "itlP50": itl50, "itlP99": itl99, "outTokS": s.tokens, "reqS": s.finished,
        }
        if self.slos:
            point["goodputS"] = s.good
        return point


def gpu_utilization(values: dict[str, float] | None) -> float | None:
    """Mean utilization (%) over the GPUs in one second's scraped sidecar readings."""
    if not values:
        return None
    utils = [v for k, v in values.items() if k.startswith("gpu_") and k.endswith("_utilization_ratio")]
    return round(100 * sum(utils) / len(utils), 1) if utils else None


#: the LLM server's scraped columns shown live (exporters/series.py names -> chart keys)
SERVER_KEYS = {"server_num_requests_running": "srvRunning", "server_num_requests_waiting": "srvWaiting",
               "server_queue_time_mean_ms": "srvQueueMs"}


def server_point(values: dict[str, float] | None) -> dict[str, float]:
    """One second's server running and waiting requests and queue time, where scraped."""
    return {key: round(values[col], 2) for col, key in SERVER_KEYS.items() if values and col in values}
