"""exporters/series.py: the LLM server's /metrics read the same way for vLLM, SGLang, TGI and
llama.cpp, and the queue-time quantiles from bucket deltas."""

from __future__ import annotations

import pytest

from exporters.series import (
    SERVER_SAMPLES,
    SeriesStats,
    ServerSeries,
    bucket_quantile,
    bucket_range,
    delta_quantiles,
    parse,
)
from tests.exporters.llama_page import LLAMA


def sglang_page(
    queued: int,
    running: int,
    usage: float,
    prompt: float,
    gen: float,
    retracted: float,
    q_buckets: dict[str, float],
    q_sum: float,
) -> str:
    lab = 'model_name="m"'
    lines = [
        f"sglang:num_running_reqs{{{lab}}} {running}",
        f"sglang:num_queue_reqs{{{lab}}} {queued}",
        f"sglang:token_usage{{{lab}}} {usage}",
        f"sglang:prompt_tokens_total{{{lab}}} {prompt}",
        f"sglang:generation_tokens_total{{{lab}}} {gen}",
        f"sglang:num_retracted_requests_total{{{lab}}} {retracted}",
    ]
    for le, n in q_buckets.items():
        lines.append(f'sglang:queue_time_seconds_bucket{{le="{le}",{lab}}} {n}')
    lines += [
        f"sglang:queue_time_seconds_sum{{{lab}}} {q_sum}",
        f"sglang:queue_time_seconds_count{{{lab}}} {q_buckets['+Inf']}",
    ]
    return (
        "# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\n" + "\n".join(lines) + "\n"
    )


def test_sglang_page_maps_onto_the_common_columns() -> None:
    s = ServerSeries()
    first = s.update(
        parse(
            sglang_page(0, 2, 0.25, 1000, 500, 0, {"0.1": 10, "0.5": 10, "1.0": 10, "+Inf": 10}, 0.2),
            SERVER_SAMPLES,
        ),
        10.0,
    )
    assert s.dialect == "sglang"
    assert first == {
        "server_num_requests_running": 2,
        "server_num_requests_waiting": 0,
        "server_kv_cache_usage_ratio": 0.25,
    }
    # 2 s later: 100 more queue observations, 50 in (0.1, 0.5] and 50 in (0.5, 1.0]
    cols = s.update(
        parse(
            sglang_page(7, 8, 0.97, 3000, 1500, 4, {"0.1": 10, "0.5": 60, "1.0": 110, "+Inf": 110}, 60.2),
            SERVER_SAMPLES,
        ),
        12.0,
    )
    assert cols["server_num_requests_waiting"] == 7 and cols["server_kv_cache_usage_ratio"] == 0.97
    assert cols["server_prompt_tokens_per_s"] == pytest.approx(1000.0)
    assert cols["server_generation_tokens_per_s"] == pytest.approx(500.0)
    assert cols["server_preemptions_per_s"] == pytest.approx(2.0)
    assert cols["server_queue_time_mean_ms"] == pytest.approx(600.0)
    assert cols["server_queue_time_p50_ms"] == pytest.approx(500.0)  # the 50th of 100 ends the first bucket
    assert cols["server_queue_time_p99_ms"] == pytest.approx(500 + 500 * 49 / 50)


def test_llamacpp_page_maps_running_deferred_and_token_rates() -> None:
    s = ServerSeries()
    s.update(parse(LLAMA.format(prompt=100, gen=200, running=1, deferred=0), SERVER_SAMPLES), 0.0)
    assert s.dialect == "llamacpp"
    cols = s.update(parse(LLAMA.format(prompt=300, gen=600, running=4, deferred=3), SERVER_SAMPLES), 4.0)
    assert cols == {
        "server_num_requests_running": 4,
        "server_num_requests_waiting": 3,
        "server_prompt_tokens_per_s": 50.0,
        "server_generation_tokens_per_s": 100.0,
    }


def test_no_rate_over_a_few_milliseconds() -> None:
    s = ServerSeries()
    s.update(parse(LLAMA.format(prompt=100, gen=200, running=1, deferred=0), SERVER_SAMPLES), 0.0)
    # the last pull at the stop, 50 ms after the one before: no 2000 tokens/s burst
    short = s.update(parse(LLAMA.format(prompt=100, gen=300, running=1, deferred=0), SERVER_SAMPLES), 0.05)
    assert "server_generation_tokens_per_s" not in short and short["server_num_requests_running"] == 1
    later = s.update(parse(LLAMA.format(prompt=100, gen=400, running=1, deferred=0), SERVER_SAMPLES), 1.0)
    assert later["server_generation_tokens_per_s"] == pytest.approx(200.0)  # the rise over the whole second


