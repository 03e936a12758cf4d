"""run.py: one class per run role, chosen once from Locust's runner (real runners on loopback)."""

from __future__ import annotations

import time
from argparse import Namespace
from typing import Any

import gevent
import pytest
from locust import User, constant, task
from locust.env import Environment
from locust.rpc import Message

from llm_users import events as llm_events
from llm_users import run as run_module
from llm_users.distributed import ACK_RESEND_S, MESSAGE, STOP_MESSAGE
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


# Stopping a distributed run (issue 10): the master and workers are real runners on loopback;
# only the master's receipt of llm_data is wrapped, to lose payloads as a worker's exit can.

class Idle(User):
    wait_time = constant(0.05)

    @task
    def idle(self) -> None:
        gevent.sleep(0.01)


def _wait(cond, timeout: float = 10.0) -> None:  # noqa: ANN001
    limit = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < limit, "timed out"
        gevent.sleep(0.02)


def _pair(workers: int = 1):  # noqa: ANN202
    port = free_port()
    menv = env_with(web_base_path="", enable_rebalancing=False)
    menv.user_classes = [Idle]
    master = menv.create_master_runner("127.0.0.1", port)
    m = run_for(menv, RunConfig.from_options(menv.parsed_options), master)
    m.install(master)
    ws = []
    for _ in range(workers):
        wenv = env_with(web_base_path="")
        wenv.user_classes = [Idle]
        worker = wenv.create_worker_runner("127.0.0.1", port)
        w = run_for(wenv, RunConfig.from_options(wenv.parsed_options), worker)
        w.install(worker)
        ws.append((worker, w))
    _wait(lambda: len(master.clients.ready) == workers)
    return master, m, ws


def _drop_finals(master: Any, m: MasterRun, count: int) -> list[int]:
    """The master loses the first ``count`` final payloads (as a worker's exit can lose them)."""
    dropped: list[int] = []

    def receive(environment: Any = None, msg: Any = None, **_: Any) -> None:
        if msg.data.get("final") and len(dropped) < count:
            dropped.append(msg.data["seq"])
            return
        m.on_message(environment=environment, msg=msg)

    master.custom_messages[MESSAGE] = (receive, False)
    return dropped


def _count_finals(master: Any) -> list[int]:
    """The sequence numbers of the final payloads that reach the master, dropped ones too."""
    finals: list[int] = []
    receive, _ = master.custom_messages[MESSAGE]

    def counted(environment: Any = None, msg: Any = None, **kw: Any) -> None:
        if msg.data.get("final"):
            finals.append(msg.data["seq"])
        receive(environment=environment, msg=msg, **kw)

    master.custom_messages[MESSAGE] = (counted, False)
    return finals


def test_a_final_payload_lost_on_the_way_is_sent_again_until_the_master_confirms_it() -> None:
    master, m, [(worker, w)] = _pair()
    try:
        dropped = _drop_finals(master, m, 1)
        finals = _count_finals(master)
        w.on_test_start()
        for i in range(3):
            w.environment.events.llm_response.fire(record=rec(10.0 + i), user=None)
        t0 = time.monotonic()
        w.on_quitting()  # what a worker does on its own Ctrl-C: stop, ship the final payload, await the ack
        waited = time.monotonic() - t0
        assert len(dropped) == 1
        assert m.collector.records == 3 and m.collector.workers[worker.client_id].final
        assert w._unconfirmed is None
        assert finals == dropped * 2, finals  # one resend of the same payload, then confirmed
        assert waited > ACK_RESEND_S * 0.9  # the resend waited its interval
    finally:
        m.close()
        worker.quit()
        master.quit()


def test_a_master_that_never_confirms_costs_a_bounded_wait_and_a_warning(monkeypatch, capsys) -> None:
    monkeypatch.setattr(run_module, "ACK_WAIT_S", 0.6)
    monkeypatch.setattr(run_module, "ACK_RESEND_S", 0.25)
    monkeypatch.setattr(run_module, "FINAL_WAIT_S", 1.0)  # the master's wait for a final payload that never comes
    master, m, [(worker, w)] = _pair()
    try:
        dropped = _drop_finals(master, m, 100)
        w.on_test_start()
        w.environment.events.llm_response.fire(record=rec(10.0), user=None)
        t0 = time.monotonic()
        w.on_quitting()
        assert time.monotonic() - t0 > 0.55  # it waited its ACK_WAIT_S
        _wait(lambda: len(dropped) >= 3)  # the first send and two resends in 0.6 s
        assert len(dropped) == 3, dropped  # ... and no more: the wait ended at 0.6 s (resends every 0.25 s)
        assert m.collector.records == 0
        out = capsys.readouterr().out
        assert f"locust-llm: {worker.client_id}: the master did not confirm this worker's final data within 0.6 s" in out
        assert "last 1 records may be missing" in out
        summary = m.summary()
        assert summary["workers"]["reported"] == []
        m.on_test_stopping()  # the master knew the worker: it is reported lost, not left out
        assert [lw["worker"] for lw in m.collector.lost_workers()] == [worker.client_id]
    finally:
        m.close()
        worker.quit()
        master.quit()


def test_a_worker_quitting_while_the_master_stops_does_not_get_its_users_handed_to_the_others() -> None:
    """Ctrl-C to the process group: a worker quits on its own while the master waits for the
    final data; Locust (still RUNNING) would hand its users to the other worker, which would
    start sending again after its final payload."""
    master, m, [(w1, r1), (w2, r2)] = _pair(workers=2)
    try:
        master.start(4, spawn_rate=100)
        _wait(lambda: w1.user_count == 2 and w2.user_count == 2)
        restarts: list[tuple] = []
        start = master.start
        master.start = lambda *a, **kw: (restarts.append(a), start(*a, **kw))[1]  # Locust's hand-over
        states: list[str] = []  # the master's state while it waits for the final payloads
        pending = m.collector.pending
        m.collector.pending = lambda live: (states.append(master.state), pending(live))[1]
        w2.client.send(Message("quit", None, w2.client_id))  # w2 quits on its own ...
        master.stop(send_stop_to_client=False)  # ... as the master starts stopping (llm_stop to all)
        gevent.sleep(1.5)
        assert w2.client_id not in master.clients  # its quit was handled during the stop
        assert restarts == []
        # still "running" while it waits: Locust's web UI stops polling once it sees "stopping"
        # and would then never show the stopped state
        assert states and set(states) == {"running"}, states
        assert w1.user_count == 0 and w2.user_count == 0
        assert m.collector.workers[w1.client_id].final
    finally:
        m.close()
        r1.close()
        r2.close()
        w1.quit()
        w2.quit()
        master.quit()
