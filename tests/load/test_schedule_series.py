"""load/schedule_series.py: open loop's per-second series, offered vs sent, in flight, lag."""

from __future__ import annotations

import random

import pytest

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


def _rec(i: int, send: float, lag_ms: float, e2e_s: float) -> RequestRecord:
    t0 = 10_000_000_000 + i
    return RequestRecord(request_id=str(i), name="/x", backend="b", model="m", start_time=send, t0_ns=t0,
                         scheduled_ns=t0 - int(lag_ms * 1e6), e2e_ns=int(e2e_s * 1e9))


def test_schedule_series_counts_offered_sent_in_flight_and_lag() -> None:
    series = ScheduleSeries()
    series.add(_rec(0, 100.2, 1.0, 0.5))  # due and sent in second 100, in flight 100.2-100.7
    series.add(_rec(1, 100.6, 2.0, 1.0))  # in flight 100.6-101.6
    series.add(_rec(2, 101.1, 300.0, 0.2))  # due at 100.8 (second 100), sent in 101 300 ms late
    series.add(RequestRecord(request_id="c", name="/x", backend="b", model="m", start_time=100.0, t0_ns=5))
    rows = series.rows()
    assert sorted(rows) == [100, 101]
    a, b = rows[100], rows[101]
    assert (a["offered_rps"], a["sent_rps"], b["offered_rps"], b["sent_rps"]) == (3, 2, 0, 1)
    assert a["in_flight"] == pytest.approx(0.5 + 0.4, abs=1e-6)
    assert b["in_flight"] == pytest.approx(0.6 + 0.2, abs=1e-6)
    assert a["schedule_lag_mean_ms"] == pytest.approx(1.5, abs=1e-3) and a["schedule_lag_max_ms"] == 2.0
    assert b["schedule_lag_max_ms"] == pytest.approx(300.0, abs=1e-3)
