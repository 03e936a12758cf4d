"""outputs/html_headline.py: report.html's headline strip and its one-sentence self-check, a
study's headline (issue 28)."""

from __future__ import annotations

from typing import Any

import pytest

from llm_users.outputs.html_headline import cells, headline, verdict


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
