"""outputs/study_console.py on known points: the console tables say which SLO failed, label the
pooled goodput, name the search result and the guard note."""

from __future__ import annotations

from llm_users.outputs.study_console import stages_lines, sweep_lines
from llm_users.outputs.study_report import sweep_section
from llm_users.outputs.study_slo import (
    pooled_goodput_text,
)
from tests.outputs.study_points import LIMITS
from tests.outputs.study_points import point as _point
from tests.outputs.study_points import stages_summary as _stages_summary


def test_console_tables_say_which_slo_failed_and_label_the_pooled_goodput() -> None:
    s = _stages_summary()
    lines = stages_lines(s)
    assert "goodput" in lines[0] and "result" in lines[0] and lines[0].startswith("stages (settle window excluded)")
    assert lines[2].rstrip().endswith("pass: 97.0% met every SLO  <- knee")
    assert "fail: ttft p95 812 ms > 500 ms (81% met); tpot p95 26.0 ms > 20 ms (30% met)" in lines[3]
    assert "12 of 100 requests failed" in lines[4]
    assert any(ln.startswith("knee (highest load meeting the SLOs") and "8 u (stage 1)" in ln for ln in lines)
    pooled = [ln for ln in lines if "goodput pooled over all 4 stages at different loads" in ln]
    assert len(pooled) == 1 and "42.00 req/s" in pooled[0] and "not a capacity figure" in pooled[0]
    # the sweep prints its points itself (with the sweep's judgement), not the stages profile
    sw = dict(s, sweep={"mode": "concurrency", "target": 0.95, "stopped": "converged",
                        "knee": {"concurrency": 8, "point": 1, "goodput_rps": 40.0, "share_meeting_all": 0.97},
                        "points": [dict(p, concurrency=p["users"], passed=i < 2, reason="r")
                                   for i, p in enumerate(s["stages"])]})
    assert stages_lines(sw) == []
    lines = sweep_lines(sw)
    assert lines[0].startswith("sweep points") and "result" in lines[0]
    assert "<- knee" in lines[2] and "fail: ttft p95 812 ms" in lines[3]
    assert any(ln.startswith("SLO sweep (concurrency): knee at concurrency 8") for ln in lines)
    assert "goodput pooled over all 4 sweep points" in lines[-1]
    # without SLOs: no result column, no pooled line
    plain = {"overall": {}, "stages": [{k: v for k, v in p.items() if k != "slo"} for p in s["stages"]]}
    lines = stages_lines(plain)
    assert "result" not in lines[0] and len(lines) == 5
    assert pooled_goodput_text(plain) is None


def test_the_search_result_and_the_guard_note_in_console_and_report() -> None:
    """Issue 29: the max load under the SLOs with its tolerance, and a guard-ended point's own words."""
    s = _stages_summary()
    note = ("over-saturated: latency from the schedule grew without bound (2.5x) and the requests in flight "
            "grew by 30.0/s; point ended early")
    pts = [dict(p, concurrency=p["users"], passed=i < 2, reason="over-saturated" if i == 3 else "r")
           for i, p in enumerate(s["stages"])]
    pts[3]["note"] = note
    text = "max load under the SLOs: 8 users (within +-1 user: 9 failed)"
    sw = dict(s, sweep={"mode": "concurrency", "target": 0.95, "stopped": "converged", "max_load": text,
                        "knee": {"concurrency": 8, "point": 1, "goodput_rps": 40.0, "share_meeting_all": 0.97},
                        "points": pts})
    lines = sweep_lines(sw)
    assert text in lines and "goodput pooled" in lines[-1]
    assert any("fail: over-saturated (latency from the schedule grew without bound (2.5x) and the requests in "
               "flight grew by 30.0/s; point ended early)" in ln for ln in lines), lines
    page = "".join(sweep_section(sw))
    assert f"<b>Search:</b> {text}." in page


def _arrivals(**extra: object) -> dict:
    lag = {"p50": 1.0, "p99": 2.0}
    return {"rate": None, "arrival": "poisson", "seed": 0, "max_inflight": 256, "achieved_rps": 5.9,
            "schedule_lag": lag, "ttft_from_schedule": lag, "e2e_from_schedule": lag, "cap_reached": False,
            "client_behind": False, "verdict": "the client kept to the schedule", **extra}


def test_a_trace_replay_is_named_with_its_rows_not_an_arrival_law() -> None:
    """Issue 53 item 10: `--llm-trace FILE` printed "open loop (poisson, seed 0)": the trace
    decides the send times, so no arrival law or seed is named, only the trace's rows and speed-up."""
    from llm_users.outputs.study_console import arrivals_lines

    trace = _arrivals(trace="t.jsonl", trace_speedup=2, trace_requests=30, trace_format="mooncake", trace_window=None)
    line = arrivals_lines({"arrivals": trace})[0]
    assert line.startswith("open loop (trace replay of t.jsonl's 30 rows at speed-up 2): target the trace's schedule, "
                           "achieved 5.90 req/s;"), line
    assert "poisson" not in line and "seed" not in line
    windowed = arrivals_lines({"arrivals": dict(trace, trace_window=[60, None], trace_speedup=1)})[0]
    assert windowed.startswith("open loop (trace replay of t.jsonl's 30 rows (seconds 60 to its end of it) at speed-up 1)")
    law = arrivals_lines({"arrivals": _arrivals(rate=4, seed=11)})[0]
    assert law.startswith("open loop (poisson, seed 11): target 4 req/s, achieved 5.90 req/s;")


def test_a_sweep_short_of_data_says_so_and_never_a_miss() -> None:
    """Issue 53 item 2: the only point (1 user, 2 requests, TTFT p95 101 ms, all met) printed "no
    load met the SLOs; even the lowest load misses the SLOs" and "TTFT p95 passes 500 ms from 1 u
    (101 ms)". It is not enough data: the console, the report and the knee's explanation say so
    and nothing calls it a miss."""
    from llm_users.load.explain import annotate
    from llm_users.load.search import max_load_text, verdict_text

    p = dict(_point(0, 1, 101, 12, {"ttft": 1.0, "tpot": 1.0}, n=2), concurrency=1, passed=None,
             verdict="not enough data", reason="not enough data: 2 requests measured, 5 needed")
    sw = {"mode": "concurrency", "target": 0.95, "knee": None, "bracket": [None, None], "converged": False,
          "stopped": "budget used", "tolerance": {"text": "1 user"}, "points": [p]}
    sw["verdict"], sw["max_load"] = verdict_text(sw), max_load_text(sw)
    s = {"overall": {"slo": {"limits_ms": LIMITS}}, "stages": [p], "sweep": sw}
    annotate(s, {})
    lines = sweep_lines(s)
    page = "".join(sweep_section(s))
    said = "not enough data at 1 user (2 requests measured, 5 needed): lengthen -t or use fewer --llm-sweep-points"
    assert f"SLO sweep (concurrency): {said}; stopped: budget used" in lines
    assert lines[1].rstrip().endswith("not enough data: 2 requests measured, 5 needed")
    assert said in page and "max load under the SLOs: not known (not enough data at 1 user)" in page
    for text in ("\n".join(lines), page, str(s.get("knee"))):
        assert "miss" not in text and "no load met" not in text and " passes " not in text
