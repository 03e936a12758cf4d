"""Issue 28: report.html's first screen: the load plan in words (each load profile's
``describe``), summary.json's ``setup`` block, the headline strip and its one-sentence
self-check, the header that says each thing once, and the charts chosen by the load type."""

from __future__ import annotations

from argparse import Namespace

import pytest

from llm_users.load.registry import describe, parse_options
from llm_users.load.schedule_series import ScheduleSeries
from llm_users.metrics import RequestRecord
from llm_users.options import RunConfig
from llm_users.outputs.html_headline import cells, headline, verdict
from llm_users.outputs.html_report import render
from llm_users.outputs.html_timecharts import stage_marks, with_target
from llm_users.outputs.setup import setup_block
from llm_users.users import VLLMUser


@pytest.mark.parametrize(("opts", "kind", "text"), [
    ({"llm_steps": "8:64:8:2s"}, "stages", "8 stages of 2 s: 8 to 64 users, step 8"),
    ({"llm_stages": "5:3s,10:2s", "llm_arrival": "constant"}, "stages",
     "2 stages: 5 req/s for 3 s, 10 req/s for 2 s; constant arrivals"),
    ({"llm_sweep": "concurrency", "llm_sweep_start": "4", "llm_sweep_points": "6"}, "sweep",
     "SLO sweep of concurrency: from 4 users, at most 6 points, target 95% of requests meeting every SLO, "
     "bisection to within 1 user"),
    ({"llm_sweep": "rate", "llm_arrival": "gamma:2", "llm_seed": "1"}, "sweep",
     "SLO sweep of rate: from 1 req/s, at most 12 points, target 95% of requests meeting every SLO, "
     "bisection to within 5%; "
     "gamma:2 arrivals (seed 1)"),
    ({"llm_rate": "20", "llm_max_inflight": "4", "llm_seed": "3"}, "open_loop",
     "open loop: 20 req/s, poisson arrivals (seed 3), at most 4 in flight"),
    ({"llm_trace": "t.jsonl", "llm_trace_speedup": "2"}, "trace", "trace replay of t.jsonl, 2x faster"),
])
def test_each_profile_says_its_plan(opts, kind, text) -> None:
    assert describe(parse_options(Namespace(**opts))) == {kind: text}


def test_a_plain_run_says_users_and_spawn_rate() -> None:
    assert describe(parse_options(Namespace())) == {}
    options = Namespace(num_users=8, spawn_rate=2.0, run_time=30, llm_slo="ttft=500ms,tpot=50ms",
                        llm_input_tokens="512", llm_output_tokens="128:256", llm_max_tokens="300")
    config = RunConfig.from_options(options, [VLLMUser])
    s = setup_block(config, vars(options))
    assert s["load_plan"]["text"] == "8 users, spawned at 2/s; for 30 s"
    assert s["load_plan"]["kind"] == "users" and s["load_plan"]["users"] == 8
    assert (s["backend"], s["input_tokens"], s["output_tokens"], s["max_tokens"]) == ("vllm", "512", "128:256", 300)
    assert s["slos_ms"] == {"ttft": 500.0, "tpot": 50.0} and s["dataset"] is None
    steps = setup_block(RunConfig.from_options(Namespace(llm_steps="2:6:2:3s", run_time=9), [VLLMUser]), {})
    assert steps["load_plan"]["profiles"]["stages"]["plan"][0] == {"load": 2.0, "duration_s": 3.0}
    assert steps["load_plan"]["text"] == "3 stages of 3 s: 2 to 6 users, step 2; for 9 s"


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


def _summary(failures: int = 0, level: str | None = "healthy", **overall: object) -> dict:
    dist = {"p50": 20.0, "p99": 30.0, "p90": 25.0, "p95": 27.0, "p99.9": 31.0, "mean": 21.0, "min": 10.0,
            "max": 40.0, "count": 100}
    ov = {"requests": 100, "successes": 100 - failures, "failures": failures, "excluded_warmup": 4,
          "output_tokens_per_s": 950.0, "requests_per_s": 31.5, "input_tokens": 10000, "output_tokens": 3000,
          "ttft": dist, "ttfb": dist, "itl": dist, "tpot": {**dist, "p50": 3.0, "p99": 3.5}, "e2e": dist,
          "failures_by_category": {"http_500": failures} if failures else {},
          "slo": {"limits_ms": {"ttft": 60.0}, "goodput_rps": 30.0, "share_meeting_all": 0.96}, **overall}
    check = {"message": "client healthy: its own delay stayed small", "saturated": False, "nodes": []}
    if level:
        check["level"] = level
    return {"host": "http://h:1", "overall": ov, "by_name": {"/x": ov}, "self_check": check,
            "window": {"test_start": 1000.0, "test_stop": 1010.0, "measured_s": 9.5},
            "environment": {"options": {"locustfile": "vllm.py"}, "backends_models": [{"backend": "vllm",
                                                                                      "model": "m1"}],
                            "server": {"version": "0.9"}},
            "setup": {"backend": "vllm", "model": None, "load_plan": {"text": "8 users, spawned at 2/s; for 10 s"},
                      "input_tokens": "100", "output_tokens": "30", "max_tokens": 64, "temperature": 0.0,
                      "ignore_eos": True, "slos_ms": {"ttft": 60.0}}}


