"""The knee's explanation (llm_users/load/explain.py): stage figures in, one sentence out.

Each case is built the way a run builds it: per-second scraped columns in a timeline's
``extra`` (what exporters/ puts there), the stages' own summaries, and the SLO block; the
sentence must name the cause whose figures moved, with those figures, and nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest

from llm_users.load.explain import annotate, explain, figures, knee_block, window_figures


def stage(
    index: int,
    users: float,
    start: float,
    tpot_p95: float,
    share: float,
    *,
    tpot_p50: float | None = None,
    timings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "index": index,
        "users": users,
        "start": start,
        "settle_s": 1.0,
        "measured_s": 4.0,
        "requests": 50,
        "tpot": {"p50": tpot_p50 or tpot_p95 * 0.9, "p95": tpot_p95},
        "ttft": {"p95": 50.0},
        "slo": {"share_meeting_all": share, "share_meeting": {"tpot": share, "ttft": 1.0}},
    }
    if timings:
        s["server_timings"] = timings
    return s


SUMMARY_SLO = {"overall": {"slo": {"limits_ms": {"tpot": 50.0, "ttft": 500.0}}}}


def extra_for(windows: list[tuple[float, dict[str, float]]]) -> dict[int, dict[str, float]]:
    """The seconds of each stage's measured window (start + 1 .. start + 5) filled with its columns."""
    out: dict[int, dict[str, float]] = {}
    for start, cols in windows:
        for t in range(int(start) + 1, int(start) + 5):
            out[t] = dict(cols)
    return out


def run(stages: list[dict[str, Any]], extra: dict[int, dict[str, float]]) -> dict[str, Any]:
    summary = {**SUMMARY_SLO, "stages": stages}
    annotate(summary, extra)
    return summary


def test_window_figures_mean_and_max_over_the_window_only() -> None:
    extra = {
        99: {"server_num_requests_waiting": 50.0},
        100: {"server_num_requests_waiting": 1.0},
        101: {"server_num_requests_waiting": 3.0},
        102: {"server_num_requests_waiting": 99.0},
    }
    assert window_figures(extra, 100.2, 102.0) == {
        "server_num_requests_waiting": {"mean": 2.0, "max": 3.0, "samples": 2}
    }
    assert window_figures(extra, 200, 210) == {}
    # a window that begins late in second 100 (its row's last scrape is mostly the settle time's):
    # second 100 is left out, 101 (middle 101.5) and 102 (middle 102.5 < 102.6) are in
    assert window_figures(extra, 100.6, 102.6)["server_num_requests_waiting"] == {
        "mean": 51.0,
        "max": 99.0,
        "samples": 2,
    }
    # under a second: the second that holds its middle
    assert window_figures(extra, 101.7, 102.1)["server_num_requests_waiting"]["samples"] == 1
    assert window_figures(extra, 101.7, 102.1)["server_num_requests_waiting"]["mean"] == 3.0


def test_queueing_knee_names_waiting_queue_and_kv() -> None:
    stages = [stage(0, 16, 1000, 30, 1.0), stage(1, 32, 1010, 40, 0.99), stage(2, 48, 1020, 80, 0.2)]
    extra = extra_for(
        [
            (
                1000,
                {
                    "server_num_requests_waiting": 0,
                    "server_num_requests_running": 16,
                    "server_itl_mean_ms": 28,
                    "server_kv_cache_usage_ratio": 0.5,
                    "server_queue_time_mean_ms": 0.2,
                },
            ),
            (
                1010,
                {
                    "server_num_requests_waiting": 0,
                    "server_num_requests_running": 32,
                    "server_itl_mean_ms": 38,
                    "server_kv_cache_usage_ratio": 0.8,
                    "server_queue_time_mean_ms": 0.3,
                },
            ),
            (
                1020,
                {
                    "server_num_requests_waiting": 12,
                    "server_num_requests_running": 32,
                    "server_itl_mean_ms": 39,
                    "server_kv_cache_usage_ratio": 0.97,
                    "server_queue_time_mean_ms": 1800,
                    "server_preemptions_per_s": 0.5,
                },
            ),
        ]
    )
    s = run(stages, extra)
    assert stages[2]["server_metrics"]["server_num_requests_waiting"] == {
        "mean": 12.0,
        "max": 12.0,
        "samples": 4,
    }
    knee = s["knee"]
    assert (knee["point"], knee["users"], knee["first_failing_point"], knee["first_failing_users"]) == (
        1,
        32,
        2,
        48,
    )
    assert knee["explanation"] == (
        "TPOT p95 passes 50 ms from 48 u (40 -> 80 ms): queueing in the server (waiting requests 0 -> 12, "
        "queue time mean 0.3 -> 1800 ms), KV cache 97%, preemptions 0.5/s"
    )


