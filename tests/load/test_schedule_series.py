"""load/schedule_series.py: open loop's per-second series, offered vs sent, in flight, lag."""

from __future__ import annotations

import random

from llm_users.load.schedule_series import COLUMNS, ScheduleSeries
from llm_users.metrics import RequestRecord


def rec(send: float, lag_s: float, e2e_s: float) -> RequestRecord:
    t0 = 10**12
    return RequestRecord("r", "n", "b", "m", start_time=send, t0_ns=t0, scheduled_ns=t0 - int(lag_s * 1e9),
                         e2e_ns=int(e2e_s * 1e9))


def test_offered_sent_in_flight_and_lag_by_second() -> None:
    s = ScheduleSeries()
    s.add(rec(100.2, 0.5, 1.5))  # due at 99.7, sent at 100.2, in flight to 101.7
    s.add(rec(100.9, 0.001, 0.05))
    s.add(RequestRecord("c", "n", "b", "m", start_time=100.5))  # closed loop: not counted
    rows = s.rows()
    assert sorted(rows) == [99, 100, 101]
    assert rows[99] == {"offered_rps": 1, "sent_rps": 0, "in_flight": 0.0, "schedule_lag_mean_ms": None,
                        "schedule_lag_max_ms": None}
    assert rows[100]["offered_rps"] == 1 and rows[100]["sent_rps"] == 2
    assert rows[100]["in_flight"] == round(0.8 + 0.05, 3)
    assert rows[100]["schedule_lag_mean_ms"] == round((500 + 1) / 2, 3) and rows[100]["schedule_lag_max_ms"] == 500.0
    assert rows[101] == {"offered_rps": 0, "sent_rps": 0, "in_flight": 0.7, "schedule_lag_mean_ms": None,
                         "schedule_lag_max_ms": None}
    assert set(rows[100]) == set(COLUMNS)


def test_an_hour_keeps_a_few_bytes_a_second() -> None:
    import tracemalloc

    r = random.Random(3)
    s = ScheduleSeries()
    t = 1_700_000_000.0
    for _ in range(600):
        s.add(rec(t, r.random() * 0.01, 4.0))
        t += 1.0
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(3000):
        s.add(rec(t, r.random() * 0.01, 4.0))
        t += 1.0
    per_second = (tracemalloc.get_traced_memory()[0] - before) / 3000
    tracemalloc.stop()
    assert per_second < 80, per_second  # five float columns; a dict of slotted seconds took ~250
    assert len(s.rows()) == 3600 + 4