def _rows(failures: int = 0) -> list[dict]:
    return [{"time": 1000 + i, "users": 8, "requests_started": 3, "requests_finished": 3, "failures": failures,
             "output_tokens_per_s": 90, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "itl_p50_ms": 3.0,
             "itl_p99_ms": 4.0} for i in range(10)]


def test_headline_strip_has_the_numbers_and_tokens_per_request() -> None:
    got = {k: v for k, v, _ in cells(_summary())}
    assert got["Goodput"] == "30.0 req/s" and got["SLO attainment"] == "96.0%"
    assert got["Output tokens/s"] == "950.0" and got["Requests/s"] == "31.5"
    assert got["TTFT p50 / p99"] == "20.0 / 30.0" and got["TPOT p50 / p99"] == "3.000 / 3.500"
    assert got["Tokens per request"] == "100.0 / 30.0"  # from the totals: 10000 and 3000 over 100 successes
    given = _summary(input_tokens_per_request={"p50": 98, "mean": 99.5},
                     output_tokens_per_request={"p50": 30, "mean": 29.0}, total_tokens_per_s=4100.0)
    got = {k: (v, s) for k, v, s in cells(given)}
    assert got["Tokens per request"] == ("98 / 30", "p50 in / out; mean 99.5 / 29.0")
    assert got["Total tokens/s"][0] == "4100.0"
    no_slo = _summary()
    del no_slo["overall"]["slo"]
    assert "Goodput" not in {k for k, _, _ in cells(no_slo)}


@pytest.mark.parametrize(("level", "saturated", "css"), [
    ("healthy", False, "lv-ok"), ("caution", False, "lv-warn"), ("saturated", True, "lv-bad"),
    ("failed", False, "lv-bad"), ("unmeasured", False, "lv-none"), (None, False, "lv-ok"), (None, True, "lv-bad"),
])
def test_the_verdict_is_one_sentence_coloured_by_its_level(level, saturated, css) -> None:
    s = _summary(level=level)
    s["self_check"]["saturated"] = saturated
    line = verdict(s)
    assert line.count("<p") == 1 and f"verdict {css}" in line
    assert "client healthy: its own delay stayed small" in line
    assert "Client self-check" in headline(s)


def test_header_says_each_thing_once_and_no_empty_failures_chart() -> None:
    page = render(_summary(), _rows())
    for text in ("8 users, spawned at 2/s", "synthetic prompts of 100 input tokens", "30 output tokens",
                 "64 (temperature 0.0, ignore_eos on)", "TTFT ≤ 60 ms", "(version 0.9)", "Goodput"):
        assert text in page, text
    assert page.count("http://h:1") == 1 and page.count("measured window") == 1
    assert page.index("Goodput") < page.index("Load plan") < page.index("Per request name")
    assert "failures/s" not in page and "Failures over time" not in page
    failing = render(_summary(failures=5), _rows(failures=1))
    assert "failures/s" in failing  # folded into the requests chart when there were failures


def test_open_loop_charts_and_stage_marks() -> None:
    rows = [{**r, "users": 1, "offered_rps": 20, "sent_rps": 19, "in_flight": 2.5, "schedule_lag_mean_ms": 1.0,
             "schedule_lag_max_ms": 3.0} for r in _rows()]
    s = _summary()
    s["setup"]["load_plan"] = {"text": "open loop: 20 req/s, poisson arrivals", "profiles": {"open_loop": {"rate": 20}}}
    page = render(s, rows)
    for title in ("Arrival rate: offered vs achieved", "In-flight requests over time", "Schedule lag over time"):
        assert title in page
    assert "active users" not in page and "Requests over time" not in page
    assert [r["target_rps"] for r in with_target(rows, s)] == [20] * 10
    stages = {"stages": [{"rate": 5, "start": 1000.0, "end": 1004.0}, {"rate": 10, "start": 1004.0, "end": 1010.0}]}
    assert stage_marks(stages) == [1004.0]
    assert [r["target_rps"] for r in with_target(rows, stages)] == [5] * 4 + [10] * 6


def test_node_warnings_do_not_contradict_the_verdict_colour() -> None:
    s = _summary(level="caution")
    s["self_check"]["nodes"] = [{"node": "local", "reasons": [], "warnings": ["other processes held the core"]}]
    page = render(s, _rows())
    # the verdict carries the colour; the nodes' evidence is folded under it, uncoloured
    assert ("<details class='note'><summary>Self-check details (1)</summary><ul>"
            "<li>local: other processes held the core</li></ul></details>") in page
    assert "<p class='bad'>" not in page
    s["self_check"].pop("level")  # an older self-check: its warnings stay red, as before
    assert "<p class='bad'>local: other processes held the core</p>" in render(s, _rows())


def test_a_connection_per_request_is_a_note_as_on_the_console() -> None:
    dist = {"p50": 0.61, "p99": 2.3, "count": 100}
    page = render(_summary(connections_opened=100, connect=dist), _rows())
    assert ("<p class='note'>100 of 100 requests opened their own connection (connect p50 0.61 ms, p99 2.30 ms): "
            "before t0, so in no latency figure here, only in the request rate.</p>") in page
    assert "opened their own connection" not in render(_summary(connections_opened=4, connect=dist), _rows())
