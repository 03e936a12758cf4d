"""Open loop's per-second series, for timeseries.csv and the report's open-loop charts (pure: no
I/O, no gevent): the offered arrival rate (requests whose *scheduled* time fell in that second),
the achieved one (requests *sent* in it), the mean number of requests in flight during it, and
the schedule lag (send time minus scheduled time) of the requests sent in it, mean and max.

Every open-loop record counts, warm-up included: these describe what the load generator did,
not the measured statistics. Memory is a few numbers per second of the run.
"""

from __future__ import annotations

from typing import Any

from llm_users.metrics import RequestRecord
from llm_users.metrics.seconds import SecondSeries, joint_span

#: the columns :meth:`ScheduleSeries.rows` adds to timeseries.csv
COLUMNS = ("offered_rps", "sent_rps", "in_flight", "schedule_lag_mean_ms", "schedule_lag_max_ms")


class ScheduleSeries:
    """Per whole Unix second: offered and achieved arrivals, in-flight, schedule lag; a column of
    floats each (metrics/seconds.py: 40 bytes a second of the run, not a dict's 250)."""

    def __init__(self) -> None:
        self._due, self._sent, self._busy = SecondSeries(), SecondSeries(), SecondSeries()
        self._lag_sum, self._lag_max = SecondSeries(), SecondSeries()

    def add(self, rec: RequestRecord) -> None:
        if rec.scheduled_ns is None or not rec.t0_ns:
            return  # closed loop, or never sent
        lag_s = max(rec.t0_ns - rec.scheduled_ns, 0) / 1e9
        send = rec.start_time
        self._due.add(int(send - lag_s), 1)
        t = int(send)
        self._sent.add(t, 1)
        self._lag_sum.add(t, lag_s * 1e3)
        self._lag_max.set(t, max(self._lag_max.get(t) or 0.0, lag_s * 1e3))
        end = max(rec.end_time, send)
        while t < end:  # the request's share of each second it spans
            self._busy.add(t, min(end, t + 1) - max(send, t))
            t += 1

    def rows(self) -> dict[int, dict[str, Any]]:
        """Second -> the :data:`COLUMNS` values (every second from the first to the last seen)."""
        out = {}
        for t in joint_span([self._due, self._sent, self._busy]):
            sent = int(self._sent.get(t) or 0)
            lag_max = self._lag_max.get(t) or 0.0
            out[t] = {"offered_rps": int(self._due.get(t) or 0), "sent_rps": sent,
                      "in_flight": round(self._busy.get(t) or 0.0, 3),
                      "schedule_lag_mean_ms": round((self._lag_sum.get(t) or 0.0) / sent, 3) if sent else None,
                      "schedule_lag_max_ms": round(lag_max, 3) if sent else None}
        return out
