"""run.py: one class per run role, chosen once from Locust's runner (real runners on loopback)."""

from __future__ import annotations

from argparse import Namespace

import pytest
from locust.env import Environment

from llm_users import events as llm_events
from llm_users.distributed import MESSAGE, STOP_MESSAGE
from llm_users.metrics import RequestRecord
from llm_users.options import RunConfig
from llm_users.run import LocalRun, MasterRun, WorkerRun, run_for
from llm_users.users import VLLMUser
from tests.helpers import free_port


class VLLM(VLLMUser):
    pass


def env_with(**opts: object) -> Environment:
    env = Environment(user_classes=[VLLM], parsed_options=Namespace(**opts))
    llm_events.install(env.events)
    return env


def rec(start: float, **kw: object) -> RequestRecord:
    return RequestRecord(f"r{start}", "/v1/chat/completions", "vllm", "m", start_time=start, ttft_ns=1_000_000,
                         e2e_ns=5_000_000, output_tokens=3, tokens_source="usage", **kw)


def test_local_runner_gets_the_local_role_which_merges_and_generates_load() -> None:
    env = env_with()
    runner = env.create_local_runner()
    run = run_for(env, RunConfig.from_options(env.parsed_options), runner)
    assert type(run) is LocalRun and run.merges and run.generates_load
    assert run.node == "local" and run.monitor is not None and run.collector.records == 0
    run.install(runner)
    env.events.llm_response.fire(record=rec(1.0), user=None)
    assert run.collector.records == 1 and run.collector.stats.total.requests == 1
    run.close()


def test_master_and_worker_roles_over_a_real_zmq_pair() -> None:
    port = free_port()
    master_env, worker_env = env_with(web_base_path=""), env_with(web_base_path="")
    master = master_env.create_master_runner("127.0.0.1", port)
    worker = worker_env.create_worker_runner("127.0.0.1", port)
    try:
        m = run_for(master_env, RunConfig.from_options(master_env.parsed_options), master)
        w = run_for(worker_env, RunConfig.from_options(worker_env.parsed_options), worker)
        assert type(m) is MasterRun and m.merges and not m.generates_load and m.monitor is None
        assert type(w) is WorkerRun and not w.merges and w.generates_load and w.node == worker.client_id
        assert not hasattr(w, "collector") and not hasattr(m, "shipper")
        m.install(master)
        w.install(worker)
        assert MESSAGE in master.custom_messages and STOP_MESSAGE in worker.custom_messages
        assert MESSAGE not in worker.custom_messages and STOP_MESSAGE not in master.custom_messages
        worker_env.events.llm_response.fire(record=rec(2.0), user=None)
        master_env.events.llm_response.fire(record=rec(3.0), user=None)  # the master keeps no records
        assert m.collector.records == 0
        m.on_message(msg=Namespace(data=w.shipper.payload(final=True)))
        assert m.collector.records == 1 and m.collector.workers[worker.client_id].final
        m.close()
        w.close()
    finally:
        worker.quit()
        master.quit()


@pytest.mark.parametrize(("opts", "start", "flag"), [
    (dict(llm_warmup="10s"), 105.0, "warmup"),
    (dict(llm_cooldown="5s", run_time=60), 157.0, "cooldown"),
])
def test_time_based_warmup_and_cooldown_are_flagged_from_the_config(opts: dict, start: float, flag: str) -> None:
    env = env_with(**opts)
    run = run_for(env, RunConfig.from_options(env.parsed_options), env.create_local_runner())
    run.test_start = 100.0
    early, late = rec(start), rec(130.0)
    run.classify(early)
    run.classify(late)
    assert getattr(early, flag) and not (late.warmup or late.cooldown)
    run.close()
