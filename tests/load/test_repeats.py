"""--llm-repeat K: the Student-t interval, the per-point ``ci`` block and the knee's interval
(llm_users/load/repeats.py); the option's parser: tests/load/profiles/test_stages.py."""

from __future__ import annotations

import math

import pytest

from llm_users.load.repeats import ci_block, fold, knee_interval, mean_ci, passes_on_mean, t975


def test_t_quantiles() -> None:
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(30) == 2.042
    assert t975(60) == pytest.approx(2.000, abs=0.002) and t975(120) == pytest.approx(1.980, abs=0.002)
    with pytest.raises(ValueError):
        t975(0)


def test_mean_ci_is_student_t_95() -> None:
    ci = mean_ci([10.0, 12.0, 14.0])  # mean 12, sd 2, half = 4.303 * 2 / sqrt(3)
    half = 4.303 * 2 / math.sqrt(3)
    assert ci == pytest.approx({"mean": 12.0, "low": 12 - half, "high": 12 + half})
    assert mean_ci([5.0, 5.0]) == {"mean": 5.0, "low": 5.0, "high": 5.0}
    assert mean_ci([7.0, None]) == {"mean": 7.0, "low": None, "high": None}
    assert mean_ci([None]) is None


def _stage(rps: float, share: float | None, ttft_p99: float = 50.0, requests: int = 20) -> dict:
    st = {"requests_per_s": rps, "output_tokens_per_s": 10 * rps, "ttft": {"p99": ttft_p99}, "tpot": {"p99": 9.0},
          "e2e": {"p99": 200.0}, "requests": requests, "start": 0.0, "end": 1.0, "measured_s": 1.0}
    if share is not None:
        st["slo"] = {"share_meeting_all": share, "goodput_rps": rps * share}
    return st


def test_ci_block_and_fold_keep_the_pooled_keys() -> None:
    reps = [_stage(4.0, 1.0), _stage(5.0, 1.0), _stage(6.0, 0.9)]
    block = ci_block(reps)
    assert block["repeats"] == 3 and "Student-t" in block["method"]
    assert block["throughput_rps"]["mean"] == pytest.approx(5.0)
    assert block["throughput_rps"]["low"] == pytest.approx(5 - 4.303 / math.sqrt(3))
    assert block["goodput"]["mean"] == pytest.approx((4 + 5 + 5.4) / 3)
    assert set(block) >= {"ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms", "output_tokens_per_s", "share_meeting_all"}
    pooled = {"index": 0, "users": 4, "requests": 60, "requests_per_s": 5.0}
    entry = fold(pooled, reps)
    assert entry["requests"] == 60 and entry["users"] == 4 and entry["ci"] == block
    assert [r["throughput_rps"] for r in entry["repeats"]] == [4.0, 5.0, 6.0]
    no_slo = ci_block([_stage(1.0, None)])
    assert "share_meeting_all" not in no_slo and "goodput" not in no_slo  # a metric no repeat has is left out


def test_a_repeated_point_passes_on_the_mean_share() -> None:
    assert passes_on_mean([_stage(1, 1.0), _stage(1, 0.9), _stage(1, 0.97)], 0.95, 5) == (True, pytest.approx(0.9567,
                                                                                                              abs=1e-3))
    assert passes_on_mean([_stage(1, 1.0), _stage(1, 0.8), _stage(1, 0.97)], 0.95, 5)[0] is False
    assert passes_on_mean([_stage(1, 1.0, requests=1)] * 3, 0.95, 5)[0] is False


def _point(load: float, shares: list[float]) -> dict:
    return {"concurrency": load, "ci": ci_block([_stage(1.0, s) for s in shares])}


def test_knee_interval_from_the_sure_pass_to_the_sure_fail() -> None:
    points = [_point(4, [1, 1, 1]), _point(8, [1, 1, 1]), _point(16, [1, 0.99, 1]), _point(32, [0, 0, 0]),
              _point(24, [0, 0.1, 0]), _point(20, [0.96, 0.9, 0.99]), _point(22, [0.2, 0.3, 0.1])]
    ki = knee_interval(points, "concurrency", 0.95)
    # 20's mean 0.95 but its CI lower bound is below: not a sure pass; 22 surely fails
    assert (ki["low"], ki["high"]) == (16, 22) and "lower bound" in ki["rule"]
    assert knee_interval([_point(4, [0, 0, 0])], "concurrency", 0.95) == {**ki, "low": None, "high": 4}
    assert knee_interval([_point(4, [1, 1, 1])], "concurrency", 0.95)["high"] is None
    # measured once (the budget ran out): sure of nothing; over-saturated: surely fails
    once = [_point(16, [1, 1, 1]), _point(21, [0.9]), _point(22, [0, 0, 0])]
    assert (lambda k: (k["low"], k["high"]))(knee_interval(once, "concurrency", 0.95)) == (16, 22)
    guard = [_point(16, [1, 1, 1]), dict(_point(32, [1.0]), reason="over-saturated")]
    assert knee_interval(guard, "concurrency", 0.95)["high"] == 32
