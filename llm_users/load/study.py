"""Load profiles and studies wired into a run: open-loop arrivals, stages, the SLO sweep, trace
replay. Options here; the work is in :mod:`.openloop`, :mod:`.stages`, :mod:`.sweep`,
:mod:`.trace_replay`, :mod:`.schedule_stats` and :mod:`.pareto`.

Which node does what:

- master / local runner: the rate controller (the run's rate and cap, split over workers),
  the stage or sweep shape (a ``LoadTestShape`` set on the environment), and the books that
  turn merged records into per-stage and open-loop figures; it writes ``stages.csv`` and
  ``pareto.csv`` beside summary.json;
- worker / local runner: the open-loop :class:`~.openloop.Scheduler`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent

from llm_users.durations import parse_duration_s
from llm_users.errors import ConfigError
from llm_users.load.openloop import (
    RATE_MESSAGE,
    RATE_REQUEST,
    RateController,
    Scheduler,
    parse_cap,
    parse_rate,
)
from llm_users.load.schedule_stats import ScheduleBook
from llm_users.load.stages import (
    StageBook,
    StagePlan,
    StageShape,
    parse_stages,
    parse_steps,
    settle_for,
    stages_csv,
)

SWEEP_MODES = ("concurrency", "rate")
#: a test's schedule starts this long after the test: each process first sets up its User (a forked
#: worker's first connection took ~0.9 s on a loaded 2-core machine)
START_LEAD_LOCAL_S, START_LEAD_MASTER_S = 0.5, 2.0
RESEND_EVERY = 3  # seconds between forced resends of every worker's open-loop share
log = logging.getLogger(__name__)


def add_arguments(parser: Any) -> None:
    """The study options (``init_command_line_parser``); each also LOCUST_LLM_* in the env."""
    g = parser.add_argument_group("locust-llm studies", "open-loop arrivals, stages, SLO sweeps, trace replay")

    def opt(name: str, help: str, web_ui: bool = False, **kw: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        action = g.add_argument(name, env_var=env, default=kw.pop("default", None), help=help, **kw)
        if web_ui:  # a group's add_argument is argparse's: mark it the way Locust's parser would
            action.include_in_web_ui = True
            action.is_secret = action.is_required = action.is_multiple = False

    opt("--llm-rate", "open loop: requests/s for the whole run, split over workers (users then idle)", web_ui=True)
    opt("--llm-arrival", "open loop: constant | poisson (default) | gamma:K (K = burstiness, vLLM bench's)",
        web_ui=True)
    opt("--llm-seed", "seed of the arrival schedule (same seed, same schedule; default random, written in summary)",
        web_ui=True)
    opt("--llm-max-inflight", "open loop: at most N requests in flight over the run; later arrivals wait (measured)",
        web_ui=True)
    opt("--llm-stages", "stages LOAD:DURATION,... e.g. 50:60s,100:60s (users; requests/s in open loop)")
    opt("--llm-steps", "stages START:STOP:STEP:DURATION e.g. 50:2000:50:60s (users; requests/s in open loop)")
    opt("--llm-settle", "steady-state rule: seconds excluded at each stage's start (default 20%% of it, <= 30 s)")
    opt("--llm-sweep", "SLO sweep: concurrency | rate (needs --llm-slo; -t is the whole sweep's budget)")
    opt("--llm-sweep-start", "sweep: first load probed (default 1)")
    opt("--llm-sweep-target", "sweep: share of requests that must meet every SLO (default 0.95)")
    opt("--llm-sweep-points", "sweep: most points measured; -t is split among them (default 12)")
    opt("--llm-trace", "replay a JSONL trace (timestamp ms, input_length, output_length[, hash_ids]) on schedule")
    opt("--llm-trace-speedup", "trace replay: play the trace this many times faster (default 1)")


def _get(opts: Any, name: str) -> Any:
    v = getattr(opts, name, None)
    return None if v is None or (isinstance(v, str) and v.strip() == "") else v


def _float(opts: Any, name: str, option: str, default: float, low: float, high: float = float("inf")) -> float:
    v = _get(opts, name)
    if v is None:
        return default
    try:
        f = float(v)
    except ValueError:
        f = low - 1
    if not low <= f <= high:
        raise ConfigError(f"{option} must be a number in [{low:g}, {high:g}], got {v!r}")
    return f


@dataclass(frozen=True, slots=True)
class StudyOptions:
    """The study options, parsed and checked once (:func:`parse_options`); the checks that
    depend on the run's role (a sweep's SLOs and time budget) are the :class:`Study`'s."""

    rate: float | None = None
    cap: int | None = None
    arrival: str | None = None
    seed: int | None = None
    plan: tuple[StagePlan, ...] | None = None
    settle: float | None = None
    sweep_mode: str | None = None
    trace: str | None = None
    speedup: float = 1.0
    target: float = 0.95
    sweep_start: float = 1.0
    sweep_points: int = 12
    open_loop: bool = False  # a rate, an arrival law (stages are then rates), a rate sweep or a trace


