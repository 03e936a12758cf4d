"""outputs/study_slo.py on known points: the target percentile, which SLO failed, each point's
verdict, the knee."""

from __future__ import annotations

from llm_users.outputs.study_slo import (
    kind_of,
    knee_sentence,
    load_label,
    point_verdict,
    slo_misses,
    stage_knee,
    target_percentile,
    verdicts,
)
from tests.outputs.study_points import LIMITS
from tests.outputs.study_points import point as _point
from tests.outputs.study_points import stages_summary as _stages_summary


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
    # too few requests: not enough data (passed None), never a miss
    few = _point(0, 2, 10, 5, {"ttft": 1.0, "tpot": 1.0}, n=3)
    v = point_verdict(few, LIMITS, 0.95)
    assert (v.passed, v.text) == (None, "not enough data: 3 requests measured, 5 needed")
    only_few = {**s, "stages": [few]}
    assert knee_sentence(only_few, [few]) == "no stage had enough data to judge (at least 5 measured requests)"
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
