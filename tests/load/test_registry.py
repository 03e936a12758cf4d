"""The load profiles' registry: the explicit order, register(), parse_options (the frozen study
configuration and the checks of options that exclude each other, with their messages), and
the configuration side importing neither Locust, gevent nor the users."""

from __future__ import annotations

import subprocess
import sys
from argparse import ArgumentParser, Namespace
from dataclasses import FrozenInstanceError

import pytest

from llm_users.errors import ConfigError
from llm_users.load import registry, study
from llm_users.load.profile import LoadProfile, given
from llm_users.load.profiles.open_loop import OpenLoopConfig
from llm_users.load.profiles.stages import StagesConfig
from llm_users.load.profiles.sweep import SweepConfig
from llm_users.load.profiles.trace import TraceConfig
from llm_users.load.registry import describe, parse_options
from llm_users.load.search import Tolerance

OPTIONS = ("llm_rate", "llm_arrival", "llm_seed", "llm_max_inflight", "llm_stages", "llm_steps", "llm_settle",
           "llm_repeat", "llm_sweep", "llm_sweep_start", "llm_sweep_target", "llm_sweep_points",
           "llm_sweep_tolerance", "llm_trace", "llm_trace_format", "llm_trace_window", "llm_trace_speedup",
           "llm_reset_cache")


def opts(**given_: object) -> Namespace:
    return Namespace(**{**dict.fromkeys(OPTIONS), **given_})


class Toy(LoadProfile):
    name = "toy"

    def parse(self, o: object) -> int | None:
        v = given(o, "llm_toy")
        return None if v is None else int(v)


@pytest.fixture
def restore_registry():
    saved = list(registry.PROFILES)
    yield
    registry.PROFILES[:] = saved


def test_the_shipped_profiles_in_order_and_register(restore_registry) -> None:
    assert [p.name for p in registry.profiles()] == ["open_loop", "stages", "sweep", "trace", "cache_reset"]
    toy = registry.register(Toy)
    assert registry.register(Toy()) is toy  # a second registration of the class is a no-op
    assert [p.name for p in registry.profiles()][-1] == "toy"
    registry.PROFILES.remove(toy)
    registry.register(Toy, before="stages")
    assert [p.name for p in registry.profiles()] == ["open_loop", "toy", "stages", "sweep", "trace", "cache_reset"]

    class Other(LoadProfile):
        name = "toy"

    with pytest.raises(ValueError, match="called 'toy'"):
        registry.register(Other)
    assert registry.parse_options(Namespace(**{**vars(opts()), "llm_toy": "4"})).part("toy") == 4


def test_study_names_are_the_registry_s() -> None:
    assert study.parse_options is registry.parse_options and study.add_arguments is registry.add_arguments


def test_parse_options_is_frozen_and_says_open_loop() -> None:
    s = study.parse_options(opts())
    assert s.part("open_loop") == OpenLoopConfig() and s.part("stages") is None and not s.open_loop
    with pytest.raises(FrozenInstanceError):
        s.open_loop = True  # type: ignore[misc]
    s = study.parse_options(opts(llm_rate="5", llm_arrival="gamma:2", llm_seed="7", llm_max_inflight="3"))
    assert s.part("open_loop") == OpenLoopConfig(5.0, 3, "gamma:2", 7) and s.open_loop
    s = study.parse_options(opts(llm_steps="1:3:1:2s", llm_settle="1s", llm_arrival="constant"))
    stages = s.part("stages")
    assert isinstance(stages, StagesConfig) and [p.load for p in stages.plan] == [1, 2, 3] and stages.settle_s == 1
    assert s.open_loop  # an arrival law makes the stages rates
    s = study.parse_options(opts(llm_sweep="rate", llm_sweep_points="5"))
    assert s.part("sweep") == SweepConfig("rate", 1.0, 0.95, 5) and s.open_loop
    assert not study.parse_options(opts(llm_sweep="concurrency")).open_loop
    s = study.parse_options(opts(llm_sweep="rate", llm_sweep_tolerance="2%"))
    assert s.part("sweep").tolerance == Tolerance(0.02, True)
    s = study.parse_options(opts(llm_trace="t.jsonl", llm_trace_speedup="2"))
    assert s.part("trace") == TraceConfig("t.jsonl", 2.0) and s.open_loop  # the file is read at attach
    assert study.parse_options(None) == study.parse_options(opts())  # Locust as a library


