"""load/profiles/stages.py: ``--llm-repeat K`` (its parser, each stage repeated, a plain run's K
stages) read by the study parser and checked against a trace."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.load.profiles.stages import StagePlan, parse_repeat, plain_plan, repeated


def test_repeat_option_and_plans() -> None:
    assert parse_repeat(None) == 1 and parse_repeat("3") == 3
    for bad in ("0", "-2", "x", "1.5"):
        with pytest.raises(ConfigError, match="--llm-repeat must be a whole number >= 1"):
            parse_repeat(bad)
    assert repeated((StagePlan(2, 5), StagePlan(4, 5)), 2) == [StagePlan(2, 5), StagePlan(2, 5), StagePlan(4, 5),
                                                              StagePlan(4, 5)]
    assert plain_plan(8, 30, 3) == (StagePlan(8, 9.0),)  # 30 s less a 3 s reserve, split in 3


def test_repeat_is_read_by_the_study_parser_and_checked() -> None:
    from argparse import Namespace

    from llm_users.load import study

    def opts(**given: object) -> Namespace:
        names = ("llm_rate", "llm_arrival", "llm_seed", "llm_max_inflight", "llm_stages", "llm_steps", "llm_settle",
                 "llm_repeat", "llm_sweep", "llm_sweep_start", "llm_sweep_target", "llm_sweep_points", "llm_trace",
                 "llm_trace_speedup", "num_users")
        return Namespace(**{**dict.fromkeys(names), **given})

    cfg = study.parse_options(opts(llm_steps="2:8:2:10s", llm_repeat="3")).part("stages")
    assert cfg.repeat == 3 and len(cfg.plan) == 4
    plain = study.parse_options(opts(llm_repeat="2", num_users=8)).part("stages")
    assert plain.repeat == 2 and plain.plan is None and plain.users == 8
    assert study.parse_options(opts()).part("stages") is None  # nothing asked: no stages part
    with pytest.raises(ConfigError, match="--llm-repeat must be a whole number >= 1"):
        study.parse_options(opts(llm_repeat="0"))
    with pytest.raises(ConfigError, match="--llm-repeat does not apply to --llm-trace"):
        study.parse_options(opts(llm_repeat="2", llm_trace="t.jsonl"))
