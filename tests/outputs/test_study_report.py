"""outputs/study_report.py on known points: the per-point table, the study charts' load labels
and SLO lines, repeated points' confidence intervals."""

from __future__ import annotations

from typing import Any

from llm_users.outputs.study_console import stages_lines, sweep_lines
from llm_users.outputs.study_report import pareto_chart, stage_chart, stages_section, sweep_section
from tests.outputs.study_points import LIMITS
from tests.outputs.study_points import stages_summary as _stages_summary


def test_report_table_charts_labels_and_slo_lines() -> None:
    s = _stages_summary()
    page = "".join(stages_section(s))
    assert "<b>KNEE</b> pass: 97.0% met every SLO" in page
    assert "fail: ttft p95 812 ms &gt; 500 ms (81% met); tpot p95 26.0 ms &gt; 20 ms (30% met)" in page
    assert "pooled over all 4 stages at different loads" in page
    assert page.count("<svg") == 2 and 'width="100%"' in page  # page-wide charts
    # every point labelled with its load (matplotlib keeps each text as a comment), SLO lines labelled
    pareto = pareto_chart(s["stages"], 1, LIMITS)
    assert pareto is not None
    for label in ("4 u", "8 u", "16 u", "32 u", "SLO TTFT ≤ 500 ms", "SLO TPOT ≤ 20 ms", "knee (SLO)"):
        assert f"<!-- {label} -->" in pareto, label
    stage = stage_chart(s["stages"], limits_ms=LIMITS)
    assert stage is not None
    for label in ("stage 0", "stage 3", "SLO TPOT ≤ 20 ms"):
        assert label in stage, label
    # a rate sweep: points labelled in req/s, the section names the knee
    pts = [dict(p, rate=p["users"] / 2, passed=i < 2, reason="x") for i, p in enumerate(s["stages"])]
    for p in pts:
        p.pop("users")
    sw = dict(s, sweep={"mode": "rate", "target": 0.95, "stopped": "converged", "points": pts,
                        "knee": {"rate": 4.0, "point": 1, "goodput_rps": 19.4, "share_meeting_all": 0.97}})
    page = "".join(sweep_section(sw))
    assert "knee at rate 4" in page and "<!-- 4 r/s -->" in page and "<b>KNEE</b>" in page


def _repeated(s: dict[str, Any]) -> dict[str, Any]:
    """--llm-repeat 3: each point with its ci block (throughput and TTFT/TPOT p99 intervals)."""
    from llm_users.load.repeats import ci_block

    for p in s["stages"]:
        reps = [dict(p, requests_per_s=p["requests_per_s"] * f, ttft=dict(p["ttft"], p99=p["ttft"]["p99"] * f))
                for f in (0.9, 1.0, 1.1)]
        p["ci"] = ci_block(reps)
    return s


def test_repeated_points_get_a_ci_column_a_method_line_and_error_bars() -> None:
    s = _repeated(_stages_summary())
    lines = stages_lines(s)
    assert "ci req/s" in lines[0]
    lo, hi = s["stages"][1]["ci"]["throughput_rps"]["low"], s["stages"][1]["ci"]["throughput_rps"]["high"]
    assert f"{lo:.2f}-{hi:.2f}" in lines[2] and lines[2].rstrip().endswith("<- knee")
    assert any("measured 3 times" in ln and "Student-t 95%" in ln for ln in lines)
    sw = dict(s, sweep={"mode": "concurrency", "target": 0.95, "stopped": "converged", "repeat": 3,
                        "knee": {"concurrency": 8, "point": 1, "goodput_rps": 40.0, "share_meeting_all": 0.97},
                        "knee_interval": {"low": 8, "high": 16, "rule": "r"},
                        "points": [dict(p, concurrency=p["users"], passed=i < 2, reason="r")
                                   for i, p in enumerate(s["stages"])]})
    assert any(ln.startswith("knee interval (3 repeats per point") and "concurrency 8 (surely passes) to 16" in ln
               for ln in sweep_lines(sw))
    page = "".join(sweep_section(sw))
    assert "<b>Knee interval</b>" in page and "concurrency 8" in page
    # error bars (matplotlib's LineCollection) only where the points have intervals
    plain = _stages_summary()
    bars = "LineCollection"
    assert bars in (stage_chart(s["stages"], limits_ms=LIMITS) or "")
    assert bars not in (stage_chart(plain["stages"], limits_ms=LIMITS) or "")
    assert bars in (pareto_chart(s["stages"], 1, LIMITS) or "")
    assert bars not in (pareto_chart(plain["stages"], 1, LIMITS) or "")
    assert "measured 3 times" in "".join(stages_section(s))


def test_the_arrivals_section_names_a_trace_not_an_arrival_law() -> None:
    """Issue 53 item 10: report.html said "poisson arrivals, seed 0" of a trace replay."""
    from llm_users.outputs.study_report import arrivals_section

    lag = {"p50": 1.0, "p99": 2.0}
    a = {"rate": None, "arrival": "poisson", "seed": 0, "achieved_rps": 5.9, "schedule_lag": lag,
         "ttft_from_schedule": lag, "e2e_from_schedule": lag, "cap_reached": False, "client_behind": False,
         "verdict": "kept to the schedule", "trace": "t.jsonl", "trace_speedup": 2, "trace_requests": 30}
    overall = {"ttft": {"p99": 3.0}, "e2e": {"p99": 4.0}}
    page = "".join(arrivals_section({"arrivals": a, "overall": overall}))
    assert "<p>Trace replay of t.jsonl&#x27;s 30 rows at speed-up 2, target the trace&#x27;s schedule, " in page
    assert "poisson" not in page and "seed" not in page
    page = "".join(arrivals_section({"arrivals": {**a, "trace": None, "rate": 4.0, "seed": 11}, "overall": overall}))
    assert "<p>poisson arrivals, seed 11, target 4 req/s, " in page
