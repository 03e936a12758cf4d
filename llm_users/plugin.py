"""Wires locust-llm into Locust: options, the ``llm_response`` event, the auto-started
simulator, the API-key check, the statistics and the outputs at test stop.

Call :func:`register` once from a locustfile (the shipped ones do)::

    from locust import events
    from llm_users import plugin
    plugin.register(events)
"""

from __future__ import annotations

import logging
import shlex
import sys
from typing import Any

from locust.runners import MasterRunner, WorkerRunner

from . import events as llm_events
from . import options as llm_options
from .console import summary_table
from .errors import ConfigError
from .metrics import RequestRecord, StatsByName
from .report import SCHEMA, RecordWriter, redact_config, write_summary

log = logging.getLogger(__name__)
_registered: set[int] = set()


class LLMRun:
    """State of one Locust process's run: statistics, the record file, the simulator."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.stats = StatsByName()
        self.writer: RecordWriter | None = None
        self.simulator: Any = None
        self.report_dir: str | None = getattr(environment.parsed_options, "llm_report", None)
        self.records = 0

    def on_record(self, record: RequestRecord, **_: Any) -> None:
        self.records += 1
        self.stats.add(record)
        if self.writer is not None:
            self.writer.write(record)

    def summary(self) -> dict[str, Any]:
        s = self.stats.summary()
        s["schema"] = SCHEMA
        s["host"] = self.environment.host
        s["simulator"] = self.simulator is not None
        s["config"] = redact_config(self.environment.parsed_options)
        return s

    def finish(self) -> dict[str, Any]:
        summary = self.summary()
        print(summary_table(summary), flush=True)
        if self.report_dir:
            jpath, _ = write_summary(self.report_dir, summary)
            print(f"locust-llm: report written to {jpath.parent}/", flush=True)
        return summary

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.simulator is not None:
            self.simulator.stop()
            self.simulator = None


def register(events: Any = None) -> None:
    """Add the ``--llm-*`` options, the ``llm_response`` event and the run listeners (once)."""
    if events is None:
        from locust import events as default_events

        events = default_events
    if id(events) in _registered:
        return
    _registered.add(id(events))
    llm_events.install(events)
    events.init_command_line_parser.add_listener(llm_options.add_arguments)
    events.init.add_listener(_on_init)


def _fail(message: str) -> None:
    """Stop at start with one clear line (Locust would only log an exception)."""
    print(f"locust-llm: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    llm_events.install(environment.events)
    run = LLMRun(environment)
    environment.llm_run = run
    user_classes = list(environment.user_classes or [])
    try:
        _check_settings(environment, user_classes)
    except ConfigError as e:
        _fail(str(e))
    distributed = isinstance(runner, MasterRunner | WorkerRunner)
    if not environment.host and not all(getattr(u, "host", None) for u in user_classes):
        if distributed:
            _fail("distributed mode needs a server: give --host (the auto-started simulator is for "
                  "single-process runs; start one with `llm-sim --host 0.0.0.0 --port 8000`)")
        _start_simulator(environment, run)
    if run.report_dir and not isinstance(runner, MasterRunner):
        run.writer = RecordWriter(run.report_dir)
    environment.events.llm_response.add_listener(run.on_record)
    if not isinstance(runner, WorkerRunner):
        environment.events.test_stop.add_listener(lambda **kw: run.finish())
    environment.events.quitting.add_listener(lambda **kw: run.close())


def _check_settings(environment: Any, user_classes: list[Any]) -> None:
    """Settings and API keys are checked before any user starts."""
    from .users import LLMUser, _prompts

    for cls in user_classes:
        if not (isinstance(cls, type) and issubclass(cls, LLMUser)):
            continue
        settings = llm_options.settings_for(cls, environment.parsed_options)
        _prompts(settings.prompts)  # a malformed prompts file fails here, at start
        if settings.client == "sdk":
            from .sdk import check_sdk_available

            check_sdk_available(cls)
        if cls.requires_api_key and not settings.api_key():
            raise ConfigError(
                f"{cls.__name__} needs an API key in the environment variable {settings.api_key_names()} "
                f"(set it, or name another variable with --llm-api-key-env)"
            )


def _start_simulator(environment: Any, run: LLMRun) -> None:
    from .sim.launcher import start_simulator

    extra = getattr(environment.parsed_options, "llm_sim_args", None) or ""
    try:
        sim = start_simulator(shlex.split(extra))
    except RuntimeError as e:
        _fail(f"could not start the embedded simulator: {e}")
    run.simulator = sim
    environment.host = sim.url
    print(f"locust-llm: no --host given: started the embedded simulator (llm-sim {extra}) at {sim.url}".replace(
        "(llm-sim )", "(llm-sim)"), flush=True)
