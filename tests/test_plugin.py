"""plugin.py: a test that starts while this process is still starting up (a worker's spawn handled
while init yields) runs the listeners it missed before Locust spawns the users, so the users take
the settings the master sent (tests/e2e/test_signals.py, master + workers in SDK mode, caught
users made with the worker's own --llm-client)."""

from __future__ import annotations

from argparse import Namespace

import gevent
from locust.env import Environment

from llm_users import plugin
from llm_users.users import VLLMUser


class VLLM(VLLMUser):
    pass


def test_a_spawn_during_start_up_waits_for_the_missed_listeners() -> None:
    env = Environment(user_classes=[VLLM], parsed_options=Namespace())
    order: list[str] = []
    sentinel = plugin._watch_test_start(env)

    def worker_spawn() -> None:  # Locust's worker: fire test_start, then spawn the users
        env.events.test_start.fire(environment=env)
        order.append("users spawned")

    spawn = gevent.spawn(worker_spawn)
    gevent.sleep(0.01)  # start-up yields: the spawn message is handled now
    env.events.test_start.add_listener(lambda **_: order.append("settings refreshed"))  # added late: missed
    assert order == []  # the spawn is held
    plugin._replay_missed_test_start(env, sentinel)
    spawn.join(timeout=5)
    assert order == ["settings refreshed", "users spawned"]


def test_a_test_start_after_start_up_is_not_held() -> None:
    env = Environment(user_classes=[VLLM], parsed_options=Namespace())
    order: list[str] = []
    sentinel = plugin._watch_test_start(env)
    env.events.test_start.add_listener(lambda **_: order.append("listener"))
    plugin._replay_missed_test_start(env, sentinel)
    spawn = gevent.spawn(lambda: (env.events.test_start.fire(environment=env), order.append("users spawned")))
    spawn.join(timeout=5)
    assert order == ["listener", "users spawned"]