def test_decode_slope_knee_names_the_batch_and_time_per_token() -> None:
    stages = [stage(0, 4, 1000, 13, 1.0), stage(1, 14, 1010, 23, 0.1)]
    extra = extra_for(
        [
            (
                1000,
                {
                    "server_num_requests_waiting": 0,
                    "server_num_requests_running": 4,
                    "server_itl_mean_ms": 12.9,
                    "server_kv_cache_usage_ratio": 0.02,
                },
            ),
            (
                1010,
                {
                    "server_num_requests_waiting": 0,
                    "server_num_requests_running": 14,
                    "server_itl_mean_ms": 22.9,
                    "server_kv_cache_usage_ratio": 0.05,
                },
            ),
        ]
    )
    s = run(stages, extra)
    assert s["knee"]["explanation"] == (
        "TPOT p95 passes 50 ms from 14 u (13 -> 23 ms): decode slowing as the batch grows (running requests "
        "4 -> 14, server time per token 12.9 -> 22.9 ms)"
    )
    assert "queueing" not in s["knee"]["explanation"]


def test_server_timings_come_first_and_give_client_and_network() -> None:
    t_good = {"queue": {"p99": 0.5, "mean": 0.1}, "prefill": {"p99": 20.0}, "client_network": {"p50": 0.4}}
    t_bad = {
        "queue": {"p99": 1800.0, "mean": 900.0},
        "prefill": {"p99": 21.0},
        "client_network": {"p50": 0.45},
    }
    before = stage(0, 32, 0, 40, 1.0, timings=t_good)
    after = stage(1, 48, 10, 80, 0.2, timings=t_bad)
    before["server_metrics"] = {"server_num_requests_waiting": {"mean": 0.0, "max": 0.0}}
    after["server_metrics"] = {
        "server_num_requests_waiting": {"mean": 12.0, "max": 14.0},
        "server_queue_time_mean_ms": {"mean": 5.0, "max": 5.0},
        "gpu_0_utilization_ratio": {"mean": 0.98, "max": 1.0},
        "gpu_0_memory_used_ratio": {"mean": 0.9, "max": 0.91},
    }
    before["server_metrics"]["gpu_0_utilization_ratio"] = {"mean": 0.45, "max": 0.5}
    text = explain(before, after, "TPOT p95 passes 50 ms from 48 u")
    assert text == (
        "TPOT p95 passes 50 ms from 48 u: queueing in the server (waiting requests 0 -> 12, queue time "
        "p99 0.5 -> 1800 ms); client and network flat at 0.4 -> 0.5 ms; GPU utilisation 45% -> 98%, "
        "memory 91%"
    )


def test_no_server_figures_says_so_and_a_quiet_server_says_it_did_not_move() -> None:
    before, after = stage(0, 4, 0, 40, 1.0), stage(1, 8, 10, 80, 0.2)
    assert "the server's own figures are not known" in explain(before, after, "X")
    before["server_metrics"] = {
        "server_num_requests_waiting": {"mean": 0.0},
        "server_itl_mean_ms": {"mean": 20.0},
        "server_num_requests_running": {"mean": 4.0},
    }
    after["server_metrics"] = {
        "server_num_requests_waiting": {"mean": 0.0},
        "server_itl_mean_ms": {"mean": 20.5},
        "server_num_requests_running": {"mean": 8.0},
    }
    assert explain(before, after, "X") == "X: the server's queue, batch and per-token time did not move"
    # a latency that rose while the server did not move, from a saturated load generator: said
    assert explain(before, after, "X", client_saturated=True) == (
        "X: the server's queue, batch and per-token time did not move; the load generator was saturated "
        "(self-check): its own delay is in our latencies"
    )


def test_the_run_self_check_reaches_the_knee_sentence() -> None:
    stages = [stage(0, 4, 1000, 40, 1.0), stage(1, 8, 1010, 80, 0.2)]
    extra = extra_for(
        [
            (1000, {"server_num_requests_running": 4, "server_itl_mean_ms": 20}),
            (1010, {"server_num_requests_running": 4.2, "server_itl_mean_ms": 20.5}),
        ]
    )
    quiet = run([dict(s) for s in stages], extra)["knee"]["explanation"]
    assert (
        quiet
        == "TPOT p95 passes 50 ms from 8 u (40 -> 80 ms): the server's queue, batch and per-token time did not move"
    )
    summary = {**SUMMARY_SLO, "stages": stages, "self_check": {"saturated": True, "level": "saturated"}}
    annotate(summary, extra)
    assert (
        summary["knee"]["explanation"]
        == quiet + "; the load generator was saturated (self-check): its own delay is in our latencies"
    )


def test_first_stage_failing_and_no_failing_stage() -> None:
    stages = [stage(0, 8, 1000, 80, 0.1), stage(1, 16, 1010, 90, 0.0)]
    extra = extra_for([(1000, {"server_num_requests_waiting": 5, "server_queue_time_mean_ms": 400})])
    s = run(stages, extra)
    assert s["knee"]["point"] is None and s["knee"]["first_failing_point"] == 0
    assert s["knee"]["explanation"] == (
        "TPOT p95 passes 50 ms from 8 u (80 ms): queueing in the server "
        "(waiting requests 5, queue time mean 400 ms)"
    )
    passing = run([stage(0, 8, 1000, 30, 1.0), stage(1, 16, 1010, 40, 1.0)], {})
    assert "knee" not in passing
    assert knee_block({"stages": []}, []) is None


