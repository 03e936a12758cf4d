"""llm_users/webui/live.py: the LLM tab's statistics since reset, current rates and chart points."""

from __future__ import annotations

import pytest

from llm_users.metrics import RequestRecord
from llm_users.webui.live import LiveView, gpu_utilization, server_point
from llm_users.webui.tab import rows
from tests.metrics.records import embed


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
    assert [p["time"] for p in live.series(1015.2)] == [1012, 1013]  # 1014: its streams may still run


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
    assert live.rates(1011.0)["good"] == pytest.approx(1 / 8)  # seconds 1001..1008: after the reset, before the horizon
    # a settled second keeps its point, with its raw values dropped
    again = live.series(1010.0)
    assert {k: v for k, v in again[0].items()} == {k: v for k, v in p.items() if k != "gpuUtil"}


def test_gpu_utilization_reads_only_utilization_columns() -> None:
    assert gpu_utilization(None) is None
    assert gpu_utilization({"gpu_0_memory_used_bytes": 5.0}) is None
    assert gpu_utilization({"gpu_a_utilization_ratio": 0.25, "server_queue": 3}) == 25.0


def test_server_point_shows_the_scraped_batch_queue_and_queue_time() -> None:
    assert server_point(None) == {}
    assert server_point({"server_num_requests_running": 4.0, "server_num_requests_waiting": 12.0,
                         "server_queue_time_mean_ms": 151.234, "server_itl_mean_ms": 9.0,
                         "gpu_0_utilization_ratio": 1.0}) == {"srvRunning": 4.0, "srvWaiting": 12.0,
                                                               "srvQueueMs": 151.23}


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


MS = 1_000_000


def stream(start: float, seconds: float, per_s: int = 10) -> RequestRecord:
    """A request streaming one token every 1/per_s s for ``seconds`` (TTFT 1/per_s s)."""
    n = int(seconds * per_s)
    gap = int(1e9 / per_s)
    return RequestRecord("id", "/v1/chat/completions", "vllm", "m", start_time=start, ttft_ns=gap,
                         itl_ns=[gap] * (n - 1), e2e_ns=gap * n, output_tokens=n)


def test_tokens_by_arrival_and_the_complete_horizon() -> None:
    """A 4 s stream (10 tokens/s) starts every quarter second: 16 stream at once, 160 tokens/s.
    Counted at the end that was bursts of 40-token answers; by arrival every complete second is
    160, and the seconds whose streams have not all reported yet are held back, not drawn low."""
    # at now = 1020.3 (lag 1): the records that have ended by 1019.3 have reported
    now = 1020.3
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    for t in range(1000, 1020):
        for q in range(4):
            r = stream(t + q / 4 + 0.01, 4.0, per_s=10)
            if r.end_time <= now - 1:
                feed(live, r)
    assert live.horizon(now) == int(now - 1 - 4.0)  # the longest E2E seen: 4 s
    points = live.series(now)
    assert points[-1]["time"] == 1014
    steady = [p["outTokS"] for p in points if p["time"] >= 1004]
    assert steady == [160] * len(steady) and len(steady) == 11
    assert live.rates(now)["tokens"] == pytest.approx(160.0)  # tokens: up to the horizon
    assert live.rates(now)["requests"] == pytest.approx(4.0)  # requests: by the second they ended, same seconds


def test_nothing_is_complete_before_a_request_ends() -> None:
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    assert live.series(1005.0) == []
    feed(live, stream(1000.5, 1.0))  # one short request ended at 1001.5
    assert [p["time"] for p in live.series(1003.7)] == [1000]  # horizon 1003.7 - 1 - 1.0 -> 1001
    assert live.horizon(1200.0) == 1199  # nothing ended recently, none is known in flight
    failed = stream(1150.0, 49.0)
    failed.status = "error"  # a 49 s timeout: it adds no tokens, so it holds nothing back
    feed(live, failed)
    feed(live, stream(1197.0, 1.0))
    assert live.horizon(1200.0) == 1198


def test_a_late_record_adds_its_tokens_to_settled_points() -> None:
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    feed(live, stream(1000.0, 2.0))  # 20 tokens over 1000..1002
    before = {p["time"]: dict(p) for p in live.series(1030.0)}  # 1000..1020 settled
    assert before[1000]["outTokS"] + before[1001]["outTokS"] + before[1002]["outTokS"] == 20
    feed(live, stream(1000.0, 20.0))  # a 20 s request ends at 1020, reporting late
    assert live.horizon(1030.0) == 1009  # the longest recent E2E (20 s) is held back now
    after = {p["time"]: p for p in live.series(1045.0)}
    assert after[1001]["outTokS"] == before[1001]["outTokS"] + 10
    assert sum(p["outTokS"] for p in after.values()) == 220
    assert after[1001]["itlP50"] == before[1001]["itlP50"] == 100.0  # percentiles stay
    assert after[1020]["reqS"] == 1


def test_live_tab_rows() -> None:
    live = LiveView(lag_s=1)
    live.reset(999.0)
    for i in range(100):
        r = embed(i)
        live.stats.add(r)
        live.count(r)
    table = {row["name"]: row for row in rows(live, 1020.0)}
    agg = live.stats.summary()["overall"]
    assert table["Aggregated"]["inputsS"] == pytest.approx(agg["inputs_per_s"], abs=0.1)
    assert table["/v1/embeddings"]["inTokS"] == pytest.approx(agg["input_tokens_per_s"], abs=1)
    assert table["Aggregated"]["reqS"] > 0 and table["Aggregated"]["ttftP50"] == ""


def test_goodput_counts_only_measured_requests_that_met_the_slos() -> None:
    """Issue 53 item 6: in the first seconds goodput/s equalled requests/s while every measured
    TTFT was over the SLO: the warm-up requests (each user's first, fast on an empty server)
    were judged and counted good, though the TTFT chart, the table and summary.json leave them out."""
    live = LiveView(slos={"ttft": 100e6}, lag_s=1)
    live.reset(1000.0)
    for _ in range(4):  # the warm-up: fast, ended in second 1001
        warm = rec(1001.0, 200, ttft_ms=30)
        warm.warmup = True
        feed(live, warm)
    for _ in range(3):  # measured: every TTFT over the SLO, first tokens in 1001, ended in 1002
        feed(live, rec(1001.2, 1000, ttft_ms=400))
    points = {p["time"]: p for p in live.series(1010.0)}
    assert points[1001]["reqS"] == 4 and points[1001]["goodputS"] == 0
    assert points[1001]["ttftP50"] == 400.0  # the measured TTFTs, all over the SLO
    assert points[1002]["reqS"] == 3 and points[1002]["goodputS"] == 0
    assert live.rates(1011.0)["good"] == 0 and live.rates(1011.0)["requests"] > 0
    good = rec(1003.0, 200, ttft_ms=50)  # a measured request that met it counts, from its second on
    feed(live, good)
    assert {p["time"]: p for p in live.series(1012.0)}[1003]["goodputS"] == 1


def test_the_points_carry_the_users_running_each_second() -> None:
    live = LiveView(lag_s=1)
    live.reset(1000.0)
    for t in range(1001, 1005):
        feed(live, rec(t, 100))
    points = live.series(1010.0, users={1001: 2, 1002: 4, 1003: 4})
    assert {p["time"]: p["users"] for p in points if "users" in p} == {1001: 2, 1002: 4, 1003: 4}
    assert [p["time"] for p in points][:4] == [1001, 1002, 1003, 1004]  # 1004: no count taken, no users point
    assert all("users" not in p for p in live.series(1010.0))
