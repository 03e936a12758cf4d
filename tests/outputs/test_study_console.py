"""outputs/study_console.py on known points: the console tables say which SLO failed, label the
pooled goodput, name the search result and the guard note."""

from __future__ import annotations

from typing import Any

from llm_users.outputs.study_console import stages_lines, sweep_lines
from llm_users.outputs.study_report import sweep_section
from llm_users.outputs.study_slo import (
    pooled_goodput_text,
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