def test_bucket_quantiles() -> None:
    cum = [(0.1, 0.0), (0.5, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert bucket_quantile(0.5, cum) == pytest.approx(0.5)
    assert bucket_quantile(0.25, cum) == pytest.approx(0.3)
    assert bucket_quantile(0.5, [(1.0, 0.0), (float("inf"), 4.0)]) == 1.0  # in +Inf: the last finite bound
    assert bucket_quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None
    prev = {0.1: 5.0, 1.0: 5.0, float("inf"): 5.0}
    assert delta_quantiles(prev, prev) is None  # nothing observed in the interval
    got = delta_quantiles({0.1: 5.0, 1.0: 15.0, float("inf"): 15.0}, prev)
    assert got is not None and [q.value for q in got] == pytest.approx([0.55, 0.991])
    assert [(q.lo, q.hi, q.kind) for q in got] == [(0.1, 1.0, "~"), (0.1, 1.0, "~")]
    assert delta_quantiles({0.1: 1.0, 1.0: 1.0, float("inf"): 1.0}, prev) is None  # counter reset
    assert delta_quantiles(prev, None) is None


# vLLM's own buckets for request_queue_time_seconds and request_prefill_time_seconds (vllm/v1/metrics/loggers.py)
VLLM_LATENCY = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


def vllm_queue_page(values: list[float]) -> str:
    """A vLLM page whose queue histogram observed ``values`` (seconds)."""
    lab = 'model_name="m",engine="0"'
    lines = [f"vllm:num_requests_waiting{{{lab}}} 0"]
    for le in (*VLLM_LATENCY, float("inf")):
        n = sum(v <= le for v in values)
        lines.append(
            f'vllm:request_queue_time_seconds_bucket{{{lab},le="{"+Inf" if le == float("inf") else le}"}} {n}'
        )
    lines += [
        f"vllm:request_queue_time_seconds_sum{{{lab}}} {sum(values)}",
        f"vllm:request_queue_time_seconds_count{{{lab}}} {len(values)}",
    ]
    return "\n".join(lines) + "\n"


def queue_columns(values: list[float]) -> dict[str, float]:
    s = ServerSeries()
    s.update(parse(vllm_queue_page([]), SERVER_SAMPLES), 0.0)
    return s.update(parse(vllm_queue_page(values), SERVER_SAMPLES), 2.0)


def test_a_quantile_in_the_first_bucket_is_a_bound_never_a_number() -> None:
    """Issue 53 item 3: an empty queue (every request queued 0-2 ms) read p50 150 ms and p99 297 ms,
    interpolated inside vLLM's first bucket (0, 0.3 s]; all the buckets say is "< 300 ms"."""
    cols = queue_columns([0.001 * (i % 3) for i in range(100)])
    assert cols["server_queue_time_mean_ms"] == pytest.approx(0.99)  # the exact mean stays
    for q in ("p50", "p99"):
        assert f"server_queue_time_{q}_ms" not in cols, cols  # no made-up number
        assert cols[f"server_queue_time_{q}_lo_ms"] == 0.0
        assert cols[f"server_queue_time_{q}_hi_ms"] == pytest.approx(300.0)


def test_a_quantile_between_two_finite_bounds_is_an_estimate_with_its_bucket() -> None:
    cols = queue_columns([0.1] * 50 + [0.4] * 50)  # half in (0, 0.3], half in (0.3, 0.5]
    assert "server_queue_time_p50_ms" not in cols and cols["server_queue_time_p50_hi_ms"] == pytest.approx(
        300.0
    )
    assert cols["server_queue_time_p99_ms"] == pytest.approx(300 + 200 * 49 / 50)
    assert (cols["server_queue_time_p99_lo_ms"], cols["server_queue_time_p99_hi_ms"]) == pytest.approx(
        (300, 500)
    )


def test_a_quantile_in_the_inf_bucket_is_only_above_the_last_bound() -> None:
    cols = queue_columns([10_000.0] * 10)
    assert "server_queue_time_p99_ms" not in cols and "server_queue_time_p99_hi_ms" not in cols
    assert cols["server_queue_time_p99_lo_ms"] == pytest.approx(7_680_000.0)


def test_bucket_range_kinds() -> None:
    inf = float("inf")
    cum = [(0.3, 10.0), (0.5, 10.0), (1.0, 20.0), (inf, 20.0)]
    first, mid = bucket_range(0.5, cum), bucket_range(0.99, cum)
    assert first is not None and (first.kind, first.lo, first.hi, first.value) == ("<", 0.0, 0.3, 0.3)
    assert (
        mid is not None and (mid.kind, mid.lo, mid.hi) == ("~", 0.5, 1.0) and mid.value == pytest.approx(0.99)
    )
    top = bucket_range(0.5, [(0.3, 0.0), (inf, 4.0)])
    assert top is not None and (top.kind, top.lo, top.value) == (">", 0.3, 0.3)
    assert bucket_quantile(0.5, [(0.3, 4.0), (inf, 4.0)]) == pytest.approx(0.15)  # Prometheus's figure, still
    assert bucket_range(0.5, [(0.3, 0.0), (inf, 0.0)]) is None


def test_the_summary_counts_bound_only_scrapes_apart_from_the_estimates() -> None:
    """summary.json's ``server.series``: a quantile's mean and max are of its estimates only; the
    scrapes where it was a bound are ``below_samples`` (``below_ms``) or ``above_samples``."""
    stats = SeriesStats()
    for _ in range(3):
        stats.add({"server_queue_time_mean_ms": 0.5, **queue_columns([0.001] * 20)})
    stats.add(queue_columns([0.4] * 20))
    stats.add(queue_columns([10_000.0] * 20))
    got = stats.summary("server_")
    p99 = got["server_queue_time_p99_ms"]
    assert p99["samples"] == 1 and p99["mean"] == pytest.approx(p99["max"]) and 300 < p99["mean"] <= 500
    assert (p99["below_samples"], p99["below_ms"]) == (3, pytest.approx(300.0))
    assert (p99["above_samples"], p99["above_ms"]) == (1, pytest.approx(7_680_000.0))
    empty = SeriesStats()
    empty.add(queue_columns([0.0] * 5))
    assert empty.summary("server_")["server_queue_time_p50_ms"] == {
        "samples": 0,
        "below_samples": 1,
        "below_ms": pytest.approx(300.0),
    }
