"""llm_users/webui/live.py: the LLM tab's statistics since reset, current rates and chart points."""

from __future__ import annotations

import pytest

from llm_users.metrics import RequestRecord
from llm_users.webui.live import LiveView, gpu_utilization


def rec(start: float, e2e_ms: float, ttft_ms: float = 50, tokens: int = 10, ok: bool = True,
        name: str = "/v1/chat/completions") -> RequestRecord:
    r = RequestRecord("id", name, "vllm", "m", start_time=start, ttft_ns=int(ttft_ms * 1e6), e2e_ns=int(e2e_ms * 1e6),
                      itl_ns=[int(5e6)] * (tokens - 1), output_tokens=tokens, status="ok" if ok else "error")
    return r


def feed(live: LiveView, r: RequestRecord) -> None:
    live.stats.add(r)
    live.count(r)


def test_rates_are_current_not_whole_run() -> None:
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    for t in range(1001, 1031):  # 1 req/s for 30 s, then 3 req/s for 20 s
        feed(live, rec(t, 100))
    for t in range(1031, 1051):
        for _ in range(3):
            feed(live, rec(t, 100))
    r = live.rates(1052.0)  # window: seconds 1041..1050
    assert r["requests"] == pytest.approx(3.0)
    assert r["tokens"] == pytest.approx(30.0)
    assert live.rates(1052.0, "/v1/chat/completions")["requests"] == pytest.approx(3.0)
    assert live.rates(1052.0, "other")["requests"] == 0


def test_reset_forgets_everything_before_it() -> None:
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    for t in range(1001, 1011):
        feed(live, rec(t, 100))
    live.reset(1011.5)
    assert live.stats.summary()["overall"]["requests"] == 0
    feed(live, rec(1012, 100))
    feed(live, rec(1013, 100))
    assert live.stats.summary()["overall"]["requests"] == 2
    # just after a reset the window is the seconds since it, not 10 s
    assert live.rates(1015.0)["requests"] == pytest.approx(2 / 2)
    assert [p["time"] for p in live.series(1015.0)] == [1012, 1013]


def test_series_points_goodput_and_gpu() -> None:
    live = LiveView(slos={"ttft": 60e6}, lag_s=1)
    live.reset(1000.0)
    feed(live, rec(1001, 200, ttft_ms=50))
    feed(live, rec(1001, 200, ttft_ms=70))
    feed(live, rec(1001.5, 100, ok=False))
    points = live.series(1010.0, extra={1001: {"gpu_0_utilization_ratio": 0.5, "gpu_1_utilization_ratio": 0.7}})
    p = points[0]
    assert p["time"] == 1001 and p["reqS"] == 3 and p["outTokS"] == 20 and p["goodputS"] == 1
    assert p["ttftP50"] == 50.0 and p["ttftP99"] == 70.0 and p["itlP50"] == 5.0
    assert p["gpuUtil"] == 60.0
    assert live.rates(1011.0)["good"] == pytest.approx(1 / 9)  # seconds 1001..1009, all after the reset
    # a settled second keeps its point, with its raw values dropped
    again = live.series(1010.0)
    assert {k: v for k, v in again[0].items()} == {k: v for k, v in p.items() if k != "gpuUtil"}


def test_gpu_utilization_reads_only_utilization_columns() -> None:
    assert gpu_utilization(None) is None
    assert gpu_utilization({"gpu_0_memory_used_bytes": 5.0}) is None
    assert gpu_utilization({"gpu_a_utilization_ratio": 0.25, "server_queue": 3}) == 25.0


def test_in_flight_is_the_mean_over_each_second_and_arrivals_count_by_start() -> None:
    """An open loop at 4 req/s of 1.5 s each keeps 6 requests in flight (Little's law): each
    second's point says 6 once its requests have ended, and 4 arrivals/s."""
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    for i in range(4 * 20):  # 20 s of arrivals every 0.25 s
        feed(live, rec(1001 + i * 0.25, 1500))
    points = {p["time"]: p for p in live.series(1030.0)}
    for t in range(1003, 1020):  # full seconds (the ramp-up and the tail aside)
        assert points[t]["inflight"] == pytest.approx(6.0, abs=1e-6), (t, points[t])
        assert points[t]["arrivalS"] == 4
    assert points[1001]["inflight"] == pytest.approx(0.25 + 0.5 + 0.75 + 1.0)  # 4 requests, partly in it
    # a request that started before a reset is in flight after it, but did not arrive after it
    live.reset(1100.5)
    feed(live, rec(1100.0, 2000))
    p = {q["time"]: q for q in live.series(1110.0)}
    assert p[1100]["inflight"] == pytest.approx(0.5) and p[1100]["arrivalS"] == 0
    assert p[1101]["inflight"] == pytest.approx(1.0)
