"""The prefix-cache reset between points: ``--llm-reset-cache on|off`` (default on).

Not a load of its own: where the run merges (master or local runner) and a study has points
(the stages' or the sweep's ``StageBook``: stages, steps, sweep points, repeats), it finds at
the test's start which reset route the server answers (:mod:`llm_users.load.cache_reset`) and
calls it in the background as each stage after the first begins. summary.json ``cache_reset``:
``{"method": "vllm /reset_prefix_cache" | "sglang /flush_cache" | null, "count", "failed",
"at_start"}``; one console line says which was used. It must come after the profiles that own
a stage book in the registry (it looks for their ``book``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.load.profile import LoadProfile, OptionAdder, ProfileRun, Study, StudyConfig, given

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CacheResetConfig:
    on: bool = True


class CacheResetProfile(LoadProfile):
    name = "cache_reset"

    def add_arguments(self, opt: OptionAdder) -> None:
        opt("--llm-reset-cache", "reset the server's prefix cache (vLLM POST /reset_prefix_cache, SGLang POST "
            "/flush_cache) at the start and before each stage, sweep point and repeat: on (default, where the "
            "server answers) or off")

    def parse(self, opts: Any) -> CacheResetConfig:
        v = str(given(opts, "llm_reset_cache") or "on").strip().lower()
        if v not in ("on", "off"):
            raise ConfigError(f"--llm-reset-cache must be on or off, got {v!r}")
        return CacheResetConfig(v == "on")

    def attach(self, study: Study, config: CacheResetConfig | None) -> ProfileRun | None:
        if study.on_worker:
            return None  # the master or local runner knows the stages
        return CacheResetRun(study, on=config is None or config.on)

    def console_lines(self, summary: dict[str, Any]) -> list[str]:
        from llm_users.load.cache_reset import console_line

        line = console_line(summary.get("cache_reset"))
        return [line] if line else []


class CacheResetRun(ProfileRun):
    """Detects the route at each test's start; resets as each later stage begins."""

    def __init__(self, study: Study, on: bool) -> None:
        self.study = study
        self.environment = study.environment
        self.on = on
        self.reset: Any = None
        self.books: list[Any] | None = None

    def on_test_start(self, fresh: StudyConfig | None) -> None:
        from llm_users.load.cache_reset import CacheReset
        from llm_users.load.stages import StageBook

        if self.books is None:  # every profile has attached by now
            self.books = [b for part in self.study.runs.values()
                          if isinstance(b := getattr(part, "book", None), StageBook)]
            for book in self.books:
                book.on_begin.append(self._boundary)
        host = self.environment.host
        if not self.on or not host or not self.books:
            return  # off, or a run without points: nothing to reset between
        self.reset = CacheReset(host)
        method = self.reset.detect()  # before the load: the start's reset
        if method:
            log.info("locust-llm: prefix cache reset by POST %s before each stage, point and repeat", self.reset.path)

    def _boundary(self, stage: Any) -> None:
        if stage.index == 0 or self.reset is None or self.reset.path is None:
            return
        import gevent

        gevent.spawn(self.reset.reset)  # the shape's tick goes on; a failure is one warning line

    def summary(self, s: dict[str, Any]) -> None:
        if not self.books:
            return
        if not self.on:
            s["cache_reset"] = {"method": None, "off": True, "count": 0}
        elif self.reset is not None:
            s["cache_reset"] = self.reset.summary()
