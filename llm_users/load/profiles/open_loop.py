"""The open-loop profile: ``--llm-rate R`` requests/s for the whole run (``--llm-arrival``,
``--llm-seed``, ``--llm-max-inflight``), sent on a schedule whether or not earlier requests
have answered; Locust's users then idle.

Its run part (:mod:`.open_loop_run`) is the node's arrival engine: the master's (or local
runner's) rate controller, each load-generating process's scheduler, and the book of schedule
figures. It attaches on every node (a worker switches to open loop on its first share from the
master), and the stages, sweep and trace profiles drive it (a stage's rate, a sweep point's
rate, a trace's own schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.load.arrivals import parse_arrival
from llm_users.load.plans import parse_cap, parse_rate
from llm_users.load.profile import LoadProfile, OptionAdder, ProfileRun, Study, StudyConfig, given


@dataclass(frozen=True, slots=True)
class OpenLoopConfig:
    rate: float | None = None  # requests/s for the whole run
    cap: int | None = None  # at most this many in flight
    arrival: str | None = None  # the law as given (arrivals.parse_arrival reads it)
    seed: int | None = None


def arrival_clause(study: StudyConfig) -> str:
    """How open-loop arrivals come, for a load plan's words: ``poisson arrivals (seed 3), at
    most 4 in flight``; empty in closed loop."""
    cfg = study.part("open_loop")
    if not study.open_loop or cfg is None:
        return ""
    text = f"{cfg.arrival or 'poisson'} arrivals"
    if cfg.seed is not None:
        text += f" (seed {cfg.seed})"
    if cfg.cap is not None:
        text += f", at most {cfg.cap} in flight"
    return text


class OpenLoop(LoadProfile):
    name = "open_loop"

    def add_arguments(self, opt: OptionAdder) -> None:
        opt("--llm-rate", "open loop: requests/s for the whole run, split over workers (users then idle)", web_ui=True)
        opt("--llm-arrival", "open loop: constant | poisson (default) | gamma:K (K = burstiness, vLLM bench's)",
            web_ui=True)
        opt("--llm-seed", "seed of the arrival schedule (same seed, same schedule; default random, written in summary)",
            web_ui=True)
        opt("--llm-max-inflight", "open loop: at most N requests in flight over the run; later arrivals wait "
            "(measured)", web_ui=True)

    def parse(self, opts: Any) -> OpenLoopConfig:
        """Always a config (the engine attaches on every node), its fields None when not given."""
        rate = parse_rate(given(opts, "llm_rate"))
        cap = parse_cap(given(opts, "llm_max_inflight"))
        arrival = given(opts, "llm_arrival")
        seed = given(opts, "llm_seed")
        try:
            seed_n = None if seed is None else int(seed)
        except ValueError:
            raise ConfigError(f"--llm-seed must be a whole number, got {seed!r}") from None
        if arrival:
            parse_arrival(arrival)  # bad input fails at start
        return OpenLoopConfig(rate, cap, arrival, seed_n)

    def open_loop(self, config: OpenLoopConfig | None) -> bool:
        return config is not None and (config.rate is not None or bool(config.arrival))

    def check(self, study: StudyConfig) -> None:
        cfg = study.part(self.name)
        if cfg is None:
            return
        stages = study.part("stages")
        shaped = bool(stages and stages.plan) or study.part("sweep") is not None
        if cfg.rate is not None and shaped:
            raise ConfigError("--llm-rate is one load point: with stages or a sweep the stages give the rate "
                              "(use --llm-arrival to make them rates)")
        if cfg.cap is not None and not study.open_loop:
            raise ConfigError("--llm-max-inflight is for open loop: give --llm-rate (or --llm-arrival with stages)")

    def attach(self, study: Study, config: OpenLoopConfig | None) -> ProfileRun:
        from llm_users.load.profiles.open_loop_run import OpenLoopRun

        return OpenLoopRun(study, config or OpenLoopConfig(), self.name)

    def describe(self, config: OpenLoopConfig | None, study: StudyConfig) -> str | None:
        if config is None or config.rate is None:
            return None  # the stages, a sweep or a trace give the rate (and say the arrivals)
        return f"open loop: {config.rate:g} req/s, {arrival_clause(study)}"

    def console_lines(self, summary: dict[str, Any]) -> list[str]:
        from llm_users.outputs.study_console import arrivals_lines

        return arrivals_lines(summary)

    def report_sections(self, summary: dict[str, Any]) -> list[str]:
        from llm_users.outputs.study_report import arrivals_section

        return arrivals_section(summary)
