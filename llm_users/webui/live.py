"""The live view behind the web UI's LLM tab: statistics since the last reset, current rates
and per-second chart series. No I/O, no Locust.

Locust resets its own table on "Reset stats" and when a new test starts; :meth:`LiveView.reset`
follows it (the run's report is not touched: it still covers the whole run). Rates are
*current*: counted per second of completion over the last :data:`RATE_WINDOW_S` complete
seconds, ``lag_s`` back from now (a master hears from workers every couple of seconds, so the
newest seconds are still filling). Chart points are per second (TTFT/ITL p50 and p99, nearest rank, output tokens/s, goodput/s with SLOs, GPU utilization from the scraped sidecars,
mean requests in flight and arrivals/s), the last :data:`KEEP_S` seconds.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from llm_users.metrics import RequestRecord, StatsByName
from llm_users.outputs.timeline import pcts_ms
from llm_users.slo import slo_results

RATE_WINDOW_S = 10
KEEP_S = 300
SETTLE_S = 5  # a second this much older than the lag gets no more records: its point is kept


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

    def count(self, rec: RequestRecord) -> None:
        """Every record, once (its statistics come through ``stats``): the per-second counts."""
        end = rec.end_time
        if end < self.since or rec.status == "interrupted":  # cut by the stop: in requests.jsonl only
            return
        self._in_flight(rec.start_time, end)
        sec = self._seconds.get(int(end))
        if sec is None:
            sec = self._seconds[int(end)] = _Second()
            self._prune(int(end))
        named = sec.by_name.get(rec.name)
        if named is None:
            named = sec.by_name[rec.name] = [0, 0, 0, 0]
        sec.finished += 1
        named[0] += 1
        if not rec.ok:
            sec.failures += 1
            named[1] += 1
            return
        sec.tokens += rec.output_tokens or 0
        named[2] += rec.output_tokens or 0
        if self.slos and all(slo_results(rec, self.slos).values()):
            sec.good += 1
            named[3] += 1
        if not (rec.warmup or rec.cooldown):
            if rec.ttft_ns is not None:
                sec.ttft.append(rec.ttft_ns)
            sec.itl.extend(rec.itl_ns)

    def _in_flight(self, start: float, end: float) -> None:
        """The request's time in flight, second by second, and its arrival (as records end: a
        second's in-flight mean fills in as its requests end)."""
        arrived = start >= self.since
        start = max(start, self.since, end - KEEP_S)
        for t in range(int(start), int(end) + 1):
            sec = self._seconds.get(t)
            if sec is None:
                sec = self._seconds[t] = _Second()
            sec.busy += max(0.0, min(end, t + 1) - max(start, t))
        if arrived:
            self._seconds[int(start)].started += 1

    def _prune(self, newest: int) -> None:
        for t in [t for t in self._seconds if t < newest - KEEP_S]:
            del self._seconds[t]

    # reading --------------------------------------------------------------------------------
    def rates(self, now: float, name: str | None = None) -> dict[str, float]:
        """Per second over the last complete seconds (up to RATE_WINDOW_S, none before a reset);
        of one request name, or of all."""
        end = int(now - self.lag_s)
        start = max(end - RATE_WINDOW_S, int(self.since) + 1 if self.since else end - RATE_WINDOW_S)
        span = end - start
        totals = {"requests": 0, "failures": 0, "tokens": 0, "good": 0}
        if span <= 0:
            return {k: 0.0 for k in totals}
        for t in range(start, end):
            s = self._seconds.get(t)
            if s is None:
                continue
            if name is None:
                counts = [s.finished, s.failures, s.tokens, s.good]
            else:
                counts = s.by_name.get(name, [0, 0, 0, 0])
            for k, v in zip(totals, counts, strict=True):
                totals[k] += v
        return {k: v / span for k, v in totals.items()}

    def series(self, now: float, extra: dict[int, dict[str, float]] | None = None) -> list[dict[str, Any]]:
        """One point per complete second since the reset: the chart data."""
        end = int(now - self.lag_s)
        if not self._seconds:
            return []
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
