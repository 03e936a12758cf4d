"""What open loop adds to the statistics: latency from the scheduled time, the schedule lag, and
a plain verdict on who fell behind. Built from merged records (master or local runner), so it
is exact across workers. No I/O.

For a record with ``scheduled_ns``:

- schedule lag = ``t0_ns - scheduled_ns``; of it, ``inflight_wait_ns`` was spent waiting for
  the ``--llm-max-inflight`` cap (the server is slower than the schedule) and the rest is
  *client lag* (the load generator itself was late);
- TTFT and E2E from the schedule = lag + TTFT and lag + E2E from the send: what a user of the
  server waits when requests arrive on their own schedule.

The verdict: "in-flight cap reached" when any arrival waited for the cap; "client fell behind
its schedule" when the p99 client lag exceeds :data:`CLIENT_LAG_LIMIT_MS`. The trend compares
the medians of the first and last third of the run (by send time): under overload the latency
from the schedule grows while the latency from the send stays flat.
"""

from __future__ import annotations

from array import array
from typing import Any

from llm_users.metrics import Distribution, RequestRecord

CLIENT_LAG_LIMIT_MS = 25.0
#: The most (send time, E2E from the schedule, from the send) triples the trend keeps: past it,
#: every other one is dropped and only every 2nd (4th, ...) later record is kept, so memory stays
#: under 200 kB however long the run (24 bytes a request grew a master 82 MB an hour at 950
#: records/s); thirds' medians of 4,096 or more sampled requests are plenty for a 2x verdict.
#: The columns are made at their full size (192 kB) with the book: growing them by appends
#: left a master's heap a little larger at each resize for the first hours (issue 33).
TREND_KEPT = 8192
GROWTH_FACTOR = 2.0  # "grows": last third's median at least this many times the first third's
SCHEDULE_METRICS = ("schedule_lag", "client_lag", "inflight_wait", "ttft_from_schedule", "e2e_from_schedule")


def schedule_values(rec: RequestRecord) -> dict[str, int] | None:
    """The record's schedule figures in ns (None for closed-loop records)."""
    if rec.scheduled_ns is None or not rec.t0_ns:
        return None
    lag = rec.t0_ns - rec.scheduled_ns
    wait = rec.inflight_wait_ns or 0
    out = {"schedule_lag": lag, "client_lag": max(lag - wait, 0), "inflight_wait": wait}
    if rec.ok and rec.ttft_ns is not None:
        out["ttft_from_schedule"] = lag + rec.ttft_ns
    if rec.ok and rec.e2e_ns is not None:
        out["e2e_from_schedule"] = lag + rec.e2e_ns
    return out


