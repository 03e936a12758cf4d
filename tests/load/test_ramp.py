"""load/ramp.py (issue 53 item 1): the users that ran in the measured window, the target never
reached, the ramp's share of the window, and ``--llm-warmup ramp``."""

from __future__ import annotations

import time
from argparse import Namespace
from types import SimpleNamespace

import pytest
from locust.env import Environment

from llm_users import events as llm_events
from llm_users.errors import ConfigError
from llm_users.load.ramp import (
    RampWatch,
    attach,
    console_lines,
    is_ramp,
    parse_warmup,
    plain,
    users_block,
    users_text,
    warmup_per_user,
)
from llm_users.metrics import RequestRecord
from llm_users.options import RunConfig
from llm_users.run import run_for
from llm_users.users import VLLMUser

T0 = 1000.0  # the test's start


def _window(lo: float, end: float, stop: float) -> dict:
    return {"test_start": T0, "test_stop": stop, "measured_start": lo, "measured_end": end, "measured_s": end - lo}


def _ramp(rate: int, target: int, until: float) -> list[tuple[int, int]]:
    """The run's per-second counts: ``rate`` more users each second from T0, up to ``target``."""
    return [(int(T0) + s, min(target, rate * (s + 1))) for s in range(int(until - T0) + 1)]


def test_warmup_ramp_is_parsed_beside_the_count_and_the_time() -> None:
    assert parse_warmup("ramp") == (0, 0.0) and is_ramp(" Ramp ") and not is_ramp("3") and not is_ramp(None)
    assert parse_warmup("3") == (3, 0.0) and parse_warmup("30s") == (0, 30.0) and parse_warmup(None) == (None, 0.0)
    with pytest.raises(ConfigError, match="--llm-warmup"):
        parse_warmup("soon")


def test_a_run_that_never_reached_its_target_says_the_users_it_had() -> None:
    """`-u 8 -r 1 -t 5s`: the spawn never completed; the window ran at 2-5 users, all of it ramp."""
    block = users_block(_ramp(1, 8, T0 + 5), _window(T0 + 1.4, T0 + 5.0, T0 + 5.0), [], (T0 + 5.0, 5), 8, 1)
    assert block == {"min": 3, "max": 5, "target": 8, "reached": False, "ramp_s": None, "ramp_share": 1.0,
                     "spawn_rate": 1}
    assert users_text(block) == "3-5 users"
    window = {**_window(T0 + 1.4, T0 + 5.0, T0 + 5.0), "users": block}
    assert console_lines(window) == [
        "WARNING: the load never reached its target: 5 of 8 users in the measured window (-r 1 needs 8 s; the run "
        "had 5 s): the whole window was ramp; raise -r or -t"]


def test_a_ramp_over_a_quarter_of_the_window_gets_a_note() -> None:
    """`-u 64 -r 1 -t 300s`: 64 s of ramp, the window from 2 s: a fifth of it below the target."""
    done = T0 + 63.5
    block = users_block(_ramp(1, 64, T0 + 300), _window(T0 + 2.0, T0 + 300.0, T0 + 300.0), [(done, 64)],
                        (T0 + 300.0, 64), 64, 1)
    assert (block["min"], block["max"], block["reached"], block["ramp_s"]) == (3, 64, True, 63.5)
    assert block["ramp_share"] == pytest.approx(61.5 / 298, abs=1e-4)
    assert console_lines({**_window(T0 + 2.0, T0 + 300.0, T0 + 300.0), "users": block}) == []  # 21%: no line
    block = users_block(_ramp(1, 64, T0 + 120), _window(T0 + 2.0, T0 + 120.0, T0 + 120.0), [(done, 64)],
                        (T0 + 120.0, 64), 64, 1)
    assert console_lines({**_window(T0 + 2.0, T0 + 120.0, T0 + 120.0), "users": block}) == [
        "note: the ramp to 64 users took 63.5 s, 52% of the measured window (at 3-64 users): --llm-warmup ramp "
        "measures only at the plateau, or raise -r"]


def test_at_the_plateau_min_and_max_are_the_target() -> None:
    """The window after the spawn completed; the seconds after the stop began (users leaving
    under --stop-timeout) are the stop's, and a second only partly inside the window is not read."""
    seconds = [*_ramp(2, 4, T0 + 6), (int(T0) + 7, 1)]  # second 1007: the users leaving
    block = users_block(seconds, _window(T0 + 1.3, T0 + 7.8, T0 + 7.9), [(T0 + 1.05, 4)], (T0 + 6.5, 4), 4, 2)
    assert (block["min"], block["max"], block["target"], block["reached"]) == (4, 4, 4, True)
    assert block["ramp_share"] == 0.0 and block["ramp_s"] == 1.05 and users_text(block) == "4 users"
    assert console_lines({**_window(T0 + 1.3, T0 + 7.8, T0 + 7.9), "users": block}) == []


def test_a_window_shorter_than_a_second_reads_the_users_as_it_began() -> None:
    block = users_block(_ramp(3, 3, T0 + 3), _window(T0 + 2.2, T0 + 2.6, T0 + 4.0), [(T0 + 0.01, 3)], None, 3, 3)
    assert (block["min"], block["max"]) == (3, 3)
    nothing = users_block([], {"test_start": T0}, [], None, 3, 3)
    assert (nothing["min"], nothing["max"], nothing["ramp_share"]) == (None, None, None)
    assert users_text(nothing) is None and console_lines({"users": nothing}) == []


