"""llm_users/load/spawn.py: the first-request offset and the think jitter."""

from __future__ import annotations

import argparse
import random
from types import SimpleNamespace

from llm_users.load import spawn
from llm_users.load.spawn import first_request_delay, spawn_interval, think_jitter
from llm_users.options import RunConfig


def env(seed: object = None, wait: float | None = None, worker: int = 0) -> SimpleNamespace:
    runner = SimpleNamespace(worker_index=worker)
    if wait is not None:
        runner._users_dispatcher = SimpleNamespace(_wait_between_dispatch=wait)
    config = RunConfig.from_options(argparse.Namespace(llm_seed=seed))  # --llm-seed, parsed once
    return SimpleNamespace(llm_config=config, runner=runner)


def user_rng(environment: SimpleNamespace, user_number: int) -> random.Random:
    """The user's generator as LLMUser makes it: the seed from the run's configuration."""
    return spawn.user_rng(environment.llm_config.spawn_seed, environment, user_number)


def test_a_seed_gives_the_same_offsets_per_worker_and_user() -> None:
    a = [first_request_delay(True, env(7), user_rng(env(7), u)) for u in range(5)]
    b = [first_request_delay(True, env(7), user_rng(env(7), u)) for u in range(5)]
    assert a == b and len(set(a)) == 5
    other_worker = [first_request_delay(True, env(7), user_rng(env(7, worker=1), u)) for u in range(5)]
    assert other_worker != a


def test_the_offset_stays_within_the_spawn_interval() -> None:
    assert spawn_interval(env()) == 1.0  # a worker is not told the rate: batches come each second
    assert spawn_interval(env(wait=0.5)) == 0.5  # a local runner knows its dispatch period
    assert spawn_interval(env(wait=10.0)) == 1.0  # -r 0.1: bounded
    rng = user_rng(env(1), 0)
    delays = [first_request_delay(True, env(wait=0.5), rng) for _ in range(2000)]
    assert 0 <= min(delays) < 0.01 and 0.49 < max(delays) <= 0.5
    assert 0.23 < sum(delays) / len(delays) < 0.27  # uniform
    assert first_request_delay(False, env(), rng) == 0.0


def test_think_jitter() -> None:
    rng = user_rng(env(2), 0)
    assert think_jitter(0.0, rng) == 0.0
    draws = [think_jitter(0.2, rng) for _ in range(1000)]
    assert min(draws) >= 0 and max(draws) <= 0.2 and 0.08 < sum(draws) / 1000 < 0.12
