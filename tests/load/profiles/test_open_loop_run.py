"""load/profiles/open_loop_run.py: one node's arrival engine, chosen from the run's role: the local
runner's controller and scheduler, a master's controller (its workers' shares), a worker that
switches to open loop on its first share or asks for it; the stages' and sweep's rate, a trace's
schedule, and the ``arrivals`` summary block."""

from __future__ import annotations

from typing import Any

from llm_users.load.openloop import RATE_MESSAGE, RATE_REQUEST
from llm_users.load.profile import StudyConfig
from llm_users.load.profiles.open_loop import OpenLoop, OpenLoopConfig
from llm_users.load.profiles.open_loop_run import OpenLoopRun
from llm_users.metrics import RequestRecord
from tests.load.study_rig import study_of


def _engine(role: str, **options: str) -> OpenLoopRun:
    study = study_of(role, **options)
    study.attach([OpenLoop()])
    return study.get(OpenLoop)


def test_a_closed_loop_run_keeps_its_book_and_series_but_no_controller() -> None:
    e = _engine("local")
    assert e.controller is None and e.scheduler is None and not e.open_loop
    e.set_rate(5.0)  # a stage's rate in closed loop: nothing to do
    assert e.controller is None
    observers = e.run.collector.observers
    assert e.sched_book.add in observers and e.series.add in observers
    s: dict[str, Any] = {}
    e.summary(s)
    assert "arrivals" not in s  # nothing was sent on a schedule


def test_the_local_engine_sends_its_own_share_at_the_rate_asked() -> None:
    e = _engine("local", llm_rate="6", llm_max_inflight="3", llm_seed="2")
    assert e.open_loop and e.environment.llm_open_loop
    assert e.controller is not None and e.scheduler is e.controller.scheduler is not None
    e.set_rate(9.0)  # a stage or sweep point's rate: applied to the local scheduler at once
    assert (e.scheduler.rate, e.scheduler.cap, e.scheduler.seed) == (9.0, 3, 2)
    assert e.environment.runner.handlers == {} and e.environment.runner.sent == []  # no workers to tell


def test_a_master_answers_a_workers_request_for_its_share() -> None:
    e = _engine("master", llm_rate="6")
    assert e.controller is not None and e.scheduler is None  # the workers send
    assert set(e.environment.runner.handlers) == {RATE_REQUEST}


def test_a_worker_switches_to_open_loop_on_the_test_start_and_asks_for_its_share() -> None:
    e = _engine("worker")
    runner = e.environment.runner
    assert set(runner.handlers) == {RATE_MESSAGE} and e.sched_book is None and e.series is None
    e._on_share(msg=None)  # nothing came
    assert e.scheduler is None
    e.on_test_start(StudyConfig((("open_loop", OpenLoopConfig()),), open_loop=False))
    assert e.scheduler is None and runner.sent == []  # the master runs closed loop
    e.on_test_start(StudyConfig((("open_loop", OpenLoopConfig(4.0)),), open_loop=True))
    assert e.scheduler is not None and e.environment.llm_open_loop
    assert runner.sent == [(RATE_REQUEST, None)]  # its share was lost: asked again
    e.on_test_stopping()


class _Source:
    def describe(self) -> dict[str, Any]:
        return {"method": "words"}


def test_a_trace_gives_the_schedule_before_and_after_the_controller() -> None:
    e = _engine("local")
    source = _Source()
    e.replay(source, share={"trace": "t.jsonl"}, target={"rate": None, "trace": "t.jsonl"})
    assert (e.fixed_rate, e.source, e.share_extra) == (1.0, source, {"trace": "t.jsonl"})
    e.ensure_controller()
    assert e.controller.extra is e.share_extra and e.scheduler.source is source
    later = _engine("local", llm_rate="2")
    later.replay(source, share={}, target={})
    assert later.scheduler.source is source


def _sent(i: int) -> RequestRecord:
    t0 = 10**12 + i * 10**8
    return RequestRecord(request_id=str(i), name="/x", backend="b", model="m", start_time=100 + i / 10, t0_ns=t0,
                         scheduled_ns=t0 - 1_000_000, ttft_ns=10_000_000, e2e_ns=40_000_000, output_tokens=5)


def test_the_arrivals_block_says_the_target_and_a_shapes_rate_is_its_stages() -> None:
    e = _engine("local", llm_rate="10", llm_seed="5")
    e.replay(_Source(), share={}, target={"trace": "t.jsonl"})
    for i in range(3):
        e.sched_book.add(_sent(i))
    s: dict[str, Any] = {}
    e.summary(s)
    a = s["arrivals"]
    assert (a["rate"], a["seed"], a["sent"], a["trace"], a["trace_prompts"]) == (10.0, 5, 3, "t.jsonl", {"method": "words"})
    e.study.shape = object()  # stages or a sweep: each stage or point has its own rate
    e.summary(s)
    assert s["arrivals"]["rate"] is None