class ScheduleBook:
    """Open-loop figures of the whole run."""

    def __init__(self) -> None:
        self.dists = {m: Distribution() for m in SCHEDULE_METRICS}
        self.sent = 0  # every open-loop request, warm-up included
        self.cap_waits = 0
        self.first_due: float | None = None  # wall clock of the earliest scheduled time
        self.last_send: float | None = None
        # the trend's columns (send time, E2E from the schedule, from the send), at their full size
        self._t, self._sched, self._send = (array("d", bytes(8 * TREND_KEPT)) for _ in range(3))
        self._n = 0  # how many of them are filled
        self._stride = 1  # the trend keeps every stride-th eligible record (TREND_KEPT)
        self._eligible = 0

    def add(self, rec: RequestRecord) -> None:
        v = schedule_values(rec)
        if v is None:
            return
        self.sent += 1
        if v["inflight_wait"] > 0:
            self.cap_waits += 1
        st = rec.start_time
        due = st - v["schedule_lag"] / 1e9
        self.first_due = due if self.first_due is None else min(self.first_due, due)
        self.last_send = st if self.last_send is None else max(self.last_send, st)
        if rec.warmup or rec.cooldown:
            return
        for k, ns in v.items():
            self.dists[k].add(ns)
        if "e2e_from_schedule" in v:
            self._eligible += 1
            if (self._eligible - 1) % self._stride:
                return
            n = self._n
            self._t[n], self._sched[n], self._send[n] = st, v["e2e_from_schedule"] / 1e6, (rec.e2e_ns or 0) / 1e6
            self._n = n = n + 1
            if n >= TREND_KEPT:  # every other one: the kept are the multiples of the new stride
                for col in (self._t, self._sched, self._send):
                    col[: n // 2] = col[::2]
                self._n = n // 2
                self._stride *= 2

    @property
    def active(self) -> bool:
        return self.sent > 0

    def achieved_rps(self) -> float | None:
        """Requests sent per second, from the first scheduled time to the last send (warm-up
        included): a late start that catches up does not inflate it, a client that falls
        behind lowers it."""
        if self.sent < 2 or self.first_due is None or self.last_send is None or self.last_send <= self.first_due:
            return None
        return (self.sent - 1) / (self.last_send - self.first_due)

    def trend(self) -> dict[str, Any]:
        """Median E2E from the schedule and from the send, in the first and last third of the run
        (of every request, or past :data:`TREND_KEPT` of an even sample: ``sampled_every``)."""
        n = self._n
        if n < 6:
            return {}
        order = sorted(range(n), key=self._t.__getitem__)
        k = n // 3
        first, last = order[:k], order[-k:]

        def med(values: array, idx: list[int]) -> float:
            s = sorted(values[i] for i in idx)
            return s[len(s) // 2]

        out = {"e2e_from_schedule_p50_ms": [med(self._sched, first), med(self._sched, last)],
               "e2e_from_send_p50_ms": [med(self._send, first), med(self._send, last)]}
        sched, send = out["e2e_from_schedule_p50_ms"], out["e2e_from_send_p50_ms"]
        out["from_schedule_grows"] = sched[1] > GROWTH_FACTOR * sched[0]
        out["from_send_grows"] = send[1] > GROWTH_FACTOR * send[0]
        if self._stride > 1:
            out["sampled_every"] = self._stride
        return out

    def summary(self, target: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = dict(target)
        out["sent"] = self.sent
        out["achieved_rps"] = self.achieved_rps()
        for m, d in self.dists.items():
            out[m] = d.summary_ms()
        out["cap_waits"] = self.cap_waits
        out["trend"] = self.trend()
        lag99 = self.dists["client_lag"].percentile_ms(99.0)
        out["client_behind"] = lag99 is not None and lag99 > CLIENT_LAG_LIMIT_MS
        out["cap_reached"] = self.cap_waits > 0
        out["verdict"] = verdict(out)
        return out


def verdict(s: dict[str, Any]) -> str:
    """One plain sentence on who, if anyone, fell behind the schedule."""
    parts = []
    if s.get("cap_reached"):
        w = s["inflight_wait"]
        parts.append(f"SERVER BEHIND: the in-flight cap ({s.get('max_inflight')}) was reached; {s['cap_waits']} of "
                     f"{s['sent']} requests waited for a free slot (p99 {w.get('p99') or 0:.1f} ms): latency from the "
                     f"schedule includes that queueing, latency from the send does not")
    if s.get("client_behind"):
        parts.append(f"CLIENT BEHIND: the load generator fell behind its schedule (client lag p99 "
                     f"{s['client_lag']['p99']:.1f} ms > {CLIENT_LAG_LIMIT_MS:g} ms): add workers or lower the rate")
    t = s.get("trend") or {}
    if t.get("from_schedule_grows") and not t.get("from_send_grows"):
        a, b = t["e2e_from_schedule_p50_ms"]
        parts.append(f"latency from the schedule grew over the run (E2E p50 {a:.0f} -> {b:.0f} ms) while latency "
                     f"from the send stayed flat: the arrivals outpace the server")
    if not parts:
        return "on schedule: no request waited for the in-flight cap and the client kept its schedule"
    return "; ".join(parts)
