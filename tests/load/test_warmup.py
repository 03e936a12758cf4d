"""load/warmup.py (issue 53 item 6): one warm-up setting for the whole run (a worker applies the
master's), stated as it was applied, and the warm-up requests that failed counted."""

from __future__ import annotations

from argparse import Namespace

from locust.env import Environment

from llm_users import options
from llm_users.distributed import Collector, Shipper
from llm_users.load.warmup import WarmupCounts, applied, attach, text, window_block
from llm_users.metrics import RequestRecord
from llm_users.options import RunConfig
from llm_users.outputs.console import summary_table
from llm_users.run import MasterRun, WorkerRun
from llm_users.users import VLLMUser

NAME = "/v1/chat/completions"


class _VLLM(VLLMUser):
    host = "http://127.0.0.1:9"  # never reached: users are only made


def _rec(i: int, warmup: bool, ok: bool = True, category: str = "http_500") -> RequestRecord:
    return RequestRecord(f"r{i}", NAME, "vllm", "m", start_time=1000.0 + i, ttft_ns=40_000_000, e2e_ns=90_000_000,
                         itl_ns=[5_000_000] * 9, output_tokens=10, tokens_source="usage", warmup=warmup,
                         status="ok" if ok else "error", error_category=None if ok else category)


def _worker(own: str | None) -> tuple[Environment, WorkerRun]:
    """A worker started with ``--llm-warmup own`` (None: not given), wired as plugin.py wires it."""
    env = Environment(user_classes=[_VLLM], parsed_options=Namespace(llm_warmup=own))
    config = RunConfig.from_options(env.parsed_options, [_VLLM])
    options.install(env, config)  # reads the options again at each test start, first
    run = WorkerRun(env, config, "w1")
    attach(env, run)
    return env, run


def _spawn(env: Environment, master_options: dict) -> None:
    """What Locust's worker does with a spawn message: the master's custom options over its own,
    then ``test_start`` (locust/runners.py WorkerRunner)."""
    vars(env.parsed_options).update(master_options)
    env.events.test_start.fire(environment=env)


def test_a_test_reads_the_warmup_again_from_the_options_it_starts_with() -> None:
    """The master's options reach a worker as its test starts (RunConfig.for_test); the warm-up
    was not among the parts read again, so each worker kept its own command line's."""
    own = RunConfig.from_options(Namespace(llm_warmup="3"), [_VLLM])
    assert own.warmup_for(1) == 3
    assert own.for_test(Namespace(llm_warmup="0"), [_VLLM]).warmup_for(1) == 0
    assert own.for_test(Namespace(llm_warmup=None), [_VLLM]).warmup_for(1) == 1  # the master's default
    timed = own.for_test(Namespace(llm_warmup="30s"), [_VLLM])
    assert (timed.warmup_s, timed.warmup_ramp, timed.warmup_for(1)) == (30.0, False, 0)
    assert own.for_test(Namespace(llm_warmup="ramp"), [_VLLM]).warmup_ramp is True


def test_a_worker_applies_the_masters_warmup_and_ships_what_it_applied(capsys) -> None:
    """Only the master got ``--llm-warmup 0``: the worker (default 1) used 1 while the master said
    'first 0 per user'. Now its users take the master's 0, its payloads say so, and its log says
    its own command line's setting was replaced."""
    env, run = _worker(own="2")
    try:
        _spawn(env, {"llm_warmup": "0"})
        assert _VLLM(env)._warmup_requests == 0  # each user's first 0 requests are warm-up
        assert run.shipper.payload()["applied"] == {"warmup": {"requests_per_user": 0, "seconds": 0.0, "ramp": False}}
        err = capsys.readouterr().err
        assert ("locust-llm: w1: warm-up as the master set it (first 0 per user), not as this worker's own "
                "options would (first 2 per user): one --llm-warmup for the whole run") in err
        _spawn(env, {"llm_warmup": None})  # a master given none: the default, whatever the worker was given
        assert _VLLM(env)._warmup_requests == 1
        assert run.shipper.payload()["applied"]["warmup"]["requests_per_user"] == 1
    finally:
        run.close()


def test_a_worker_applies_the_masters_time_form() -> None:
    env, run = _worker(own=None)
    try:
        _spawn(env, {"llm_warmup": "5s"})
        run.test_start = 999.5  # (run.install's listener sets it as the test starts)
        rec = _rec(0, warmup=False)  # started 0.5 s into the test
        run.classify(rec)  # the time form: started in the first 5 s
        assert rec.warmup is True
        assert run.shipper.payload()["applied"]["warmup"] == {"requests_per_user": 0, "seconds": 5.0, "ramp": False}
    finally:
        run.close()


