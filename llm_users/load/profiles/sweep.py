"""The SLO sweep profile: ``--llm-sweep concurrency|rate`` (``--llm-sweep-start``,
``--llm-sweep-target``, ``--llm-sweep-points``, ``--llm-sweep-tolerance``) finds the largest
load at which the share of requests meeting every ``--llm-slo`` stays above the target, within
``-t`` for the whole sweep: a bisection search to a stated tolerance (there is no separate
``--llm-search``: the sweep is the search; docs/studies.md).

Where the records merge it sets a :class:`~llm_users.load.sweep.SweepShape` on the run, keeps the
points' :class:`~llm_users.load.stages.StageBook` (the ``stages`` and ``sweep`` blocks), and at the
stop writes ``stages.csv`` and ``pareto.csv`` (the points' frontier). A plan whose points ``-t``
cannot hold is resized at start, in one console line (``sweep.plan_note``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.load.profile import (
    LoadProfile,
    OptionAdder,
    ProfileRun,
    Study,
    StudyConfig,
    given,
    log,
    number,
)
from llm_users.load.profiles.open_loop import OpenLoop, arrival_clause
from llm_users.load.profiles.stages import flag_pooled_goodput
from llm_users.load.search import Tolerance, default_tolerance, parse_tolerance

SWEEP_MODES = ("concurrency", "rate")


@dataclass(frozen=True, slots=True)
class SweepConfig:
    mode: str  # one of SWEEP_MODES
    start: float = 1.0
    target: float = 0.95
    points: int = 12
    tolerance: Tolerance | None = None  # None: 1 user (concurrency), 5% (rate)


class Sweep(LoadProfile):
    name = "sweep"

    def add_arguments(self, opt: OptionAdder) -> None:
        opt("--llm-sweep", "SLO sweep: concurrency | rate (needs --llm-slo; -t is the whole sweep's budget)")
        opt("--llm-sweep-start", "sweep: first load probed (default 1)")
        opt("--llm-sweep-target", "sweep: share of requests that must meet every SLO (default 0.95)")
        opt("--llm-sweep-points", "sweep: most points measured; -t is split among them, fewer when -t "
            "cannot hold them (said at start; default 12)")
        opt("--llm-sweep-tolerance", "sweep: the bisection stops when the passing and failing loads are this "
            "close: users (concurrency), req/s (rate) or a share such as 5%% (default 1 user / 5%%)")

    def parse(self, opts: Any) -> SweepConfig | None:
        mode = given(opts, "llm_sweep")
        if mode is not None and mode not in SWEEP_MODES:
            raise ConfigError(f"--llm-sweep must be concurrency or rate, got {mode!r}")
        target = number(opts, "llm_sweep_target", "--llm-sweep-target", 0.95, 0.0, 1.0)
        start = number(opts, "llm_sweep_start", "--llm-sweep-start", 1.0, 1e-6)
        points = int(number(opts, "llm_sweep_points", "--llm-sweep-points", 12, 2, 1000))
        tolerance = parse_tolerance(given(opts, "llm_sweep_tolerance"), mode)
        return None if mode is None else SweepConfig(mode, start, target, points, tolerance)

    def open_loop(self, config: SweepConfig | None) -> bool:
        return config is not None and config.mode == "rate"

    def check(self, study: StudyConfig) -> None:
        stages = study.part("stages")
        if study.part(self.name) is not None and stages is not None and stages.plan:
            raise ConfigError("--llm-sweep chooses its own load points: drop --llm-stages/--llm-steps")

    def attach(self, study: Study, config: SweepConfig | None) -> ProfileRun | None:
        if config is None or study.on_worker:  # (--processes drops -t on its workers)
            return None
        if not study.run.slos:
            raise ConfigError("--llm-sweep needs --llm-slo (e.g. --llm-slo tpot=30ms): the knee is where it breaks")
        if not study.run.config.run_time_s:
            raise ConfigError("--llm-sweep needs -t/--run-time: it is the whole sweep's time budget")
        return SweepRun(study, config)

    def describe(self, config: SweepConfig | None, study: StudyConfig) -> str | None:
        if config is None:
            return None
        unit = "req/s" if config.mode == "rate" else "users"
        arrivals = arrival_clause(study)
        kind = "rate" if config.mode == "rate" else "users"
        tol = (config.tolerance or default_tolerance(kind)).text(kind)
        return (f"SLO sweep of {config.mode}: from {config.start:g} {unit}, at most {config.points} points, "
                f"target {config.target:.0%} of requests meeting every SLO, bisection to within {tol}"
                + (f"; {arrivals}" if arrivals else ""))

    def console_lines(self, summary: dict[str, Any]) -> list[str]:
        from llm_users.outputs.study_console import sweep_lines

        return sweep_lines(summary)

    def report_sections(self, summary: dict[str, Any]) -> list[str]:
        if not summary.get("sweep"):
            return []
        from llm_users.outputs.study_report import sweep_section

        return sweep_section(summary)

    def files(self, summary: dict[str, Any]) -> dict[str, str]:
        sw = summary.get("sweep")
        if not sw:
            return {}
        from llm_users.load.pareto import pareto_csv
        from llm_users.load.stages import stages_csv

        out = {"stages.csv": stages_csv(summary["stages"])} if summary.get("stages") else {}
        key = "concurrency" if sw["mode"] == "concurrency" else "rate"
        out["pareto.csv"] = pareto_csv(sw["points"], key)
        return out


class SweepRun(ProfileRun):
    """The sweep's shape and its points' book (master or local runner)."""

    def __init__(self, study: Study, config: SweepConfig) -> None:
        from llm_users.load.stages import StageBook
        from llm_users.load.sweep import SweepShape

        run = study.run
        assert run.collector is not None and run.config.run_time_s
        self.open_loop = study.get(OpenLoop)
        self.book = StageBook(run.slos)
        run.collector.observers.append(self.book.add)
        stages = study.config.part("stages")
        budget = max(run.config.run_time_s - 2.0, 1.0)  # leave the last seconds to the stop
        self.sweep = SweepShape(
            kind="rate" if config.mode == "rate" else "users", book=self.book, on_point=self._on_point,
            budget_s=budget, start=config.start, target=config.target, points=config.points,
            ship_delay_s=2.5 if study.on_master else 0.2,  # how late records arrive
            settle_s=stages.settle_s if stages is not None else None, tolerance=config.tolerance,
            repeat=stages.repeat if stages is not None else 1, run_time_s=run.config.run_time_s)
        if self.sweep.plan_note:  # the plan -t cannot hold, resized: said once, at start
            log.warning("locust-llm: %s", self.sweep.plan_note)
        run.collector.observers.append(self.sweep.see)
        study.set_shape(self.sweep)

    def _on_point(self, kind: str, load: float) -> None:
        if self.open_loop is not None and kind == "rate":
            self.open_loop.set_rate(load)

    def on_stop(self) -> None:
        self.book.finish(time.time())

    def summary(self, s: dict[str, Any]) -> None:
        now = time.time()
        s["sweep"] = self.sweep.summary(now)
        s["stages"] = self.book.summary(now) if self.sweep.repeat == 1 else [  # the points, pooled over repeats
            {k: v for k, v in p.items() if k not in ("passed", "reason", "concurrency")} for p in s["sweep"]["points"]]
        flag_pooled_goodput(s)
