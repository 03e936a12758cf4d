"""The open-loop profile's part in a run: one node's arrival engine (:mod:`.open_loop`).

Which node does what:

- master / local runner: the :class:`~llm_users.load.openloop.RateController` (the run's rate
  and cap, split over workers; the master resends the shares every second as workers come and
  go) and the :class:`~llm_users.load.schedule_stats.ScheduleBook` that turns merged records
  into the ``arrivals`` summary block, and the per-second
  :class:`~llm_users.load.schedule_series.ScheduleSeries` (offered and sent rate, in flight,
  schedule lag) that it adds to the timeline at each summary (timeseries.csv, report.html);
- worker / local runner: the :class:`~llm_users.load.openloop.Scheduler`; a worker switches to
  open loop on its first share from the master, so it needs no study options of its own.

The other profiles drive it: a stage or sweep point sets the rate (:meth:`OpenLoopRun.set_rate`),
trace replay gives the schedule (:meth:`OpenLoopRun.replay`, and ``share_hooks`` on a worker).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent

from llm_users.load.arrivals import parse_arrival
from llm_users.load.openloop import RATE_MESSAGE, RATE_REQUEST, RateController, Scheduler
from llm_users.load.profile import ProfileRun, Study, StudyConfig
from llm_users.load.schedule_series import ScheduleSeries
from llm_users.load.schedule_stats import ScheduleBook

#: a test's schedule starts this long after the test: each process first sets up its User (a forked
#: worker's first connection took ~0.9 s on a loaded 2-core machine)
START_LEAD_LOCAL_S, START_LEAD_MASTER_S = 0.5, 2.0
RESEND_EVERY = 3  # seconds between forced resends of every worker's open-loop share


class OpenLoopRun(ProfileRun):
    """One node's arrivals: controller and/or scheduler, chosen from the run's role."""

    def __init__(self, study: Study, config: Any, name: str) -> None:
        """``config``: the profile's :class:`~.open_loop.OpenLoopConfig`; ``name``: its key in
        the study configuration (read again at each test start)."""
        self.study = study
        self.environment = study.environment
        self.run = study.run
        self.name = name
        self.on_worker, self.on_master = study.on_worker, study.on_master
        self.rate, self.cap, self.arrival, self.seed = config.rate, config.cap, config.arrival, config.seed
        self.open_loop = study.config.open_loop
        self.controller: RateController | None = None
        self.scheduler: Scheduler | None = None
        self.sched_book = ScheduleBook() if not self.on_worker else None
        self.series = ScheduleSeries() if not self.on_worker else None  # timeseries.csv's open-loop columns
        self.fixed_rate: float | None = None  # trace replay: the trace times the requests
        self.share_extra: dict[str, Any] = {}  # sent with every share (trace replay: the file and speed-up)
        self.source: Any = None  # the local scheduler's requests instead of drawn gaps (a trace)
        self.target_extra: dict[str, Any] = {}  # what the summary's target says besides the controller
        #: a worker reads what a share carries besides its rate (trace replay), before applying it
        self.share_hooks: list[Callable[[dict[str, Any], Scheduler], None]] = []
        self._loop: Any = None
        self._stopping = False
        runner = self.environment.runner
        if self.on_worker:  # the master says whether and how (its share message)
            runner.register_message(RATE_MESSAGE, self._on_share)
        elif self.open_loop:
            self.ensure_controller()
        if self.on_master:
            runner.register_message(RATE_REQUEST, self._on_share_request)
        if self.sched_book is not None:
            assert self.run.collector is not None
            self.run.collector.observers.append(self.sched_book.add)
        if self.series is not None:
            self.run.collector.observers.append(self.series.add)

    # what the other profiles use ----------------------------------------------------------------
    def ensure_controller(self) -> None:
        if self.controller is not None:
            return
        self.open_loop = True
        self.environment.llm_open_loop = True
        self.controller = RateController(self.environment, not (self.on_worker or self.on_master), self.rate,
                                         self.cap, self.arrival, self.seed, self.study.user_classes)
        self.controller.extra = self.share_extra
        self.scheduler = self.controller.scheduler
        if self.scheduler is not None and self.source is not None:
            self.scheduler.source = self.source

    def set_rate(self, rate: float) -> None:
        """A stage or sweep point's rate (closed loop: nothing to do)."""
        if self.controller is not None:
            self.controller.set_rate(rate)

    def replay(self, source: Any, share: dict[str, Any], target: dict[str, Any]) -> None:
        """Send ``source``'s requests on its own schedule (trace replay): ``share`` goes with every
        worker's share, ``target`` into the summary's target."""
        self.fixed_rate = 1.0  # any rate > 0 wakes the scheduler's loop
        self.share_extra.update(share)
        self.target_extra.update(target)
        self.source = source
        if self.scheduler is not None:
            self.scheduler.source = source

    # events -------------------------------------------------------------------------------------
    def _on_share(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """Worker: the master's share; the first one switches this worker to open loop."""
        if msg is None:
            return
        data = msg.data
        self._worker_scheduler()
        assert self.scheduler is not None
        for hook in self.share_hooks:
            hook(data, self.scheduler)
        self.scheduler.set_share(data)
        # the master sends shares only while its test runs; a worker that joins mid-run gets no
        # spawn message (open loop runs no Locust users), so its share is its start signal
        if not self._stopping:
            if self.run.test_start is None:  # joined mid-run without a test_start of its own (its
                self.run.on_test_start()  # spawn came before its listeners): ship, and stop on llm_stop
            self.scheduler.start()

    def _worker_scheduler(self) -> None:
        if self.scheduler is None:
            self.environment.llm_open_loop = True  # Locust's users idle from now on
            self.scheduler = Scheduler(self.environment, self.study.user_classes)

    def _on_share_request(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """Master: a worker started its test without a share (it came before the worker could
        take it): send every share again."""
        if self.controller is not None:
            self.controller.publish(force=True)

    def on_test_start(self, fresh: StudyConfig | None) -> None:
        self._stopping = False
        if not self.on_worker:
            if fresh is not None:
                self._reread_web_form(fresh.part(self.name))
        elif fresh is not None and fresh.open_loop:  # the master's options came with the spawn
            self._worker_scheduler()
            assert self.scheduler is not None
            if not self.scheduler.has_share:  # its share was lost (sent before our handler existed)
                self.environment.runner.send_message(RATE_REQUEST, None)
            return
        if self.controller is not None:
            if self.fixed_rate is not None:
                self.controller.rate = self.fixed_rate
            lead = (START_LEAD_MASTER_S if self.on_master else START_LEAD_LOCAL_S)  # a new test: time for every worker to set up before the first arrival
            self.controller.origin = time.time() + lead
            self.controller.reset_workers()
            self.controller.publish(force=True)  # and every worker gets its share again
            if self.on_master:
                self._loop = gevent.spawn(self._publish_loop)
        if self.scheduler is not None:
            self.scheduler.start()

    def _reread_web_form(self, cfg: Any) -> None:
        """The web UI's start form may have set the open-loop fields: take them (a run with a
        shape keeps its stages' rates)."""
        if cfg is None or cfg.rate is None or self.study.shape is not None:
            return
        self.rate, self.cap, self.arrival = cfg.rate, cfg.cap, cfg.arrival
        if cfg.seed is not None:
            self.seed = cfg.seed
        self.ensure_controller()
        c = self.controller
        assert c is not None
        c.rate, c.cap = cfg.rate, cfg.cap
        if cfg.arrival:
            c.arrival = str(parse_arrival(cfg.arrival))
        if cfg.seed is not None:
            c.seed = cfg.seed

    def _publish_loop(self) -> None:
        tick = 0
        while True:
            gevent.sleep(1.0)
            tick += 1
            if self.controller is not None:  # workers joined or left: rebalance (and resend now and then)
                self.controller.publish(force=tick % RESEND_EVERY == 0)

    def on_test_stopping(self) -> None:
        self._stopping = True  # no share may restart the scheduler once the last data is on its way
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None
        if self.scheduler is not None:
            self.scheduler.stop_scheduling()

    def on_stop(self) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None
        if self.scheduler is not None:
            self.scheduler.drain(float(self.environment.stop_timeout or 0))

    # the summary block --------------------------------------------------------------------------
    def summary(self, s: dict[str, Any]) -> None:
        if self.sched_book is not None and self.sched_book.active and self.controller is not None:
            target = self.controller.summary()
            if self.study.shape is not None:
                target["rate"] = None  # each stage or point has its own (summary "stages")
            target.update(self.target_extra)
            if hasattr(self.source, "describe"):  # trace replay: how its prompts were sized
                target["trace_prompts"] = self.source.describe()
            s["arrivals"] = self.sched_book.summary(target)
        if self.series is not None and self.run.collector is not None:
            for t, values in self.series.rows().items():  # in timeseries.csv and the report's charts
                self.run.collector.timeline.add_extra(t, values)
