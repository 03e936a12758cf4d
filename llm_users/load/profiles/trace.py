"""The trace replay profile: ``--llm-trace FILE`` (JSONL: timestamp ms, input_length,
output_length[, hash_ids]) replayed on its own schedule, ``--llm-trace-speedup`` times faster.

It drives the open-loop engine: the master or local runner reads the trace at start and has
every share carry the file and speed-up; a worker reads the file its first share names (the
trace's rows are split over the workers by index).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.load.profile import LoadProfile, OptionAdder, Study, StudyConfig, given, number
from llm_users.load.profiles.open_loop import OpenLoop


@dataclass(frozen=True, slots=True)
class TraceConfig:
    path: str
    speedup: float = 1.0


class Trace(LoadProfile):
    name = "trace"

    def add_arguments(self, opt: OptionAdder) -> None:
        opt("--llm-trace", "replay a JSONL trace (timestamp ms, input_length, output_length[, hash_ids]) on schedule")
        opt("--llm-trace-speedup", "trace replay: play the trace this many times faster (default 1)")

    def parse(self, opts: Any) -> TraceConfig | None:
        path = given(opts, "llm_trace")
        speedup = number(opts, "llm_trace_speedup", "--llm-trace-speedup", 1.0, 1e-6)
        return TraceConfig(str(path), speedup) if path else None

    def open_loop(self, config: TraceConfig | None) -> bool:
        return config is not None

    def check(self, study: StudyConfig) -> None:
        if study.part(self.name) is None:
            return
        stages, loop = study.part("stages"), study.part("open_loop")
        if (stages is not None and stages.plan) or study.part("sweep") is not None or \
                (loop is not None and loop.rate is not None):
            raise ConfigError("--llm-trace gives its own schedule: drop --llm-rate/--llm-stages/--llm-steps/--llm-sweep")

    def describe(self, config: TraceConfig | None, study: StudyConfig) -> str | None:
        if config is None:
            return None
        return f"trace replay of {config.path}" + (f", {config.speedup:g}x faster" if config.speedup != 1 else "")

    def attach(self, study: Study, config: TraceConfig | None) -> None:
        from llm_users.load.trace_replay import TraceSource, load_trace

        engine = study.get(OpenLoop)
        if study.on_worker and engine is not None:
            def from_share(data: dict[str, Any], scheduler: Any) -> None:
                if data.get("trace") and scheduler.source is None:
                    scheduler.source = TraceSource(load_trace(data["trace"]), float(data.get("trace_speedup", 1)))

            engine.share_hooks.append(from_share)
        if config is None:
            return None
        rows = load_trace(config.path)  # a bad trace fails at start (on every node given one)
        if not study.on_worker and engine is not None:
            engine.replay(TraceSource(rows, config.speedup),
                          share={"trace": config.path, "trace_speedup": config.speedup},
                          target={"rate": None, "trace": config.path, "trace_speedup": config.speedup,
                                  "trace_requests": len(rows)})
        return None
