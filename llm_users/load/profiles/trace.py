"""The trace replay profile: ``--llm-trace FILE`` (Mooncake JSONL, BurstGPT CSV, Azure LLM
inference CSV or today's JSONL: ``--llm-trace-format``, by default detected) replayed on its own
schedule, ``--llm-trace-window START:END`` of it, ``--llm-trace-speedup`` times faster.

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
    format: str = "auto"
    window: tuple[float, float] | None = None
    tokenizer: str | None = None  # --llm-tokenizer: prompts fitted by a local tokenizer.json


class Trace(LoadProfile):
    name = "trace"

    def add_arguments(self, opt: OptionAdder) -> None:
        opt("--llm-trace", "replay a trace (Mooncake JSONL, BurstGPT CSV, Azure LLM inference CSV) on its schedule")
        opt("--llm-trace-format", "trace replay: mooncake, burstgpt, azure or jsonl (default: from the extension "
            "and header)")
        opt("--llm-trace-window", "trace replay: only START:END seconds of the trace (from its first request)")
        opt("--llm-trace-speedup", "trace replay: play the trace this many times faster (default 1)")

    def parse(self, opts: Any) -> TraceConfig | None:
        from llm_users.load.trace_formats import FORMATS, parse_window

        path = given(opts, "llm_trace")
        speedup = number(opts, "llm_trace_speedup", "--llm-trace-speedup", 1.0, 1e-6)
        fmt = str(given(opts, "llm_trace_format") or "auto").strip().lower()
        if fmt not in (*FORMATS, "auto"):
            raise ConfigError(f"--llm-trace-format must be one of {', '.join(FORMATS)} (or auto), got {fmt!r}")
        try:
            window = parse_window(given(opts, "llm_trace_window"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        tokenizer = given(opts, "llm_tokenizer")
        if path and str(given(opts, "llm_images") or "0").strip() not in ("0", ""):  # not dropped silently
            raise ConfigError("--llm-images: --llm-trace builds its own prompts, text only; drop one of them")
        return TraceConfig(str(path), speedup, fmt, window, str(tokenizer) if tokenizer else None) if path else None

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
        window = f", seconds {config.window[0]:g} to {config.window[1]:g} of it" if config.window else ""
        return f"trace replay of {config.path}{window}" + (f", {config.speedup:g}x faster" if config.speedup != 1 else "")

    def attach(self, study: Study, config: TraceConfig | None) -> None:
        from llm_users.load.trace_replay import TraceSource, load_trace, read_trace

        engine = study.get(OpenLoop)
        if study.on_worker and engine is not None:
            def from_share(data: dict[str, Any], scheduler: Any) -> None:
                if data.get("trace") and scheduler.source is None:
                    w = data.get("trace_window")
                    window = (float(w[0]), float("inf") if w[1] is None else float(w[1])) if w else None
                    rows = load_trace(data["trace"], data.get("trace_format", "auto"), window)
                    scheduler.source = TraceSource(rows, float(data.get("trace_speedup", 1)),
                                                   data.get("trace_tokenizer"))

            engine.share_hooks.append(from_share)
        if config is None:
            return None
        # a bad trace fails at start (on every node given one)
        fmt, rows, skipped = read_trace(config.path, config.format, config.window)
        if not study.on_worker and engine is not None:
            window = [config.window[0], None if config.window[1] == float("inf") else config.window[1]] \
                if config.window else None  # JSON has no infinity
            engine.replay(TraceSource(rows, config.speedup, config.tokenizer),
                          share={"trace": config.path, "trace_speedup": config.speedup, "trace_format": fmt,
                                 "trace_window": window, "trace_tokenizer": config.tokenizer},
                          target={"rate": None, "trace": config.path, "trace_speedup": config.speedup,
                                  "trace_requests": len(rows), "trace_format": fmt, "trace_window": window,
                                  "trace_skipped": skipped})
        return None