def parse_options(opts: Any) -> StudyOptions:
    """The study part of the configuration (called by :meth:`llm_users.options.RunConfig.from_options`,
    again at each test start); a :class:`ConfigError` naming the option otherwise."""
    rate = parse_rate(_get(opts, "llm_rate"))
    cap = parse_cap(_get(opts, "llm_max_inflight"))
    arrival = _get(opts, "llm_arrival")
    seed_text = _get(opts, "llm_seed")
    try:
        seed = None if seed_text is None else int(seed_text)
    except ValueError:
        raise ConfigError(f"--llm-seed must be a whole number, got {seed_text!r}") from None
    stages_text, steps_text = _get(opts, "llm_stages"), _get(opts, "llm_steps")
    sweep_mode = _get(opts, "llm_sweep")
    trace = _get(opts, "llm_trace")
    if stages_text and steps_text:
        raise ConfigError("give --llm-stages or --llm-steps, not both")
    plan = (parse_stages(stages_text) if stages_text else parse_steps(steps_text) if steps_text else None)
    settle = parse_duration_s(_get(opts, "llm_settle"), "--llm-settle") if _get(opts, "llm_settle") else None
    if sweep_mode is not None and sweep_mode not in SWEEP_MODES:
        raise ConfigError(f"--llm-sweep must be concurrency or rate, got {sweep_mode!r}")
    if sweep_mode and plan:
        raise ConfigError("--llm-sweep chooses its own load points: drop --llm-stages/--llm-steps")
    open_loop = bool(rate is not None or arrival or sweep_mode == "rate" or trace)
    if rate is not None and (plan or sweep_mode):
        raise ConfigError("--llm-rate is one load point: with stages or a sweep the stages give the rate "
                          "(use --llm-arrival to make them rates)")
    if cap is not None and not open_loop:
        raise ConfigError("--llm-max-inflight is for open loop: give --llm-rate (or --llm-arrival with stages)")
    if trace and (plan or sweep_mode or rate is not None):
        raise ConfigError("--llm-trace gives its own schedule: drop --llm-rate/--llm-stages/--llm-steps/--llm-sweep")
    speedup = _float(opts, "llm_trace_speedup", "--llm-trace-speedup", 1.0, 1e-6)
    target = _float(opts, "llm_sweep_target", "--llm-sweep-target", 0.95, 0.0, 1.0)
    sweep_start = _float(opts, "llm_sweep_start", "--llm-sweep-start", 1.0, 1e-6)
    sweep_points = int(_float(opts, "llm_sweep_points", "--llm-sweep-points", 12, 2, 1000))
    if arrival:
        from llm_users.load.arrivals import parse_arrival

        parse_arrival(arrival)  # bad input fails at start
    return StudyOptions(rate=rate, cap=cap, arrival=arrival, seed=seed, plan=tuple(plan) if plan else None,
                        settle=settle, sweep_mode=sweep_mode, trace=trace, speedup=speedup, target=target,
                        sweep_start=sweep_start, sweep_points=sweep_points, open_loop=open_loop)