def test_no_target_is_judged_without_one() -> None:
    """A LoadTestShape (or Locust as a library): the users are stated, no target judged."""
    block = users_block(_ramp(1, 4, T0 + 6), _window(T0 + 1.5, T0 + 6.0, T0 + 6.0), [], None, None, 1)
    assert (block["min"], block["max"], block["target"], block["reached"]) == (3, 4, None, None)
    assert block["ramp_share"] is None
    assert console_lines({**_window(T0 + 1.5, T0 + 6.0, T0 + 6.0), "users": block}) == []


def test_the_watch_flags_what_started_before_the_spawn_completed(monkeypatch) -> None:
    clock = iter([T0 + 1.0, T0 + 9.0])
    monkeypatch.setattr("llm_users.load.ramp.time.time", lambda: next(clock))
    watch = RampWatch()
    watch.start()
    assert watch.is_warmup(T0 + 0.5)  # the spawn has not completed yet
    watch.complete(4)
    assert watch.is_warmup(T0 + 0.99) and not watch.is_warmup(T0 + 1.0)
    watch.stop(SimpleNamespace(user_count=4, target_user_count=4))
    assert watch.stopping == (T0 + 9.0, 4) and watch.target == 4
    watch.start()  # the next test (web UI) starts afresh
    assert watch.completions == [] and watch.stopping is None


def test_a_trace_replay_warms_up_nothing_unless_asked() -> None:
    """Issue 53 item 10: under --llm-trace every row is a request the trace asked for; the default
    warm-up (each user's first request) dropped the first row(s) from the measured figures."""
    trace = RunConfig.from_options(Namespace(llm_trace="t.jsonl")).study
    assert warmup_per_user(None, trace, 1) == 0 and warmup_per_user(2, trace, 1) == 2  # an explicit one applies
    assert warmup_per_user(None, RunConfig.from_options(Namespace()).study, 1) == 1 and warmup_per_user(None, None, 3) == 3
    assert RunConfig.from_options(Namespace(llm_trace="t.jsonl")).warmup_for(1) == 0
    assert RunConfig.from_options(Namespace(llm_trace="t.jsonl", llm_warmup="2")).warmup_for(1) == 2
    assert RunConfig.from_options(Namespace(llm_rate="5")).warmup_for(1) == 1  # an arrival law: the default stays


def test_a_trace_replays_users_and_summary_warm_up_nothing() -> None:
    """What each user flags (users.py) and what the summary says it flagged (window.warmup) agree."""
    class Traced(VLLMUser):
        host = "http://127.0.0.1:9"  # never reached: the user is only made

    o = Namespace(llm_trace="t.jsonl")
    env = Environment(user_classes=[Traced], parsed_options=o)
    env.llm_config = RunConfig.from_options(o, [Traced])
    assert Traced(env)._warmup_requests == 0
    run = run_for(env, env.llm_config, env.create_local_runner())
    try:
        assert run.summary()["window"]["warmup"]["requests_per_user"] == 0
    finally:
        run.close()


def test_warmup_ramp_is_refused_beside_a_load_profile() -> None:
    steps = RunConfig.from_options(Namespace(llm_steps="2:8:2:5s", llm_warmup="ramp"))
    with pytest.raises(ConfigError, match="--llm-warmup ramp measures a plain run at its plateau"):
        attach(SimpleNamespace(events=None), SimpleNamespace(config=steps))
    assert plain(RunConfig.from_options(Namespace(llm_warmup="ramp")).study) and not plain(steps.study)


class _VLLM(VLLMUser):
    pass


def test_a_local_run_flags_the_ramp_and_states_the_users_in_its_window(capsys) -> None:
    """The wiring (plugin.py's attach before run.install): records started before Locust's
    spawning_complete are warm-up under --llm-warmup ramp, and the summary says window.users."""
    env = Environment(user_classes=[_VLLM], parsed_options=Namespace(llm_warmup="ramp", num_users=4, spawn_rate=2.0))
    llm_events.install(env.events)
    run = run_for(env, RunConfig.from_options(env.parsed_options, [_VLLM]), env.create_local_runner())
    attach(env, run)
    run.install(env.runner)
    try:
        env.events.test_start.fire(environment=env)
        t0 = run.test_start
        fire = env.events.llm_response.fire
        fire(record=RequestRecord("a", "/v1/chat/completions", "vllm", "m", start_time=t0 + 0.1, e2e_ns=10**8,
                                  output_tokens=3, tokens_source="usage"), user=None)
        env.events.spawning_complete.fire(user_count=4)
        done = time.time()
        for i, t in enumerate((1.0, 2.0, 3.0)):
            fire(record=RequestRecord(f"m{i}", "/v1/chat/completions", "vllm", "m", start_time=done + t,
                                      e2e_ns=10**8, output_tokens=3, tokens_source="usage"), user=None)
            run.collector.timeline.users(done + t + 1.5, 4)
        summary = run.summary()
        ov, window = summary["overall"], summary["window"]
        assert (ov["excluded_warmup"], ov["requests"]) == (1, 3)
        assert window["warmup"]["ramp"] is True
        users = window["users"]
        assert (users["min"], users["max"], users["target"], users["reached"], users["ramp_share"]) == (4, 4, 4, True,
                                                                                                      0.0)
    finally:
        run.close()
