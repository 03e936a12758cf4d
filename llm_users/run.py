"""One Locust process's part in a run: local, master or worker.

- local: records go into a :class:`~llm_users.distributed.Collector` directly;
- worker: records go into a :class:`~llm_users.distributed.Shipper`, shipped to the master;
- master: payloads are merged into the Collector; the master writes the outputs.

Every load-generating node runs a :class:`~llm_users.selfcheck.SelfMonitor`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent

from .distributed import MESSAGE, SHIP_INTERVAL, STOP_MESSAGE, Collector, Shipper
from .metrics import RequestRecord
from .options import RunConfig
from .outputs import SCHEMA, FinalData, RecordWriter, write_outputs
from .redaction import redact_config
from .selfcheck import SelfMonitor, verdict


class LLMRun:
    def __init__(self, environment: Any, config: RunConfig, mode: str, node: str) -> None:
        self.environment = environment
        self.config = config
        self.mode = mode
        self.node = node
        self.slos = dict(config.slos)
        self.warmup_s = config.warmup_s
        self.cooldown_s = config.cooldown_s
        self.run_time = config.run_time_s
        self.report_dir = config.report_dir
        self.simulator: Any = None
        self.writer = RecordWriter(self.report_dir) if self.report_dir and mode != "worker" else None
        self.collector = Collector(self.slos, self.writer) if mode != "worker" else None
        self.shipper = Shipper(node, self.slos) if mode == "worker" else None
        self.monitor = SelfMonitor(node) if mode != "master" else None
        self.test_start: float | None = None
        self.test_stop: float | None = None
        self._greenlets: list[Any] = []
        self.last_summary: dict[str, Any] | None = None
        self.summary_hooks: list[Callable[[dict[str, Any]], None]] = []  # add sections to the summary

    # events ---------------------------------------------------------------------------------
    def on_test_start(self, **_: Any) -> None:
        self.test_start = time.time()
        self.test_stop = None
        if self.monitor is not None:
            self.monitor.start()
        if self.mode == "worker":
            self._greenlets.append(gevent.spawn(self._ship_loop))
        else:
            self._greenlets.append(gevent.spawn(self._master_loop))

    def on_record(self, record: RequestRecord, **_: Any) -> None:
        self.classify(record)
        if self.shipper is not None:
            self.shipper.add(record)
        elif self.collector is not None:
            record.worker = self.node
            self.collector.add_record(record)

    def classify(self, rec: RequestRecord) -> None:
        """Flag warm-up (time-based) and cool-down; per-user request warm-up is set by the user."""
        if self.test_start is None:
            return
        if self.warmup_s and rec.start_time < self.test_start + self.warmup_s:
            rec.warmup = True
        if self.cooldown_s and self.run_time and rec.start_time > self.test_start + self.run_time - self.cooldown_s:
            rec.cooldown = True

    def on_message(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        if self.collector is not None and msg is not None:
            self.collector.receive(msg.data)

    def on_stop_request(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """Worker: the master asks us to stop now (see distributed.py); our test_stop ships."""
        gevent.spawn(self.environment.runner.stop)

    def on_test_stopping(self, **_: Any) -> None:
        """Master: have every worker stop and ship its final payload before Locust stops."""
        runner = self.environment.runner
        assert self.collector is not None
        runner.send_message(STOP_MESSAGE, None)
        limit = time.monotonic() + (self.environment.stop_timeout or 0) + 15
        while time.monotonic() < limit:
            live = [c.id for c in runner.clients.all if c.state != "missing"]
            if not self.collector.pending(live):
                return
            gevent.sleep(0.05)
        print("locust-llm: some workers did not send their final data in time: "
              + ", ".join(self.collector.pending([c.id for c in runner.clients.all])), flush=True)

    def on_test_stop(self, **_: Any) -> None:
        self.test_stop = time.time()
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []
        if self.monitor is not None:
            self.monitor.stop()
        if self.mode == "worker":
            self._ship(final=True)
        else:
            self.finish()

    # loops ----------------------------------------------------------------------------------
    def _ship(self, final: bool = False) -> None:
        assert self.shipper is not None
        health = self.monitor.to_wire() if self.monitor is not None else None
        self.environment.runner.send_message(MESSAGE, self.shipper.payload(health, final=final))

    def _ship_loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL)
            self._ship()

    def _master_loop(self) -> None:
        runner = self.environment.runner
        while True:
            gevent.sleep(1.0)
            now = time.time()
            assert self.collector is not None
            self.collector.timeline.users(now, runner.user_count)
            self.collector.timeline.settle(now)
            if self.monitor is not None:
                self.collector.add_health(self.monitor.to_wire())
            if self.mode == "master":
                self._check_workers(runner, now)

    def _check_workers(self, runner: Any, now: float) -> None:
        assert self.collector is not None
        for wid in list(self.collector.workers):
            client = runner.clients.get(wid)
            if client is None or client.state == "missing":
                self.collector.mark_lost(wid, now)

    # outputs --------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        assert self.collector is not None
        c = self.collector
        s = c.stats.summary()
        ttft50 = s["overall"]["ttft"]["p50"]
        s["schema"] = SCHEMA
        s["host"] = self.environment.host
        s["simulator"] = self.simulator is not None
        s["window"] = {
            "test_start": self.test_start,
            "test_stop": self.test_stop,
            "measured_start": c.stats.total.first_start,
            "measured_end": c.stats.total.last_end,
            "measured_s": c.stats.total.duration_s,
            "warmup": {"requests_per_user": self._warmup_requests(), "seconds": self.warmup_s},
            "cooldown_s": self.cooldown_s,
        }
        s["self_check"] = verdict(list(c.health.values()), ttft50)
        s["workers"] = {
            "reported": sorted(c.workers),
            "lost": c.lost_workers(self.test_stop),
            "duplicate_records_dropped": c.duplicates,
        }
        s["records"] = c.records
        for hook in self.summary_hooks:
            hook(s)
        s["config"] = redact_config(self.environment.parsed_options)
        return s

    def _warmup_requests(self) -> int:
        """Per-user warm-up requests: the option, else the User classes' own (default 1)."""
        if self.config.warmup_requests is not None:
            return self.config.warmup_requests
        counts = {getattr(c, "warmup_requests", 1) for c in self.config.user_settings}
        return counts.pop() if len(counts) == 1 else 1

    def finish(self) -> dict[str, Any]:
        assert self.collector is not None
        if self.monitor is not None:
            self.collector.add_health(self.monitor.to_wire())
        summary = self.summary()
        self.last_summary = summary
        write_outputs(FinalData(summary, self.collector.timeline.rows(), self.collector.stats), self.report_dir)
        return summary

    def close(self) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.simulator is not None:
            self.simulator.stop()
            self.simulator = None
