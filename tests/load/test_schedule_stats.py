"""Open-loop figures from records: lag split into cap wait and client lag, latency from the
schedule, the trend and the verdict."""

from __future__ import annotations

import pytest

from llm_users.load.schedule_stats import ScheduleBook, schedule_values
from llm_users.metrics import RequestRecord


def _rec(i: int, lag_ms: float, wait_ms: float = 0.0, e2e_ms: float = 40.0) -> RequestRecord:
    t0 = 10**12 + i * 10**7
    return RequestRecord(request_id=str(i), name="/x", backend="b", model="m", start_time=100 + i / 100,
                         t0_ns=t0, scheduled_ns=t0 - int(lag_ms * 1e6), inflight_wait_ns=int(wait_ms * 1e6),
                         ttft_ns=10_000_000, e2e_ns=int(e2e_ms * 1e6), output_tokens=5)


def test_values() -> None:
    v = schedule_values(_rec(0, lag_ms=30, wait_ms=25))
    assert v == {"schedule_lag": 30_000_000, "client_lag": 5_000_000, "inflight_wait": 25_000_000,
                 "ttft_from_schedule": 40_000_000, "e2e_from_schedule": 70_000_000}
    closed = RequestRecord(request_id="c", name="/x", backend="b", model="m", t0_ns=5)
    assert schedule_values(closed) is None


def test_on_schedule() -> None:
    book = ScheduleBook()
    for i in range(100):
        book.add(_rec(i, lag_ms=1))
    s = book.summary({"rate": 100.0, "max_inflight": None})
    assert s["sent"] == 100 and s["achieved_rps"] == pytest.approx(100.0 * 0.99 / 0.991)  # from the first due time
    assert not s["cap_reached"] and not s["client_behind"] and s["verdict"].startswith("on schedule")
    assert s["ttft_from_schedule"]["p50"] == 11.0 and s["schedule_lag"]["p99"] == 1.0


def test_server_behind_the_cap_and_growth() -> None:
    book = ScheduleBook()
    for i in range(90):
        book.add(_rec(i, lag_ms=1 + 20 * i, wait_ms=20 * i))
    s = book.summary({"rate": 100.0, "max_inflight": 4})
    assert s["cap_reached"] and not s["client_behind"]
    assert s["trend"]["from_schedule_grows"] and not s["trend"]["from_send_grows"]
    assert "SERVER BEHIND" in s["verdict"] and "(4)" in s["verdict"] and "grew over the run" in s["verdict"]


def test_client_behind() -> None:
    book = ScheduleBook()
    for i in range(50):
        book.add(_rec(i, lag_ms=60))
    s = book.summary({"rate": 100.0, "max_inflight": None})
    assert s["client_behind"] and not s["cap_reached"] and "CLIENT BEHIND" in s["verdict"]


def test_a_long_run_keeps_a_bounded_even_sample_for_the_trend(monkeypatch) -> None:
    """Past TREND_KEPT the trend keeps every 2nd, 4th, ... request (memory bounded), still spread
    over the whole run: the same verdict and medians within a few percent of the exact ones."""
    from llm_users.load import schedule_stats

    monkeypatch.setattr(schedule_stats, "TREND_KEPT", 64)
    book = ScheduleBook()
    n = 1000
    for i in range(n):
        rec = _rec(i, lag_ms=1 + i, e2e_ms=40.0)
        book.add(rec)
    assert book._n < 64 and book._stride == 16 and book.sent == n
    assert len(book._t) == len(book._sched) == len(book._send) == 64  # made at their full size, never grown
    t = book.trend()
    assert t["sampled_every"] == 16 and t["from_schedule_grows"] and not t["from_send_grows"]
    first, last = t["e2e_from_schedule_p50_ms"]
    assert first == pytest.approx(41 + n / 6, rel=0.1) and last == pytest.approx(41 + 5 * n / 6, rel=0.05)
    assert book._t[0] == 100.0 and book._t[book._n - 1] >= 100 + (n - 64) / 100  # the sample spans the run
    assert list(book._t[: book._n]) == [100 + i / 100 for i in range(0, book._n * 16, 16)]  # every 16th, in order
    small = ScheduleBook()
    for i in range(50):
        small.add(_rec(i, lag_ms=1))
    assert "sampled_every" not in small.trend() and small._n == 50  # short runs: every request
