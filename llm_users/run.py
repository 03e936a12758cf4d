"""One Locust process's part in a run, one class per role (as Locust has Local/Master/WorkerRunner).

- :class:`LocalRun`: records go into a :class:`~llm_users.distributed.Collector` directly.
- :class:`WorkerRun`: records go into a :class:`~llm_users.distributed.Shipper`, shipped to
  the master every few seconds and once more, final, when it stops.
- :class:`MasterRun`: merges the workers' payloads into the Collector, has every worker ship
  its final data before Locust stops, watches for lost workers, writes the outputs.

:func:`run_for` picks the role once, from Locust's runner. Each load-generating node self-checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import gevent
from locust.runners import MasterRunner, WorkerRunner

from llm_users.distributed import (
    ACK_MESSAGE,
    ACK_RESEND_S,
    ACK_WAIT_S,
    FINAL_WAIT_S,
    MESSAGE,
    SHIP_INTERVAL,
    STOP_MESSAGE,
    Collector,
    Shipper,
)
from llm_users.health.gctune import GcTuner
from llm_users.health.heap import fix_mmap_threshold
from llm_users.health.idle import serve_ready_io
from llm_users.health.lagtrace import span
from llm_users.health.locust_costs import trim_per_second, tune_locust
from llm_users.health.master_watch import MasterWatch, lose_master
from llm_users.health.selfcheck import SelfMonitor
from llm_users.health.verdict import first_answer_ms, verdict
from llm_users.metrics import RequestRecord, fold_in_this_process
from llm_users.options import RunConfig, current_options
from llm_users.outputs import SCHEMA, FinalData, RecordWriter
from llm_users.outputs.final import apply_summary_hooks
from llm_users.outputs.registry import write_outputs
from llm_users.outputs.setup import setup_block
from llm_users.protocols import limits
from llm_users.redaction import Redactor


class LLMRun:
    """What every role shares: the configuration and the test's start and stop times."""

    #: True for the roles that hold the merged view (statistics, outputs, exporters).
    merges = False
    #: True for the roles whose users send requests in this process.
    generates_load = True

    def __init__(self, environment: Any, config: RunConfig, node: str) -> None:
        self.environment = environment
        self.config = config
        self.node = node
        self.monitor: SelfMonitor | None = SelfMonitor(node) if self.generates_load else None
        self.gc: GcTuner | None = GcTuner() if self.generates_load else None
        fix_mmap_threshold()  # large transient buffers go back (heap.py, issue 10)
        limits.configure(limits.parse_limits(config.options))  # the response size and runaway bounds, process-wide
        self.test_start: float | None = None
        self.test_stop: float | None = None
        self._stopped = False  # test_stop handled for the current test
        self._greenlets: list[Any] = []
        self.stop_hooks: list[Callable[[], None]] = []  # run at test stop, before the last data is shipped

    @property
    def slos(self) -> dict[str, float]:
        return dict(self.config.slos)

    @property
    def current_config(self) -> RunConfig:
        """The configuration of the test in hand: ``config`` with its per-test parts read again
        as the test started (the web UI's start form, a worker's options from the master)."""
        config = getattr(self.environment, "llm_config", None)
        return config if isinstance(config, RunConfig) else self.config

    @property
    def current_options(self) -> Mapping[str, Any]:
        """Locust's options as they are now, for the report (``options.current_options``)."""
        return current_options(self.environment)

    def install(self, runner: Any) -> None:
        """Add this role's listeners to Locust's events (and its messages to the runner)."""
        ev = self.environment.events
        if self.generates_load:
            ev.llm_response.add_listener(self.on_record)
        ev.test_start.add_listener(self.on_test_start)
        ev.test_stop.add_listener(self.on_test_stop)
        if self.monitor is not None:  # the stop's lag stays out of the self-check's figures
            monitor = self.monitor
            ev.test_stopping.add_listener(lambda **_: monitor.mark_stopping())
        ev.quitting.add_listener(self.on_quitting)
        tune_locust(runner)  # health/locust_costs.py: what Locust's defaults cost this role

    def on_quitting(self, **_: Any) -> None:
        """Locust quits on SIGTERM or Ctrl-C without stopping the test first (it fires
        ``quitting`` and only then stops the runner, which by then cannot reach the workers'
        last records). So a test still running is stopped here, the way ``-t`` stops it: users
        stop (honouring --stop-timeout), workers ship their final data, the master waits for it
        and writes the outputs once; only then is everything closed."""
        runner = self.environment.runner
        if runner is not None and self.test_running:
            self.stop_runner(runner)
        self.close()

    def stop_runner(self, runner: Any) -> None:
        runner.stop()

    test_running = property(lambda self: self.test_start is not None and self.test_stop is None)

    # events ---------------------------------------------------------------------------------
    def on_test_start(self, **_: Any) -> None:
        fresh = self.current_config.slos  # the web form's SLOs: taken while nothing is counted yet
        sink = getattr(self, "collector", None) or getattr(self, "shipper", None)
        if dict(fresh) != self.slos and sink is not None and sink.use_slos(dict(fresh)):
            self.config = replace(self.config, slos=fresh)
        self.test_start, self.test_stop, self._stopped = time.time(), None, False
        if self.gc is not None:  # before any user: the freeze once they hold walks only theirs
            self.gc.start()
        if self.monitor is not None:
            self.monitor.start()
        self._greenlets.append(gevent.spawn(self._loop))

    def on_test_stop(self, **_: Any) -> bool:
        """False when this test has already stopped: Locust can fire ``test_stop`` twice when a
        signal and the workers' own quitting stop it at once; the outputs are written once."""
        if self._stopped:
            return False
        self._stopped = True
        for hook in self.stop_hooks:
            hook()
        self.test_stop = time.time()
        self._kill_greenlets()
        if self.monitor is not None:
            self.monitor.stop()
        if self.gc is not None:
            self.gc.stop()
        return True

    def on_record(self, record: RequestRecord, **_: Any) -> None:
        self.classify(record)
        self.keep(record)

    def classify(self, rec: RequestRecord) -> None:
        """Flag warm-up (time-based) and cool-down; per-user request warm-up is set by the user."""
        if self.test_start is None:
            return
        c = self.current_config  # this test's warm-up: a worker's is the master's (load/warmup.py)
        if c.warmup_s and rec.start_time < self.test_start + c.warmup_s:
            rec.warmup = True
        if c.cooldown_s and c.run_time_s and rec.start_time > self.test_start + c.run_time_s - c.cooldown_s:
            rec.cooldown = True

    def keep(self, record: RequestRecord) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._kill_greenlets()

    def _gc_tick(self) -> None:
        if self.gc is not None:
            with span("gc.freeze"):
                self.gc.tick(self.environment.runner.user_count)

    def _kill_greenlets(self) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []


class WorkerRun(LLMRun):
    """A worker: ships records and statistics deltas to the master."""

    def __init__(self, environment: Any, config: RunConfig, node: str) -> None:
        super().__init__(environment, config, node)
        self.shipper = Shipper(node, dict(config.slos))
        self._stopping = False
        self._unconfirmed: dict[str, Any] | None = None  # the last final payload, until the master's ack
        self.master_lost = False  # master_watch.py: then nothing is sent, and nothing waits for an ack

    def install(self, runner: Any) -> None:
        super().install(runner)
        runner.register_message(STOP_MESSAGE, self.on_stop_request)
        runner.register_message(ACK_MESSAGE, self.on_ack)
        MasterWatch(runner, lambda reason: lose_master(self, reason))

    def on_ack(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """The master has this payload (distributed.py: delivery of the final payload)."""
        seq = (msg.data or {}).get("seq") if msg is not None else None
        self.shipper.confirm(seq)
        if self._unconfirmed is not None and seq == self._unconfirmed["seq"]:
            self._unconfirmed = None

    def keep(self, record: RequestRecord) -> None:
        self.shipper.add(record)

    def on_stop_request(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """The master asks us to stop now (see distributed.py); our test_stop ships."""
        if self.test_running and not self._stopping:
            self._stopping = True
            gevent.spawn(self.environment.runner.stop)

    def on_quitting(self, **kw: Any) -> None:
        if self._stopping:  # the master's llm_stop is being honoured: let it finish shipping
            limit = time.monotonic() + (self.environment.stop_timeout or 0) + 10
            while self.test_running and time.monotonic() < limit:
                gevent.sleep(0.05)
        self._stopping = True
        super().on_quitting(**kw)
        self._await_ack()

    def _await_ack(self) -> None:
        """Before this process exits: the master confirms the final payload, or it is sent again
        (bounded; a master that is gone costs ACK_WAIT_S and a warning, no data kept back)."""
        limit, resend = time.monotonic() + ACK_WAIT_S, time.monotonic() + ACK_RESEND_S
        while self._unconfirmed is not None and time.monotonic() < limit:
            gevent.sleep(0.02)
            if self._unconfirmed is not None and time.monotonic() >= resend:
                resend += ACK_RESEND_S
                self.environment.runner.send_message(MESSAGE, self._unconfirmed)
        if self._unconfirmed is not None:
            print(f"locust-llm: {self.node}: the master did not confirm this worker's final data within "
                  f"{ACK_WAIT_S:g} s; its last {self._unconfirmed['record_count']} records may be missing", flush=True)

    def on_test_start(self, **kw: Any) -> None:
        self._stopping = False
        super().on_test_start(**kw)

    def on_test_stop(self, **kw: Any) -> bool:
        if not super().on_test_stop(**kw):
            return False
        self._ship(final=True)
        return True

    def _ship(self, final: bool = False) -> None:
        with span("shipper"):
            health = self.monitor.to_wire() if self.monitor is not None else None
            payload = self.shipper.payload(health, final=final)
            payload["in_flight"] = getattr(self.environment, "llm_in_flight", 0)  # no record yet: lost with the worker
            if self.master_lost:  # kept for the worker's own file (master_watch.lose_master)
                return
            self._unconfirmed = payload if final else self._unconfirmed
            self.environment.runner.send_message(MESSAGE, payload)

    def _loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL)
            self._ship()
            self._gc_tick()


class MergingRun(LLMRun):
    """The roles with the merged view (local runner, master): statistics, timeline, outputs."""

    merges = True
    records_thread = False  # requests.jsonl written by a thread of its own (records_file.py)
    data_lag_s = 1.0  # how far behind the clock the merged view may be (a master: SHIP_INTERVAL + 1)

    def __init__(self, environment: Any, config: RunConfig, node: str) -> None:
        super().__init__(environment, config, node)
        self.simulator: Any = None
        self.writer = RecordWriter(d, background=self.records_thread) if (d := config.report_dir) else None
        self.collector = Collector(dict(config.slos), self.writer)
        self.last_summary: dict[str, Any] | None = None
        self.redactor = Redactor.for_run(config.options, config.user_settings.values())
        self.summary_hooks: list[Callable[[dict[str, Any]], None]] = []  # add sections to the summary (read only)

    def on_test_stop(self, **kw: Any) -> bool:
        if not super().on_test_stop(**kw):
            return False
        self.finish()
        return True

    def _loop(self) -> None:
        runner = self.environment.runner
        while True:
            gevent.sleep(1.0)
            now = time.time()
            self.collector.timeline.users(now, runner.user_count)
            self.collector.timeline.settle(now, pause=serve_ready_io)  # its slices time themselves
            if self.monitor is not None:
                serve_ready_io()  # each piece of the tick on its own turn of the loop: ready reads first
                with span("selfcheck"):  # one piece: a kill between the two would lose a second
                    self.collector.add_health(self.monitor.to_wire(encode=False))
            serve_ready_io()
            with span("tick"):
                self.tick(now)
                trim_per_second(self.environment, now, bool((self.config.options or {}).get("html_file")))
            self._gc_tick()

    def tick(self, now: float) -> None:
        """Once a second during the test (after the timeline and health are updated)."""

    # outputs --------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        c = self.collector
        s = c.stats.summary()
        ttft50, ttft99 = first_answer_ms(s["overall"])
        s["schema"] = SCHEMA
        s["host"] = self.environment.host
        s["simulator"] = self.simulator is not None
        s["window"] = {
            "test_start": self.test_start,
            "test_stop": self.test_stop,
            "measured_start": c.stats.total.first_start,
            "measured_end": c.stats.total.last_end,
            "measured_s": c.stats.total.duration_s,
            "warmup": {"requests_per_user": self._warmup_requests(), "seconds": self.config.warmup_s},
            "cooldown_s": self.config.cooldown_s,
        }
        users = self.current_config.user_settings.values()  # the advice names only options not already on
        s["self_check"] = verdict(list(c.health.values()), ttft50, ttft99, overall=s["overall"],
                                  window=(c.stats.total.first_start, c.stats.total.last_end),
                                  spawn_spread=all(u.spawn_spread for u in users),
                                  think_jitter=all(u.think_jitter_s > 0 for u in users))
        s["workers"] = c.workers_summary(self.test_stop, self.config.allow_worker_loss)
        s["records"] = c.records
        s["records_file"] = self.writer.state() if self.writer is not None else None  # whole, or why not
        s["backoff"] = c.backoff_summary(self.config.backoff)
        apply_summary_hooks(self.summary_hooks, s)  # one that fails is an error line, not a run without its report
        s["config"] = self.redactor.config(self.current_options)
        s["setup"] = setup_block(self.current_config, self.current_options)  # what was asked, for the report
        s = self.redactor.scrub(s)  # a key in any section (environment, command line, ...) is masked
        return s

    def _warmup_requests(self) -> int:
        """Per-user warm-up requests: the option, else none in a trace replay (this test's study),
        else the User classes' own (default 1)."""
        c = self.current_config
        counts = {c.warmup_for(getattr(k, "warmup_requests", 1)) for k in c.user_settings} or {c.warmup_for(1)}
        return counts.pop() if len(counts) == 1 else 1

    def finish(self) -> dict[str, Any]:
        if self.monitor is not None:
            self.collector.add_health(self.monitor.to_wire(encode=False))
        summary = self.summary()
        self.last_summary = summary
        failed = write_outputs(FinalData(summary, self.collector.timeline.rows(), self.collector.stats),
                               self.config.report_dir, () if self.config.html else ("html",))  # once each
        lost = summary["workers"]["lost"] and not self.config.allow_worker_loss  # part of the load is missing
        if failed or (self.writer is not None and self.writer.error) or lost:  # or a full disk, a vanished dir
            self.environment.process_exit_code = 1
        return summary

    def close(self) -> None:
        super().close()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.simulator is not None:
            self.simulator.stop()
            self.simulator = None


class LocalRun(MergingRun):
    """A single-process run: records go straight into the merged view."""

    records_thread = True  # the users stream on this loop: a write waiting for the disk must not hold it

    def keep(self, record: RequestRecord) -> None:
        record.worker = self.node
        self.collector.add_record(record)


class MasterRun(MergingRun):
    """The master: merges workers' payloads; no users of its own."""

    generates_load = False
    data_lag_s = SHIP_INTERVAL + 1.0
    _stop_sent = False

    def install(self, runner: Any) -> None:
        super().install(runner)
        fold_in_this_process()  # no stream waits on this loop: run-long distributions compact
        runner.register_message(MESSAGE, self.on_message)
        self.environment.events.test_stopping.add_listener(self.on_test_stopping)

    def keep(self, record: RequestRecord) -> None:  # pragma: no cover - the master has no users
        raise RuntimeError("the master runs no users")

    def on_message(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        if msg is not None:
            data = msg.data
            self.collector.receive(data)  # confirmed, also when delivered twice (the worker keeps it till then)
            self.environment.runner.send_message(ACK_MESSAGE, {"seq": data["seq"]}, client_id=data["worker"])

    def on_test_start(self, **kw: Any) -> None:
        self._stop_sent = False
        super().on_test_start(**kw)

    def stop_runner(self, runner: Any) -> None:
        """As a ``-t`` stop does: no Locust ``stop`` to the workers (they would unregister and never
        get the ``quit`` that follows); our ``llm_stop`` has them ship, Locust's quit ends them."""
        runner.stop(send_stop_to_client=False)

    def on_test_stopping(self, **_: Any) -> None:
        """Have every worker stop and ship its final payload before Locust stops."""
        runner = self.environment.runner
        # Locust drops its users dispatcher only after test_stopping; until then a worker that
        # quits on its own (Ctrl-C to the process group) makes it hand that worker's users to
        # the others, which would start sending again while we wait for their final data. The
        # state stays RUNNING: Locust's web UI stops polling at "stopping" and never shows "stopped"
        runner._users_dispatcher = None
        self.collector.stopping([c.id for c in runner.clients.all], time.time())
        if not self._stop_sent:  # a second caller (signal + last worker quitting) only waits
            self._stop_sent = True
            runner.send_message(STOP_MESSAGE, None)
        limit = time.monotonic() + (self.environment.stop_timeout or 0) + FINAL_WAIT_S
        while time.monotonic() < limit:
            live = [c.id for c in runner.clients.all if c.state != "missing"]
            if not self.collector.pending(live):
                return
            gevent.sleep(0.05)
        print("locust-llm: some workers did not send their final data in time: "
              + ", ".join(self.collector.pending([c.id for c in runner.clients.all])), flush=True)

    def tick(self, now: float) -> None:
        runner = self.environment.runner
        for c in runner.clients.all:
            self.collector.expect(c.id, now)
        for wid in list(self.collector.workers):
            client = runner.clients.get(wid)
            if client is None or client.state == "missing":
                self.collector.mark_lost(wid, now)


def role_for(runner: Any) -> type[LLMRun]:
    """The role class of this process, from Locust's runner."""
    if isinstance(runner, MasterRunner):
        return MasterRun
    if isinstance(runner, WorkerRunner):
        return WorkerRun
    return LocalRun


def run_for(environment: Any, config: RunConfig, runner: Any) -> LLMRun:
    """The role of this process, chosen once from Locust's runner."""
    role = role_for(runner)
    node = runner.client_id if role is WorkerRun else ("master" if role is MasterRun else "local")
    return role(environment, config, node)