class Study:
    """The study parts of one node, chosen from the configuration once at init."""

    def __init__(self, environment: Any, run: Any) -> None:
        self.environment = environment
        self.run = run
        # the run's role (llm_users/run.py), never a mode string
        self.on_worker = not run.merges
        self.on_master = run.merges and not run.generates_load
        o: StudyOptions = run.config.study
        self.rate, self.cap, self.arrival, self.seed = o.rate, o.cap, o.arrival, o.seed
        self.sweep_mode, self.trace, self.settle = o.sweep_mode, o.trace, o.settle
        self.plan: list[StagePlan] | None = list(o.plan) if o.plan else None
        sweeps_here = bool(self.sweep_mode) and not self.on_worker  # (--processes drops -t on its workers)
        if sweeps_here and not run.slos:
            raise ConfigError("--llm-sweep needs --llm-slo (e.g. --llm-slo tpot=30ms): the knee is where it breaks")
        if sweeps_here and not run.config.run_time_s:
            raise ConfigError("--llm-sweep needs -t/--run-time: it is the whole sweep's time budget")
        self.open_loop = o.open_loop
        self.speedup, self.target, self.sweep_start, self.sweep_points = o.speedup, o.target, o.sweep_start, o.sweep_points
        self.trace_rows = None
        if self.trace:
            from llm_users.load.trace_replay import load_trace

            self.trace_rows = load_trace(self.trace)
        merged = not self.on_worker
        self.controller: RateController | None = None
        self.scheduler: Scheduler | None = None
        self.sched_book = ScheduleBook() if merged else None
        self.book = StageBook(run.slos) if merged and (self.plan or self.sweep_mode) else None
        self.shape: Any = None
        self.sweep: Any = None
        self._loop: Any = None
        self._stopping = False
        self._wire()

    # wiring -------------------------------------------------------------------------------------
    def _wire(self) -> None:
        env, run = self.environment, self.run
        ev = env.events
        if self.on_worker:  # the master says whether and how (its share message)
            env.runner.register_message(RATE_MESSAGE, self._on_share)
        elif self.open_loop:
            self._ensure_controller()
        if self.on_master:
            env.runner.register_message(RATE_REQUEST, self._on_share_request)
        if not self.on_worker:
            assert run.collector is not None
            if self.sched_book is not None:
                run.collector.observers.append(self.sched_book.add)
            if self.book is not None:
                run.collector.observers.append(self.book.add)
            self._make_shape()
            run.summary_hooks.append(self._summary)
            run.output_hooks.append(self._write)
        ev.test_start.add_listener(self._on_test_start)
        ev.test_stopping.add_listener(self._on_test_stopping)
        run.stop_hooks.append(self._on_stop)

    def _ensure_controller(self) -> None:
        if self.controller is not None:
            return
        self.open_loop = True
        self.environment.llm_open_loop = True
        self.controller = RateController(self.environment, not (self.on_worker or self.on_master), self.rate, self.cap, self.arrival, self.seed)
        if self.trace:
            self.controller.extra = {"trace": self.trace, "trace_speedup": self.speedup}
        self.scheduler = self.controller.scheduler
        if self.scheduler is not None and self.trace_rows is not None:
            from llm_users.load.trace_replay import TraceSource

            self.scheduler.source = TraceSource(self.trace_rows, self.speedup)

    def _make_shape(self) -> None:
        env = self.environment
        kind = "rate" if self.open_loop else "users"
        if self.plan:
            self.shape = StageShape(self.plan, kind, self._on_stage)
        elif self.sweep_mode:
            from llm_users.load.sweep import SweepShape

            assert self.book is not None and self.run.config.run_time_s
            kind = "rate" if self.sweep_mode == "rate" else "users"
            budget = max(self.run.config.run_time_s - 2.0, 1.0)  # leave the last seconds to the stop
            self.sweep = self.shape = SweepShape(
                kind=kind, book=self.book, on_point=self._on_point, budget_s=budget, start=self.sweep_start,
                target=self.target, points=self.sweep_points, ship_delay_s=2.5 if self.on_master else 0.2,  # how late records arrive
                settle_s=self.settle)
            assert self.run.collector is not None
            self.run.collector.observers.append(self.sweep.see)
        if self.shape is not None:
            env.shape_class = self.shape
            self.shape.runner = env.runner

    # events -------------------------------------------------------------------------------------
    def _on_share(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """Worker: the master's share; the first one switches this worker to open loop."""
        if msg is None:
            return
        data = msg.data
        self._worker_scheduler()
        assert self.scheduler is not None
        if data.get("trace") and self.scheduler.source is None:
            from llm_users.load.trace_replay import TraceSource, load_trace

            self.scheduler.source = TraceSource(load_trace(data["trace"]), float(data.get("trace_speedup", 1)))
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
            self.scheduler = Scheduler(self.environment)

    def _on_share_request(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """Master: a worker started its test without a share (it came before the worker could
        take it): send every share again."""
        if self.controller is not None:
            self.controller.publish(force=True)

    def _on_test_start(self, **_: Any) -> None:
        self._stopping = False
        if not self.on_worker:
            self._reread_web_form()
        elif self.run.current_config.study.open_loop:  # the master's options came with the spawn
            self._worker_scheduler()
            assert self.scheduler is not None
            if not self.scheduler.has_share:  # its share was lost (sent before our handler existed)
                self.environment.runner.send_message(RATE_REQUEST, None)
            return
        if self.controller is not None:
            if self.trace_rows is not None:
                self.controller.rate = 1.0  # the trace times the requests; any rate > 0 wakes the loop
            lead = (START_LEAD_MASTER_S if self.on_master else START_LEAD_LOCAL_S)  # a new test: time for every worker to set up before the first arrival
            self.controller.origin = time.time() + lead
            self.controller.reset_workers()
            self.controller.publish(force=True)  # and every worker gets its share again
            if self.on_master:
                self._loop = gevent.spawn(self._publish_loop)
        if self.scheduler is not None:
            self.scheduler.start()

    def _reread_web_form(self) -> None:
        """The web UI's start form may have set the open-loop fields: the configuration read
        again at this test's start (llm_users/options.py) has them."""
        from llm_users.load.arrivals import parse_arrival

        o = self.run.current_config.study
        rate, arrival, cap, seed_n = o.rate, o.arrival, o.cap, o.seed
        law = str(parse_arrival(arrival)) if arrival else None
        if rate is None or self.shape is not None:
            return
        self.rate, self.cap, self.arrival = rate, cap, arrival
        if seed_n is not None:
            self.seed = seed_n
        self._ensure_controller()
        c = self.controller
        assert c is not None
        c.rate, c.cap = rate, cap
        if law:
            c.arrival = law
        if seed_n is not None:
            c.seed = seed_n

    def _publish_loop(self) -> None:
        tick = 0
        while True:
            gevent.sleep(1.0)
            tick += 1
            if self.controller is not None:  # workers joined or left: rebalance (and resend now and then)
                self.controller.publish(force=tick % RESEND_EVERY == 0)

    def _on_test_stopping(self, **_: Any) -> None:
        self._stopping = True  # no share may restart the scheduler once the last data is on its way
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None
        if self.scheduler is not None:
            self.scheduler.stop_scheduling()

    def _on_stop(self) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None
        if self.scheduler is not None:
            self.scheduler.drain(float(self.environment.stop_timeout or 0))
        if self.book is not None:
            self.book.finish(time.time())

    def _on_stage(self, index: int, plan: StagePlan) -> None:
        assert self.book is not None
        kind = "rate" if self.open_loop else "users"
        self.book.begin(kind, plan.load, time.time(), settle_for(plan.duration_s, self.settle))
        if self.controller is not None:
            self.controller.set_rate(plan.load)

    def _on_point(self, kind: str, load: float) -> None:
        if self.controller is not None and kind == "rate":
            self.controller.set_rate(load)

    # outputs ------------------------------------------------------------------------------------
    def _summary(self, s: dict[str, Any]) -> None:
        now = time.time()
        if self.sched_book is not None and self.sched_book.active and self.controller is not None:
            target = self.controller.summary()
            if self.shape is not None:
                target["rate"] = None  # each stage or point has its own (summary "stages")
            if self.trace_rows is not None:
                target.update({"rate": None, "trace": self.trace, "trace_speedup": self.speedup,
                               "trace_requests": len(self.trace_rows)})
            s["arrivals"] = self.sched_book.summary(target)
        if self.book is not None:
            s["stages"] = self.book.summary(now)
        if self.sweep is not None:
            s["sweep"] = self.sweep.summary(now)

    def _write(self, directory: str, s: dict[str, Any]) -> None:
        from llm_users.load.pareto import pareto_csv

        d = Path(directory)
        if s.get("stages"):
            (d / "stages.csv").write_text(stages_csv(s["stages"]))
        if s.get("sweep"):
            key = "concurrency" if s["sweep"]["mode"] == "concurrency" else "rate"
            (d / "pareto.csv").write_text(pareto_csv(s["sweep"]["points"], key))
        elif s.get("stages"):
            key = "rate" if "rate" in s["stages"][0] else "users"
            (d / "pareto.csv").write_text(pareto_csv(s["stages"], key))


def attach(environment: Any, run: Any) -> Study:
    return Study(environment, run)
