"""outputs/html_server.py: the scraped series in report.html. A quantile read from the server's
histogram is drawn only where it is an estimate (between two finite bucket bounds, its bucket
shaded); in the first bucket the legend gives the bound and nothing is drawn (issue 53 item 3);
the "Server and GPU series" charts hold one unit each."""

from __future__ import annotations

import re
from typing import Any

from llm_users.outputs.html_report import render
from tests.outputs.test_html_timecharts import _rows, _summary


def charts(page: str) -> dict[str, list[str]]:
    """Each chart's title -> the texts it holds (matplotlib writes each text as an SVG comment)."""
    out = {}
    for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        texts = re.findall(r"<!-- (.*?) -->", svg)
        title = next((t for t in texts if t.startswith(("Server", "Latency", "Throughput", "Requests"))), "?")
        out[title] = texts
    return out


def scraped(**cols: Any) -> list[dict[str, Any]]:
    return [{**r, "server_queue_time_mean_ms": 0.5, **cols} for r in _rows()]


def test_a_first_bucket_quantile_is_a_bound_in_the_legend_never_a_point() -> None:
    """An empty queue: vLLM's first bucket (0, 300 ms] holds every request of every interval.
    Our TTFT p99 is 30 ms; no server queue p99 may be drawn above it, as 297 ms was."""
    page = render(
        _summary(),
        scraped(
            server_queue_time_p99_lo_ms=0.0,
            server_queue_time_p99_hi_ms=300.0,
            server_kv_cache_usage_ratio=0.2,
        ),
    )
    got = charts(page)
    beside = got["Server latency beside ours"]
    assert "server queue time p99: &lt; 300 ms in 10 s (first bucket), not drawn" in beside, beside
    assert not any(t.startswith("server queue time p99 ≈") for t in beside)
    assert "FillBetweenPolyCollection" not in page  # no bucket shaded: no estimate anywhere
    ms = got["Server and GPU series: ms"]
    assert "server_queue_time_p99_ms: &lt; 300 ms in 10 s (first bucket), not drawn" in ms
    assert not any(t.startswith("server_queue_time_p99_") for t in ms if "not drawn" not in t), (
        ms
    )  # no bound as a line
    assert "300" not in ms  # the y axis is the mean's (0.5 ms), never stretched to the bound


def test_an_interpolated_quantile_is_marked_approximate_with_its_bucket_shaded() -> None:
    rows = scraped(
        server_queue_time_p99_ms=420.0, server_queue_time_p99_lo_ms=300.0, server_queue_time_p99_hi_ms=500.0
    )
    for r in rows[:4]:  # the first 4 s: an empty queue, the bound only
        del r["server_queue_time_p99_ms"]
        r["server_queue_time_p99_lo_ms"], r["server_queue_time_p99_hi_ms"] = 0.0, 300.0
    got = charts(render(_summary(), rows))
    beside = got["Server latency beside ours"]
    assert "server queue time p99 ≈ (interpolated; shaded: its bucket)" in beside
    assert "server queue time p99: &lt; 300 ms in 4 s (first bucket), not drawn" in beside


def test_an_inf_bucket_quantile_is_only_above_the_last_bound() -> None:
    got = charts(render(_summary(), scraped(server_prefill_time_p99_lo_ms=7_680_000.0)))
    assert (
        "server prefill p99: &gt; 7.68e+06 ms in 10 s (+Inf bucket), not drawn"
        in got["Server latency beside ours"]
    )


def test_server_and_gpu_series_one_unit_per_axis() -> None:
    """Milliseconds, ratios, watts, tokens/s and requests were drawn on one axis labelled "value"."""
    rows = scraped(
        server_kv_cache_usage_ratio=0.4,
        gpu_0_utilization_ratio=0.9,
        gpu_0_power_watts=300.0,
        server_generation_tokens_per_s=900.0,
        server_preemptions_per_s=0.0,
        server_num_requests_running=8,
        server_num_requests_waiting=1,
    )
    got = charts(render(_summary(), rows))
    want = {
        "ms": ["server_queue_time_mean_ms"],
        "ratios": ["gpu_0_utilization_ratio", "server_kv_cache_usage_ratio"],
        "watts": ["gpu_0_power_watts"],
        "tokens/s": ["server_generation_tokens_per_s"],
        "preemptions/s": ["server_preemptions_per_s"],
        "requests": ["server_num_requests_running", "server_num_requests_waiting"],
    }
    for unit, cols in want.items():
        texts = got[f"Server and GPU series: {unit}"]
        assert [t for t in texts if t.startswith(("gpu_", "server_"))] == cols, (unit, texts)
    assert not any(t.startswith("Server and GPU series") and ":" not in t for t in got)
