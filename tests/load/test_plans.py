"""load/plans.py: the load options parsed and checked: the open-loop rate and in-flight cap, the
stage plans of ``--llm-stages``/``--llm-steps`` (one-line errors) and the settle rule."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.load.plans import StagePlan, parse_cap, parse_rate, parse_stages, parse_steps, settle_for


def test_parse() -> None:
    assert parse_rate("12.5") == 12.5 and parse_rate(None) is None and parse_rate("") is None
    assert parse_cap("8") == 8 and parse_cap(None) is None and parse_cap("0") is None
    for bad in ("-1", "x", "inf"):
        with pytest.raises(ConfigError, match="--llm-rate"):
            parse_rate(bad)
    for bad in ("-2", "1.5", "x"):
        with pytest.raises(ConfigError, match="--llm-max-inflight"):
            parse_cap(bad)


def test_parse_stages_and_steps() -> None:
    assert parse_stages("50:60s,100:2m") == [StagePlan(50, 60), StagePlan(100, 120)]
    steps = parse_steps("8:64:8:5s")
    assert [s.load for s in steps] == [8, 16, 24, 32, 40, 48, 56, 64] and all(s.duration_s == 5 for s in steps)
    assert [s.load for s in parse_steps("0.5:2:0.5:1s")] == [0.5, 1.0, 1.5, 2.0]


@pytest.mark.parametrize(("fn", "text", "msg"), [
    (parse_stages, "50", "LOAD:DURATION"), (parse_stages, "50:60", "bare number"), (parse_stages, "x:60s", "load"),
    (parse_stages, "", "no stage"), (parse_steps, "8:64:8", "START:STOP:STEP:DURATION"),
    (parse_steps, "8:64:0:5s", "STEP > 0"), (parse_steps, "64:8:8:5s", "STOP >= START"),
    (parse_stages, "5:0s", "more than 0")])
def test_bad_plans_are_one_line_errors(fn, text, msg) -> None:
    with pytest.raises(ConfigError, match=msg):
        fn(text)


def test_settle_rule() -> None:
    assert settle_for(60, None) == pytest.approx(12)
    assert settle_for(600, None) == 30  # capped
    assert settle_for(60, 5) == 5 and settle_for(3, 5) == 3