def _master(given: str | None) -> MasterRun:
    env = Environment(user_classes=[_VLLM], parsed_options=Namespace(llm_warmup=given))
    config = RunConfig.from_options(env.parsed_options, [_VLLM])
    options.install(env, config)
    run = MasterRun(env, config, "master")
    attach(env, run)
    return run


def test_the_master_states_the_warmup_its_workers_applied_and_the_failed_ones() -> None:
    run = _master("0")
    try:
        shippers = [Shipper("w1"), Shipper("w2")]
        for s in shippers:
            s.applied["warmup"] = {"requests_per_user": 0, "seconds": 0.0, "ramp": False}
        shippers[0].add(_rec(1, warmup=False))
        run.collector.receive(shippers[0].payload())
        run.collector.receive(shippers[1].payload())
        warmup = run.summary()["window"]["warmup"]
        assert warmup["requests_per_user"] == 0 and warmup["workers"] == {
            "w1": {"requests_per_user": 0, "seconds": 0.0, "ramp": False},
            "w2": {"requests_per_user": 0, "seconds": 0.0, "ramp": False}}
        assert (warmup["excluded"], warmup["failed"]) == (0, 0)
        # a worker that applied another setting (an older worker, its own options): each is named
        shippers[1].applied["warmup"] = {"requests_per_user": 1, "seconds": 0.0, "ramp": False}
        for i, ok in enumerate((True, False, False)):
            shippers[1].add(_rec(10 + i, warmup=True, ok=ok, category="http_503"))
        run.collector.receive(shippers[1].payload())
        summary = run.summary()
        warmup = summary["window"]["warmup"]
        assert warmup["requests_per_user"] == 1 and warmup["workers"]["w2"]["requests_per_user"] == 1
        assert (warmup["excluded"], warmup["failed"], warmup["failed_by_category"]) == (3, 2, {"http_503": 2})
        assert summary["overall"]["excluded_warmup"] == warmup["excluded"]  # the same requests
        assert ("warm-up excluded: 3 requests (workers differ: first 0 per user on w1, first 1 per user on w2; "
                "2 of them failed (http_503: 2))") in summary_table(summary)
    finally:
        run.close()


def test_the_setting_as_applied_in_words() -> None:
    one = {"requests_per_user": 0, "seconds": 0.0, "ramp": False}
    assert text({**one, "workers": {"w1": one, "w2": one}}) == "first 0 per user, as applied by all 2 workers"
    assert text({**one, "workers": {"w1": one}}) == "first 0 per user, as applied by the worker"
    assert text({"requests_per_user": 1, "seconds": 0.0}) == "first 1 per user"  # a local run
    assert text({"seconds": 30.0, "failed": 4, "failed_by_category": {"http_500": 3, "read_timeout": 1}}) == (
        "30 s; 4 of them failed (http_500: 3, read_timeout: 1)")
    assert text({"ramp": True}) == "started before the spawn completed"


def test_warmup_counts_and_the_window_block() -> None:
    counts = WarmupCounts()
    for i, (warmup, ok) in enumerate([(True, True), (True, False), (False, False), (True, False)]):
        counts.add(_rec(i, warmup, ok))
    cut = _rec(9, True, ok=False)
    cut.status = "interrupted"  # counted with the interrupted ones, as the statistics count it
    counts.add(cut)
    assert counts.block() == {"excluded": 3, "failed": 2, "failed_by_category": {"http_500": 2}}
    given = {"requests_per_user": 1, "seconds": 0.0, "ramp": False}
    assert window_block(given, {}, counts) == {**given, "excluded": 3, "failed": 2,
                                               "failed_by_category": {"http_500": 2}}
    workers = {"w2": {"requests_per_user": 2, "seconds": 0.0, "ramp": False, "other": 1}}
    block = window_block(given, workers, counts)
    assert block["requests_per_user"] == 2 and block["workers"] == {"w2": {"requests_per_user": 2, "seconds": 0.0,
                                                                           "ramp": False}}


def test_applied_reads_the_user_classes_own_default() -> None:
    class Three(_VLLM):
        warmup_requests = 3

    assert applied(RunConfig.from_options(Namespace(), [Three])) == {"requests_per_user": 3, "seconds": 0.0,
                                                                     "ramp": False}
    assert applied(RunConfig.from_options(Namespace(llm_warmup="0"), [Three]))["requests_per_user"] == 0


def test_a_collector_keeps_what_each_worker_applied() -> None:
    s = Shipper("w1")
    s.applied["warmup"] = {"requests_per_user": 0, "seconds": 0.0, "ramp": False}
    c = Collector()
    c.receive(s.payload())
    assert c.workers["w1"].applied == {"warmup": {"requests_per_user": 0, "seconds": 0.0, "ramp": False}}
    s.applied.clear()  # a payload without it keeps what was said
    c.receive(s.payload())
    assert c.workers["w1"].applied == {"warmup": {"requests_per_user": 0, "seconds": 0.0, "ramp": False}}
