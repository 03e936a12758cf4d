"""The stages profile: ``--llm-stages 50:60s,100:60s`` or ``--llm-steps 50:2000:50:60s`` (and the
steady-state rule ``--llm-settle``): the run as a sequence of load levels, users in closed loop
and requests/s in open loop (``--llm-arrival`` given).

Where the records merge (master or local runner) it sets a
:class:`~llm_users.load.stages.StageShape` on the run and keeps a
:class:`~llm_users.load.stages.StageBook` (the ``stages`` block); at the stop it writes
``stages.csv`` and ``pareto.csv``. The last stage's window ends at its planned end and the load
stays on for its tail until its measured requests came back (``stages.tail_s``); a run stopped
before that (``-t``, Ctrl-C) notes that the last stage's rates undercount.
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
    repeat: int = 1  # --llm-repeat K: every point measured K times (load/repeats.py; a sweep's too)
    users: int | None = None  # -u: a plain closed-loop run repeated K times becomes K stages of it


def repeated(plan: tuple[StagePlan, ...], k: int) -> list[StagePlan]:
    """Each stage K times in a row (``--llm-repeat K``), each repeat a stage of its own."""
    return [p for p in plan for _ in range(k)]


def plain_plan(load: float, run_time_s: float, k: int) -> tuple[StagePlan, ...]:
    """A plain run repeated K times: K equal stages of its load within ``-t``, less a reserve for
    the last repeat's tail (10% of -t, 2 to 30 s)."""
    reserve = min(max(2.0, 0.1 * run_time_s), 30.0)
    return (StagePlan(load, max(run_time_s - reserve, 1.0) / k),)


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
        opt("--llm-repeat", "measure every point (the run's load, each stage, each sweep point) K times: "
            "mean and Student-t 95%% interval per metric (default 1)")

    def parse(self, opts: Any) -> StagesConfig | None:
        stages_text, steps_text = given(opts, "llm_stages"), given(opts, "llm_steps")
        if stages_text and steps_text:
            raise ConfigError("give --llm-stages or --llm-steps, not both")
        plan = parse_stages(stages_text) if stages_text else parse_steps(steps_text) if steps_text else None
        settle = given(opts, "llm_settle")
        settle_s = parse_duration_s(settle, "--llm-settle") if settle else None
        repeat = parse_repeat(given(opts, "llm_repeat"))
        if not plan and settle_s is None and repeat == 1:
            return None
        users = given(opts, "num_users")
        return StagesConfig(tuple(plan) if plan else None, settle_s, repeat, int(users) if users else None)

    def attach(self, study: Study, config: StagesConfig | None) -> ProfileRun | None:
        if config is None or study.on_worker:  # the master's shape drives the workers
            return None
        if not config.plan:
            config = self._plain_repeats(study, config)
            if config is None:
                return None
        return StagesRun(study, config)

    def _plain_repeats(self, study: Study, config: StagesConfig) -> StagesConfig | None:
        """A plain run with --llm-repeat K (no stages, sweep or trace): K stages of its load."""
        parts = study.config
        if config.repeat < 2 or parts.part("sweep") is not None or parts.part("trace") is not None:
            return None
        loop = parts.part("open_loop")
        load = loop.rate if parts.open_loop and loop is not None else config.users
        run_time = study.run.config.run_time_s
        if not load or not run_time:
            raise ConfigError("--llm-repeat on a plain run needs -t (split among the repeats) and -u "
                              "(or --llm-rate)")
        return StagesConfig(plain_plan(float(load), run_time, config.repeat), config.settle_s, config.repeat)

    def describe(self, config: StagesConfig | None, study: StudyConfig) -> str | None:
        if config is None or not config.plan:
            return None
        text = describe_plan(config.plan, "req/s" if study.open_loop else "users", arrival_clause(study))
        return text + (f"; each measured {config.repeat} times" if config.repeat > 1 else "")

    def console_lines(self, summary: dict[str, Any]) -> list[str]:
        from llm_users.outputs.study_console import stages_lines

        return stages_lines(summary)  # (a sweep prints its points itself: sweep_lines)

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
        self.repeat = config.repeat
        plan = repeated(config.plan, config.repeat)
        self.last = len(plan) - 1
        self.ship_delay_s = 2.5 if study.on_master else 0.2  # how late records arrive
        self.book = StageBook(study.run.slos)
        study.run.collector.observers.append(self.book.add)
        self.shape = StageShape(plan, self.kind, self._on_stage, hold=self._hold)
        study.set_shape(self.shape)

    def _on_stage(self, index: int, plan: StagePlan) -> None:
        settle = settle_for(plan.duration_s, self.settle_s)
        # the last stage's window ends at its planned end; its tail brings its requests back
        measure = max(plan.duration_s - settle, 0.0) if index == self.last else None
        self.book.begin(self.kind, plan.load, time.time(), settle, measure)
        if self.open_loop is not None:
            self.open_loop.set_rate(plan.load)

    def _hold(self) -> bool:
        from llm_users.load.stages import tail_s

        st = self.book.stages[-1] if self.book.stages else None
        if st is None or st.measure_end is None:
            return False
        return time.time() < st.measure_end + tail_s(st, self.ship_delay_s)

    def on_stop(self) -> None:
        now = time.time()
        st = self.book.stages[-1] if self.book.stages else None
        if st is not None and not self.shape.done:
            if st.measure_end is None or now < st.measure_end:
                st.measure_end = now  # stopped inside the stage's window
            st.note = ("the run stopped before this stage's measured requests came back: "
                       "its rates undercount (let the plan end, or give -t longer than it)")
        self.book.finish(now)

    def summary(self, s: dict[str, Any]) -> None:
        now = time.time()
        if self.repeat > 1:
            s["stages"] = fold_repeats(self.book, self.repeat, now)
        else:
            s["stages"] = self.book.summary(now)
        flag_pooled_goodput(s)


def parse_repeat(text: Any) -> int:
    """``--llm-repeat K``: a whole number >= 1 (default 1)."""
    if text in (None, ""):
        return 1
    try:
        k = int(str(text))
    except ValueError:
        k = 0
    if k < 1:
        raise ConfigError(f"--llm-repeat must be a whole number >= 1 (times each point is measured), got {text!r}")
    return k


def fold_repeats(book: Any, k: int, now: float) -> list[dict[str, Any]]:
    """``stages[i]`` of a repeated plan: stage i's K repeats pooled (its keys), with ``ci`` and
    ``repeats`` (load/repeats.py); ``index`` is the plan's stage."""
    from llm_users.load.repeats import fold
    from llm_users.load.stages import pooled_summary, stage_summary

    out = []
    for i in range(0, len(book.stages), k):
        group = book.stages[i:i + k]
        entry = fold(pooled_summary(group, now), [stage_summary(st, now) for st in group])
        entry["index"] = i // k
        out.append(entry)
    return out


def flag_pooled_goodput(s: dict[str, Any]) -> None:
    """``overall.slo.pooled_over_loads``: the overall goodput of a study pools points at different
    loads; the console and report show it only labelled so (docs/studies.md, "Reading a study")."""
    slo = (s.get("overall") or {}).get("slo")
    if slo is not None:
        slo["pooled_over_loads"] = True
