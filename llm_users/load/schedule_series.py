"""Open loop's per-second series, for timeseries.csv and the report's open-loop charts (pure: no
I/O, no gevent): the offered arrival rate (requests whose *scheduled* time fell in that second),
the achieved one (requests *sent* in it), the mean number of requests in flight during it, and
the schedule lag (send time minus scheduled time) of the requests sent in it, mean and max.

Every open-loop record counts, warm-up included: these describe what the load generator did,
not the measured statistics. Memory is a few numbers per second of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_users.metrics import RequestRecord

#: the columns :meth:`ScheduleSeries.rows` adds to timeseries.csv
COLUMNS = ("offered_rps", "sent_rps", "in_flight", "schedule_lag_mean_ms", "schedule_lag_max_ms")


@dataclass(slots=True)
class _Second:
    due: int = 0
    sent: int = 0
    busy_s: float = 0.0  # request-seconds in flight within this second
    lag_sum_ms: float = 0.0
    lag_max_ms: float = 0.0


class ScheduleSeries:
    """Per whole Unix second: offered and achieved arrivals, in-flight, schedule lag."""

    def __init__(self) -> None:
        self._secs: dict[int, _Second] = {}

    def _sec(self, t: int) -> _Second:
        s = self._secs.get(t)
        if s is None:
            s = self._secs[t] = _Second()
        return s

    def add(self, rec: RequestRecord) -> None:
        if rec.scheduled_ns is None or not rec.t0_ns:
            return  # closed loop, or never sent
        lag_s = max(rec.t0_ns - rec.scheduled_ns, 0) / 1e9
        send = rec.start_time
        self._sec(int(send - lag_s)).due += 1
        sec = self._sec(int(send))
        sec.sent += 1
        sec.lag_sum_ms += lag_s * 1e3
        sec.lag_max_ms = max(sec.lag_max_ms, lag_s * 1e3)
        end = max(rec.end_time, send)
        t = int(send)
        while t < end:  # the request's share of each second it spans
            self._sec(t).busy_s += min(end, t + 1) - max(send, t)
            t += 1

    def rows(self) -> dict[int, dict[str, Any]]:
        """Second -> the :data:`COLUMNS` values (every second from the first to the last seen)."""
        if not self._secs:
            return {}
        out = {}
        for t in range(min(self._secs), max(self._secs) + 1):
            s = self._secs.get(t) or _Second()
            out[t] = {"offered_rps": s.due, "sent_rps": s.sent, "in_flight": round(s.busy_s, 3),
                      "schedule_lag_mean_ms": round(s.lag_sum_ms / s.sent, 3) if s.sent else None,
                      "schedule_lag_max_ms": round(s.lag_max_ms, 3) if s.sent else None}
        return out
