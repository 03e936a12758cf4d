"""The stages profile: ``--llm-stages 50:60s,100:60s`` or ``--llm-steps 50:2000:50:60s`` (and the
steady-state rule ``--llm-settle``): the run as a sequence of load levels, users in closed loop
and requests/s in open loop (``--llm-arrival`` given).

Where the records merge (master or local runner) it sets a
:class:`~llm_users.load.stages.StageShape` on the run and keeps a
:class:`~llm_users.load.stages.StageBook` (the ``stages`` block); at the stop it writes
``stages.csv`` and ``pareto.csv``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from llm_users.durations import parse_duration_s
from llm_users.errors import ConfigError
from llm_users.load.plans import StagePlan, parse_stages, parse_steps, settle_for
from llm_users.load.profile import LoadProfile, OptionAdder, ProfileRun, Study, StudyConfig, given
from llm_users.load.profiles.open_loop import OpenLoop, arrival_clause


@dataclass(frozen=True, slots=True)
class StagesConfig:
    plan: tuple[StagePlan, ...] | None = None
    settle_s: float | None = None  # --llm-settle (a sweep's points use it too)


def describe_plan(plan: tuple[StagePlan, ...], unit: str, arrivals: str = "") -> str:
    """``8 stages of 2 s: 8 to 64 users, step 8`` (even steps) or ``stages: 50 users for 60 s,
    100 users for 60 s`` (the first 6, then how many more)."""
    loads = [p.load for p in plan]
    steps = {round(b - a, 9) for a, b in zip(loads, loads[1:], strict=False)}
    durations = {p.duration_s for p in plan}
    if len(plan) > 2 and len(steps) == 1 and len(durations) == 1:
        text = (f"{len(plan)} stages of {plan[0].duration_s:g} s: {loads[0]:g} to {loads[-1]:g} {unit}, "
                f"step {steps.pop():g}")
    else:
        shown = ", ".join(f"{p.load:g} {unit} for {p.duration_s:g} s" for p in plan[:6])
        text = f"{len(plan)} stages: {shown}" + (f" and {len(plan) - 6} more" if len(plan) > 6 else "")
    return text + (f"; {arrivals}" if arrivals else "")


class Stages(LoadProfile):
    name = "stages"

    def add_arguments(self, opt: OptionAdder) -> None:
        opt("--llm-stages", "stages LOAD:DURATION,... e.g. 50:60s,100:60s (users; requests/s in open loop)")
        opt("--llm-steps", "stages START:STOP:STEP:DURATION e.g. 50:2000:50:60s (users; requests/s in open loop)")
        opt("--llm-settle", "steady-state rule: seconds excluded at each stage's start (default 20%% of it, <= 30 s)")

    def parse(self, opts: Any) -> StagesConfig | None:
        stages_text, steps_text = given(opts, "llm_stages"), given(opts, "llm_steps")
        if stages_text and steps_text:
            raise ConfigError("give --llm-stages or --llm-steps, not both")
        plan = parse_stages(stages_text) if stages_text else parse_steps(steps_text) if steps_text else None
        settle = given(opts, "llm_settle")
        settle_s = parse_duration_s(settle, "--llm-settle") if settle else None
        if not plan and settle_s is None:
            return None
        return StagesConfig(tuple(plan) if plan else None, settle_s)

    def attach(self, study: Study, config: StagesConfig | None) -> ProfileRun | None:
        if config is None or not config.plan or study.on_worker:  # the master's shape drives the workers
            return None
        return StagesRun(study, config)

    def describe(self, config: StagesConfig | None, study: StudyConfig) -> str | None:
        if config is None or not config.plan:
            return None
        return describe_plan(config.plan, "req/s" if study.open_loop else "users", arrival_clause(study))

    def console_lines(self, summary: dict[str, Any]) -> list[str]:
        from llm_users.outputs.study_console import stages_lines

        return stages_lines(summary)  # a sweep's points too (its summary has "stages")

    def report_sections(self, summary: dict[str, Any]) -> list[str]:
        if summary.get("sweep") or not summary.get("stages"):
            return []  # a sweep's section shows its points
        from llm_users.outputs.study_report import stages_section

        return stages_section(summary)

    def files(self, summary: dict[str, Any]) -> dict[str, str]:
        stages = summary.get("stages")
        if not stages or summary.get("sweep"):
            return {}
        from llm_users.load.pareto import pareto_csv
        from llm_users.load.stages import stages_csv

        key = "rate" if "rate" in stages[0] else "users"
        return {"stages.csv": stages_csv(stages), "pareto.csv": pareto_csv(stages, key)}


class StagesRun(ProfileRun):
    """The shape and the per-stage book of one run (master or local runner)."""

    def __init__(self, study: Study, config: StagesConfig) -> None:
        from llm_users.load.stages import StageBook, StageShape

        assert config.plan and study.run.collector is not None
        self.open_loop = study.get(OpenLoop)
        self.kind = "rate" if study.config.open_loop else "users"
        self.settle_s = config.settle_s
        self.book = StageBook(study.run.slos)
        study.run.collector.observers.append(self.book.add)
        study.set_shape(StageShape(list(config.plan), self.kind, self._on_stage))

    def _on_stage(self, index: int, plan: StagePlan) -> None:
        self.book.begin(self.kind, plan.load, time.time(), settle_for(plan.duration_s, self.settle_s))
        if self.open_loop is not None:
            self.open_loop.set_rate(plan.load)

    def on_stop(self) -> None:
        self.book.finish(time.time())

    def summary(self, s: dict[str, Any]) -> None:
        s["stages"] = self.book.summary(time.time())
