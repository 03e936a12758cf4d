"""load/profiles/open_loop.py: ``--llm-rate`` and its companions as a profile: always a config (the
engine attaches on every node), open loop when a rate or an arrival law is given, the arrivals in
words, and the engine attached on every role (its run part: test_open_loop_run.py)."""

from __future__ import annotations

from argparse import Namespace

import pytest

from llm_users.errors import ConfigError
from llm_users.load.profile import StudyConfig
from llm_users.load.profiles.open_loop import OpenLoop, OpenLoopConfig, arrival_clause
from llm_users.load.profiles.open_loop_run import OpenLoopRun
from tests.load.study_rig import study_of


def test_always_a_config_and_open_loop_with_a_rate_or_a_law() -> None:
    p = OpenLoop()
    assert p.parse(None) == OpenLoopConfig() and p.parse(Namespace(llm_rate="", llm_seed=" ")) == OpenLoopConfig()
    assert p.parse(Namespace(llm_rate="2.5", llm_max_inflight="4", llm_arrival="gamma:2", llm_seed="9")) == \
        OpenLoopConfig(2.5, 4, "gamma:2", 9)
    assert not p.open_loop(None) and not p.open_loop(OpenLoopConfig())
    assert p.open_loop(OpenLoopConfig(rate=0.0)) and p.open_loop(OpenLoopConfig(arrival="constant"))
    with pytest.raises(ConfigError, match="--llm-seed must be a whole number, got '1.5'"):
        p.parse(Namespace(llm_seed="1.5"))
    with pytest.raises(ConfigError, match="--llm-arrival"):
        p.parse(Namespace(llm_arrival="bursty"))


def _study(cfg: OpenLoopConfig, open_loop: bool) -> StudyConfig:
    return StudyConfig((("open_loop", cfg),), open_loop=open_loop)


def test_the_arrivals_in_words() -> None:
    assert arrival_clause(_study(OpenLoopConfig(5.0), False)) == ""  # closed loop
    assert arrival_clause(StudyConfig((), open_loop=True)) == ""
    assert arrival_clause(_study(OpenLoopConfig(5.0), True)) == "poisson arrivals"
    assert arrival_clause(_study(OpenLoopConfig(5.0, 4, "gamma:2", 3), True)) == \
        "gamma:2 arrivals (seed 3), at most 4 in flight"
    p = OpenLoop()
    assert p.describe(OpenLoopConfig(arrival="constant"), _study(OpenLoopConfig(arrival="constant"), True)) is None
    assert p.describe(None, StudyConfig()) is None  # the stages, a sweep or a trace give the rate
    assert p.describe(OpenLoopConfig(0.5), _study(OpenLoopConfig(0.5), True)) == "open loop: 0.5 req/s, poisson arrivals"


@pytest.mark.parametrize("role", ["local", "master", "worker"])
def test_the_engine_attaches_on_every_role(role: str) -> None:
    study = study_of(role, llm_rate="4", llm_seed="1")
    part = OpenLoop().attach(study, study.config.part("open_loop"))
    assert isinstance(part, OpenLoopRun) and (part.rate, part.seed) == (4.0, 1)
    assert isinstance(OpenLoop().attach(study_of(role), None), OpenLoopRun)  # no options: the engine idles


def test_a_cap_without_open_loop_and_a_rate_beside_stages_are_refused() -> None:
    p = OpenLoop()
    p.check(StudyConfig())  # not asked for: nothing to check
    with pytest.raises(ConfigError, match="--llm-max-inflight is for open loop"):
        p.check(_study(OpenLoopConfig(cap=4), False))
    stages = StudyConfig((("open_loop", OpenLoopConfig(5.0)), ("stages", Namespace(plan=(1,)))), open_loop=True)
    with pytest.raises(ConfigError, match="--llm-rate is one load point"):
        p.check(stages)
    p.check(StudyConfig((("open_loop", OpenLoopConfig(5.0)), ("stages", Namespace(plan=None))), open_loop=True))
