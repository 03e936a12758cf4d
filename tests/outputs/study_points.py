"""The stage points the study tests (console, report, SLO verdicts, headline) read: four loads
against two SLO limits, the knee at 8 users."""

from __future__ import annotations

from typing import Any

LIMITS = {"ttft": 500.0, "tpot": 20.0}


def point(index: int, users: float, ttft95: float, tpot95: float, shares: dict[str, float], n: int = 100,
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


def stages_summary() -> dict[str, Any]:
    points = [
        point(0, 4, 60, 13, {"ttft": 1.0, "tpot": 1.0}),
        point(1, 8, 70, 18, {"ttft": 1.0, "tpot": 0.97}),
        point(2, 16, 812, 26, {"ttft": 0.81, "tpot": 0.30}),
        point(3, 32, 900, 35, {"ttft": 0.70, "tpot": 0.0}, failures=12),
    ]
    return {"overall": {"slo": {"limits_ms": LIMITS, "goodput_rps": 42.0, "share_meeting_all": 0.6,
                                "pooled_over_loads": True}},
            "stages": points}
