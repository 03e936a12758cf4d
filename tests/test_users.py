"""llm_users/users.py: a user Locust stops begins no request after it.

A user between two requests (``wait_time`` 0) is killed by a queued ``Greenlet.kill``, and its
due ``sleep(0)`` ran first: the next request went out and the kill landed 1-2 ms into it (an
``interrupted`` record of a request sent after the stop; seen at -t in CI, SDK mode)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import gevent
import pytest
from locust.env import Environment
from locust.user.users import LOCUST_STATE_WAITING

from llm_users import events as llm_events
from llm_users.users import VLLMUser
from tests.helpers import get_json


def _env(sim_url: str, client: str, cls: type, **options: Any) -> tuple[Environment, list[Any]]:
    opts = argparse.Namespace(llm_client=client, llm_model="m", llm_max_tokens=5, **options)
    env = Environment(user_classes=[cls], host=sim_url, parsed_options=opts, stop_timeout=5)
    records: list[Any] = []
    llm_events.install(env.events).add_listener(lambda record, **_: records.append(record))
    return env, records


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_a_user_stopped_between_two_requests_sends_no_third(sim_factory, client: str) -> None:
    """The race itself, made to happen: the user is caught in Locust's ``wait`` (state waiting,
    its ``sleep(0)`` due) and stopped as Locust's runner stops it (``stop(force=False)``)."""
    sim = sim_factory("--ttft-ms", "3", "--itl-ms", "1", "--output-tokens", "5", "--seed", "3")
    cls = type(f"Race{client}", (VLLMUser,), {"abstract": False, "host": sim.url, "warmup_requests": 0})
    env, records = _env(sim.url, client, cls, llm_spawn_spread="off")
    runner = env.create_local_runner()
    try:
        runner.start(1, spawn_rate=1)
        gevent.sleep(0.3)  # a few requests
        user = next(iter(runner.user_greenlets)).args[0]
        deadline = time.monotonic() + 10
        while user._state != LOCUST_STATE_WAITING:  # between two requests
            assert time.monotonic() < deadline, "never caught between two requests"
            gevent.sleep(0)
        sent = len(records)
        assert user.stop() is True  # killed, as Locust kills a waiting user
        assert user.greenlet.dead
        gevent.sleep(0.1)
    finally:
        runner.quit()
    assert sent > 0 and len(records) == sent, [(r.status, r.e2e_ns) for r in records[sent:]]
    assert all(r.status == "ok" for r in records)
    assert get_json(sim.url + "/_sim/stats")["started"] == sent


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_a_user_stopped_in_its_pause_sends_nothing_more(sim_factory, client: str) -> None:
    """A user in the pause before its next request (``--llm-think-jitter 2s``, drawn at 1 s) is
    busy to Locust, only marked stopping, and used to send that request when the pause ended:
    after the stop. Now the pause ends the user."""
    sim = sim_factory("--ttft-ms", "3", "--itl-ms", "1", "--output-tokens", "5", "--seed", "3")
    class Halfway:  # the user's generator, drawing the middle of each range: a 1 s pause
        def uniform(self, a: float, b: float) -> float:
            return (a + b) / 2

    class Pause(VLLMUser):
        abstract = False
        host = sim.url
        warmup_requests = 0

        def on_start(self) -> None:
            super().on_start()
            self.rng = Halfway()

    env, records = _env(sim.url, client, Pause, llm_spawn_spread="off", llm_think_jitter="2s")
    runner = env.create_local_runner()
    try:
        runner.start(1, spawn_rate=1)
        deadline = time.monotonic() + 10
        while not records:  # the first request has no pause; the second has
            assert time.monotonic() < deadline, "no first request"
            gevent.sleep(0.005)
        gevent.sleep(0.05)  # into the pause
        stopped = time.monotonic()
        runner.stop()
        waited = time.monotonic() - stopped
    finally:
        runner.quit()
    assert [r.status for r in records] == ["ok"], [(r.status, r.start_time) for r in records]
    assert get_json(sim.url + "/_sim/stats")["started"] == 1
    assert waited > 0.5  # the stop waited for the pause (Locust's graceful stop), then no request