def test_a_sweep_knee_gets_the_explanation_too() -> None:
    pts = [
        {**stage(0, 0, 1000, 30, 1.0), "concurrency": 4, "passed": True},
        {**stage(1, 0, 1010, 90, 0.1), "concurrency": 8, "passed": False, "reason": "slo"},
    ]
    for p in pts:
        p.pop("users")
    s = {**SUMMARY_SLO, "sweep": {"target": 0.95, "points": pts, "knee": {"concurrency": 4, "point": 0}}}
    annotate(
        s,
        extra_for(
            [
                (1000, {"server_num_requests_running": 4, "server_itl_mean_ms": 10}),
                (1010, {"server_num_requests_running": 8, "server_itl_mean_ms": 30}),
            ]
        ),
    )
    assert s["sweep"]["knee"]["explanation"] == s["knee"]["explanation"]
    assert s["knee"]["explanation"].startswith("TPOT p95 passes 50 ms from 8 u (30 -> 90 ms): decode slowing")


@pytest.mark.parametrize("kv", [0.94, 0.95])
def test_kv_cache_named_from_95_percent(kv: float) -> None:
    after = stage(1, 8, 10, 80, 0.2)
    after["server_metrics"] = {"server_kv_cache_usage_ratio": {"mean": kv, "max": kv}}
    assert figures(after)["kv"] == kv
    assert ("KV cache" in explain(None, after, "X")) is (kv >= 0.95)


def test_server_timings_per_point_and_the_residual() -> None:
    """Records carrying the server's own timings (``server_timings``, ns) are summarised per point,
    with the residual client and network = TTFT - queue - prefill per request."""
    from types import SimpleNamespace

    from llm_users.load.stages import add_timings
    from llm_users.metrics import Distribution

    into: dict[str, Any] = {}
    for q in (0, 1_000_000, 2_000_000):
        rec = SimpleNamespace(
            ttft_ns=30_400_000 + q,
            server_timings={
                "queue_ns": q,
                "prefill_ns": 30_000_000,
                "decode_ns": 100_000_000,
                "server_total_ns": 130_000_000 + q,
                "source": "timings",
            },
        )
        add_timings(into, rec, Distribution)
    add_timings(
        into,
        SimpleNamespace(ttft_ns=None, server_timings={"queue_ns": 5_000_000, "source": "x"}),
        Distribution,
    )
    assert sorted(into) == ["client_network", "decode", "prefill", "queue", "server_total"]
    assert into["queue"].count == 4 and into["prefill"].count == 3
    net = into["client_network"].summary_ms()
    assert (
        net["count"] == 3
        and net["min"] == pytest.approx(0.4, abs=0.001)
        and net["max"] == pytest.approx(0.4, abs=0.001)
    )
    assert into["queue"].summary_ms()["max"] == pytest.approx(5.0, rel=0.01)


def test_window_figures_skip_seconds_without_a_value() -> None:
    """An open-loop stage run's timeline has None cells (a rate not computed that second): the
    summary used to crash there (TypeError), losing the run's report."""
    from llm_users.load.explain import window_figures

    extra = {
        0: {"server_running": 2.0, "lag": None},
        1: {"server_running": 4.0, "lag": 3.0},
        2: {"lag": None},
    }
    figs = window_figures(extra, 0, 3)
    assert figs["server_running"] == {"mean": 3.0, "max": 4.0, "samples": 2}
    assert figs["lag"] == {"mean": 3.0, "max": 3.0, "samples": 1}


def test_window_figures_keep_a_bucket_quantiles_bounds_apart_from_its_estimates() -> None:
    """Issue 53 item 3: a stage's ``server_metrics`` averaged the p99 interpolated in vLLM's first
    bucket (297 ms for an empty queue); now only estimates are averaged, bound-only seconds counted."""
    q = "server_queue_time_p99"
    bound = {f"{q}_lo_ms": 0.0, f"{q}_hi_ms": 300.0, "server_queue_time_mean_ms": 0.0}
    extra = {
        0: bound,
        1: bound,
        2: {f"{q}_ms": 420.0, f"{q}_lo_ms": 300.0, f"{q}_hi_ms": 500.0},
        3: {f"{q}_lo_ms": 7_680_000.0},
    }
    figs = window_figures(extra, 0, 4)
    assert figs[f"{q}_ms"] == {
        "mean": 420.0,
        "max": 420.0,
        "samples": 1,
        "below_samples": 2,
        "below_ms": 300.0,
        "above_samples": 1,
        "above_ms": 7_680_000.0,
    }
    assert f"{q}_lo_ms" not in figs and f"{q}_hi_ms" not in figs
    assert window_figures({0: bound}, 0, 1)[f"{q}_ms"] == {
        "samples": 0,
        "below_samples": 1,
        "below_ms": 300.0,
    }
    assert figures({"server_metrics": window_figures({0: bound}, 0, 1)})["queue_mean"] == 0.0
