"""outputs/study_slo.py, study_console.py, study_report.py on known points: which SLO failed,
the knee, the per-point table (console and HTML), the pooled goodput labelled as such, and the
study charts' load labels and SLO lines."""

from __future__ import annotations

from typing import Any

from llm_users.outputs.study_console import stages_lines, sweep_lines
from llm_users.outputs.study_report import pareto_chart, stage_chart, stages_section, sweep_section
from llm_users.outputs.study_slo import (
    kind_of,
    load_label,
    point_verdict,
    pooled_goodput_text,
    slo_misses,
    stage_knee,
    target_percentile,
    verdicts,
)

LIMITS = {"ttft": 500.0, "tpot": 20.0}


def _point(index: int, users: float, ttft95: float, tpot95: float, shares: dict[str, float], n: int = 100,
           failures: int = 0, **extra: Any) -> dict[str, Any]:
    all_share = min(shares.values()) - failures / n
    return {"index": index, "users": users, "requests": n, "excluded": 3, "failures": failures,
            "successes": n - failures, "requests_per_s": users * 5.0, "output_tokens_per_s": users * 50.0,
            "output_tokens": (n - failures) * 10,
            "ttft": {"p50": ttft95 / 2, "p95": ttft95, "p99": ttft95 * 1.2, "mean": ttft95 / 2},
            "tpot": {"p50": tpot95 * 0.9, "p95": tpot95, "p99": tpot95 * 1.1},
            "e2e": {"p50": 100.0 + users, "p99": 120.0 + users, "mean": 100.0 + users},
            "slo": {"limits_ms": LIMITS, "share_meeting": shares, "share_meeting_all": all_share,
                    "goodput_rps": users * 5.0 * all_share},
            **extra}


def _stages_summary() -> dict[str, Any]:
    points = [
        _point(0, 4, 60, 13, {"ttft": 1.0, "tpot": 1.0}),
        _point(1, 8, 70, 18, {"ttft": 1.0, "tpot": 0.97}),
        _point(2, 16, 812, 26, {"ttft": 0.81, "tpot": 0.30}),
        _point(3, 32, 900, 35, {"ttft": 0.70, "tpot": 0.0}, failures=12),
    ]
    return {"overall": {"slo": {"limits_ms": LIMITS, "goodput_rps": 42.0, "share_meeting_all": 0.6,
                                "pooled_over_loads": True}},
            "stages": points}


def test_target_percentile_and_labels() -> None:
    assert [target_percentile(t) for t in (0.5, 0.9, 0.95, 0.97, 0.99, 0.999, 1.0)] == \
        ["p50", "p90", "p95", "p99", "p99", "p99.9", "p99.9"]
    assert load_label({"users": 16}) == "16 u" and load_label({"rate": 7.5}) == "7.5 r/s"
    assert load_label({"users": 16, "concurrency": 16}) == "16 u"
    assert kind_of([{"users": 1, "concurrency": 1}]) == "concurrency" and kind_of([{"rate": 2}]) == "rate"


def test_slo_misses_names_the_metric_its_percentile_and_the_limit() -> None:
    p = _stages_summary()["stages"][2]
    assert slo_misses(p, LIMITS, 0.95) == ["ttft p95 812 ms > 500 ms (81% met)", "tpot p95 26.0 ms > 20 ms (30% met)"]
    # a metric met by enough requests is not named; failures are
    p3 = _stages_summary()["stages"][3]
    assert slo_misses(p3, {"tpot": 20.0}, 0.95) == ["tpot p95 35.0 ms > 20 ms (0% met)", "12 of 100 requests failed"]
    # ITL's SLO bounds each request's largest gap: its share, no percentile
    itl = {"slo": {"share_meeting": {"itl": 0.5}, "share_meeting_all": 0.5}, "requests": 10}
    assert slo_misses(itl, {"itl": 40.0}, 0.95) == ["largest ITL ≤ 40 ms met by 50.0% < 95%"]
    # each alone held, together not
    both = {"slo": {"share_meeting": {"ttft": 0.96, "tpot": 0.96}, "share_meeting_all": 0.92}, "requests": 50}
    assert slo_misses(both, LIMITS, 0.95) == ["every SLO together met by 92.0% < 95%"]


def test_point_verdicts_stages_and_sweep() -> None:
    s = _stages_summary()
    vs = verdicts(s, s["stages"])
    assert [v.passed for v in vs] == [True, True, False, False]
    assert vs[0].text == "pass: 100.0% met every SLO" and vs[1].text == "pass: 97.0% met every SLO"
    assert vs[2].text == "fail: ttft p95 812 ms > 500 ms (81% met); tpot p95 26.0 ms > 20 ms (30% met)"
    assert [v.knee for v in vs] == [False, True, False, False]  # the highest passing below every failing
    # too few requests
    few = _point(0, 2, 10, 5, {"ttft": 1.0, "tpot": 1.0}, n=3)
    assert point_verdict(few, LIMITS, 0.95).text == "fail: only 3 requests measured"
    # a sweep point: the sweep's own judgement, its reason kept when saturated
    sat = _point(5, 64, 2000, 40, {"ttft": 0.4, "tpot": 0.1}, passed=False, reason="over-saturated")
    v = point_verdict(sat, LIMITS, 0.95)
    assert v.passed is False and v.text.startswith("fail: over-saturated") and "tpot p95 40.0 ms > 20 ms" in v.text
    assert point_verdict({"index": 1, "users": 3, "passed": None, "reason": "not judged (run stopped)"}, LIMITS,
                         0.95).text == "not judged (run stopped)"
    # no SLOs: no verdicts at all
    assert verdicts({"overall": {}}, s["stages"]) == []


def test_stage_knee_is_below_every_failing_load() -> None:
    s = _stages_summary()
    vs = verdicts(s, s["stages"])
    assert stage_knee(vs) == 1
    # a pass above a failure is no knee (the load that passed again is noise, not capacity)
    s["stages"][3] = _point(3, 32, 60, 13, {"ttft": 1.0, "tpot": 1.0})
    assert stage_knee(verdicts(s, s["stages"])) == 1


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


def test_report_headline_of_a_study_leads_with_the_knee_and_labels_the_pooled_goodput() -> None:
    from llm_users.outputs.html_headline import cells

    s = _stages_summary()
    s["overall"].update(requests=400, failures=12, output_tokens_per_s=1.0, requests_per_s=1.0)
    got = {k: (v, small) for k, v, small in cells(s)}
    assert got["Goodput at the knee"] == ("38.80 req/s", "at 8 u, 97.0% met every SLO")
    assert got["Points meeting the SLOs"] == ("2 of 4", "stages with ≥ 95% of requests meeting every SLO")
    assert got["Goodput, pooled"] == ("42.00 req/s", "over all 4 stages at different loads: not a capacity figure")
    assert "Goodput" not in got and "SLO attainment" not in got  # a plain run's cells, which would mislead here
    s["stages"] = s["stages"][2:]  # only failing stages: no knee
    got = {k: (v, small) for k, v, small in cells(s)}
    assert got["Goodput at the knee"] == ("-", "no stage met the SLOs") and got["Points meeting the SLOs"][0] == "0 of 2"


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
