"""load/profiles/cache_reset.py: ``--llm-reset-cache on|off`` as a profile: where it attaches, the
route found at the test's start, a reset as each stage after the first begins (in the background),
and the summary block and console line (the reset itself: tests/load/test_cache_reset.py)."""

from __future__ import annotations

import time

import gevent
import pytest

from llm_users.errors import ConfigError
from llm_users.load.profiles.cache_reset import CacheResetConfig, CacheResetProfile, CacheResetRun
from llm_users.load.profiles.stages import Stages
from tests.helpers import free_port, get_json
from tests.load.study_rig import study_of


def test_parsed_on_by_default_and_attached_where_the_stages_are_known() -> None:
    p = CacheResetProfile()
    assert p.parse(None) == CacheResetConfig(True) and p.parse(type("O", (), {"llm_reset_cache": " OFF "})) == \
        CacheResetConfig(False)
    with pytest.raises(ConfigError, match="--llm-reset-cache must be on or off, got 'auto'"):
        p.parse(type("O", (), {"llm_reset_cache": "auto"}))
    assert p.attach(study_of("worker"), CacheResetConfig()) is None  # the master or local runner knows the stages
    for role in ("local", "master"):
        assert p.attach(study_of(role), None).on is True
    assert p.attach(study_of("local"), CacheResetConfig(False)).on is False


def _attached(**options: str):
    study = study_of("local", **options)
    study.attach([Stages(), CacheResetProfile()])
    return study, study.get(CacheResetProfile)


def _summary(study) -> dict:
    s: dict = {}
    for hook in study.run.summary_hooks:
        hook(s)
    return s


def test_a_run_without_points_probes_nothing_and_says_nothing() -> None:
    study, part = _attached()
    assert isinstance(part, CacheResetRun)
    study.environment.host = f"http://127.0.0.1:{free_port()}"
    study.environment.events.test_start.fire(environment=study.environment)
    assert part.books == [] and part.reset is None
    assert "cache_reset" not in _summary(study)


def test_off_is_said_where_there_are_points() -> None:
    study, part = _attached(llm_steps="1:2:1:5s", llm_reset_cache="off")
    study.environment.host = f"http://127.0.0.1:{free_port()}"
    study.environment.events.test_start.fire(environment=study.environment)
    assert part.books == [study.get(Stages).book] and part.reset is None
    s = _summary(study)
    assert s["cache_reset"] == {"method": None, "off": True, "count": 0}
    assert CacheResetProfile().console_lines(s) == [] and CacheResetProfile().console_lines({}) == []


def test_each_stage_after_the_first_resets_the_cache(sim_factory) -> None:
    sim = sim_factory("--cache-reset-routes", "vllm")
    study, part = _attached(llm_steps="1:3:1:5s")
    study.environment.host = sim.url + "/v1"
    study.environment.events.test_start.fire(environment=study.environment)
    assert part.reset.method == "vllm /reset_prefix_cache" and part.reset.at_start  # the start's reset
    book = study.get(Stages).book
    for load in (1, 2, 3):
        book.begin("users", load, time.time(), 0.0)
    for _ in range(1000):  # the two resets run beside the shape's tick
        if part.reset.count + part.reset.failed == 2:
            break
        gevent.sleep(0.01)
    assert get_json(sim.url + "/_sim/stats")["cache_resets"] == {"/reset_prefix_cache": 3}
    s = _summary(study)
    assert s["cache_reset"] == {"method": "vllm /reset_prefix_cache", "count": 2, "failed": 0, "at_start": True}
    line = CacheResetProfile().console_lines(s)
    assert len(line) == 1 and line[0].endswith("2 times")