@pytest.mark.parametrize(("given_", "says"), [
    (dict(llm_stages="1:1s", llm_steps="1:2:1:1s"), "give --llm-stages or --llm-steps, not both"),
    (dict(llm_sweep="up"), "--llm-sweep must be concurrency or rate, got 'up'"),
    (dict(llm_sweep="rate", llm_steps="1:2:1:1s"),
     "--llm-sweep chooses its own load points: drop --llm-stages/--llm-steps"),
    (dict(llm_rate="5", llm_steps="1:2:1:1s"),
     "--llm-rate is one load point: with stages or a sweep the stages give the rate "
     "(use --llm-arrival to make them rates)"),
    (dict(llm_rate="5", llm_sweep="concurrency"), "--llm-rate is one load point"),
    (dict(llm_max_inflight="4"),
     "--llm-max-inflight is for open loop: give --llm-rate (or --llm-arrival with stages)"),
    (dict(llm_trace="t.jsonl", llm_stages="1:1s"),
     "--llm-trace gives its own schedule: drop --llm-rate/--llm-stages/--llm-steps/--llm-sweep"),
    (dict(llm_trace="t.jsonl", llm_arrival="constant", llm_sweep="rate"), "--llm-trace gives its own schedule"),
    (dict(llm_seed="x"), "--llm-seed must be a whole number, got 'x'"),
    (dict(llm_arrival="gamma:0"), "--llm-arrival"),
    (dict(llm_sweep_target="2"), "--llm-sweep-target must be a number in [0, 1], got '2'"),
    (dict(llm_sweep_points="1"), "--llm-sweep-points must be a number in [2, 1000]"),
    (dict(llm_sweep="concurrency", llm_sweep_tolerance="0.5"),
     "--llm-sweep-tolerance for a concurrency sweep is whole users (or a share such as 5%), got '0.5'"),
    (dict(llm_trace_speedup="0"), "--llm-trace-speedup must be a number in"),
    (dict(llm_trace="t.csv", llm_trace_format="sharegpt"), "--llm-trace-format must be one of jsonl, mooncake"),
    (dict(llm_trace="t.csv", llm_trace_window="9:3"), "--llm-trace-window needs 0 <= START < END"),
    (dict(llm_trace="t.csv", llm_trace_window="60"), "--llm-trace-window must be START:END"),
    (dict(llm_reset_cache="auto"), "--llm-reset-cache must be on or off, got 'auto'"),
    (dict(llm_settle="5"), "--llm-settle"),
])
def test_options_that_exclude_each_other_keep_their_messages(given_: dict, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        study.parse_options(opts(**given_))
    assert str(e.value).startswith(says), str(e.value)


def test_add_arguments_keeps_the_group_the_env_vars_and_the_web_ui_fields() -> None:
    class Parser(ArgumentParser):  # Locust's parser takes env_var=
        def add_argument_group(self, *a, **kw):  # noqa: ANN002, ANN003, ANN201
            group = super().add_argument_group(*a, **kw)
            plain = group.add_argument

            def add_argument(*args, env_var=None, **kwargs):  # noqa: ANN002, ANN003, ANN202
                action = plain(*args, **kwargs)
                action.env_var = env_var
                return action

            group.add_argument = add_argument  # type: ignore[method-assign]
            return group

    p = Parser()
    study.add_arguments(p)
    group = next(g for g in p._action_groups if g.title == "locust-llm studies")
    names = [a.option_strings[0] for a in group._group_actions]
    assert names == ["--" + o.replace("_", "-") for o in OPTIONS]
    web = [a.option_strings[0] for a in group._group_actions if getattr(a, "llm_per_test", False)]
    assert web == ["--llm-rate", "--llm-arrival", "--llm-seed", "--llm-max-inflight"]
    assert {a.env_var for a in group._group_actions} >= {"LOCUST_LLM_RATE", "LOCUST_LLM_TRACE_SPEEDUP"}


def test_the_configuration_side_imports_no_locust_gevent_or_users() -> None:
    code = ("import sys, llm_users.load.study as s; s.parse_options(None); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent', 'matplotlib') "
            "or m in ('llm_users.users', 'llm_users.options', 'llm_users.load.openloop')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(("opts", "kind", "text"), [
    ({"llm_steps": "8:64:8:2s"}, "stages", "8 stages of 2 s: 8 to 64 users, step 8"),
    ({"llm_stages": "5:3s,10:2s", "llm_arrival": "constant"}, "stages",
     "2 stages: 5 req/s for 3 s, 10 req/s for 2 s; constant arrivals"),
    ({"llm_sweep": "concurrency", "llm_sweep_start": "4", "llm_sweep_points": "6"}, "sweep",
     "SLO sweep of concurrency: from 4 users, at most 6 points, target 95% of requests meeting every SLO, "
     "bisection to within 1 user"),
    ({"llm_sweep": "rate", "llm_arrival": "gamma:2", "llm_seed": "1"}, "sweep",
     "SLO sweep of rate: from 1 req/s, at most 12 points, target 95% of requests meeting every SLO, "
     "bisection to within 5%; "
     "gamma:2 arrivals (seed 1)"),
    ({"llm_rate": "20", "llm_max_inflight": "4", "llm_seed": "3"}, "open_loop",
     "open loop: 20 req/s, poisson arrivals (seed 3), at most 4 in flight"),
    ({"llm_trace": "t.jsonl", "llm_trace_speedup": "2"}, "trace", "trace replay of t.jsonl, 2x faster"),
])
def test_each_profile_says_its_plan(opts, kind, text) -> None:
    assert describe(parse_options(Namespace(**opts))) == {kind: text}
