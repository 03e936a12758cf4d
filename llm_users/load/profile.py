"""What a load profile is: the small protocol every profile implements, the frozen study
configuration that :func:`~llm_users.load.registry.parse_options` builds from the options, and
:class:`Study`, what a profile is handed when it attaches to a run.

A profile (:class:`LoadProfile`) says, in one module:

- its options (``add_arguments``; they go in the "locust-llm studies" group, each also
  ``LOCUST_LLM_*`` in the environment),
- how to read them (``parse``: its own frozen config, None when it was not asked for), and
  what they exclude (``check``, against the other profiles' parsed configs);
- whether it sends on a schedule (``open_loop``: arrivals instead of Locust users);
- how it attaches to the run (``attach``: validation for the run's role, then the wiring; it
  returns its :class:`ProfileRun`, the part that lives as long as the run);
- what it reports, read from the final summary only: ``console_lines``, ``report_sections``
  and ``files`` (name -> text, written beside summary.json at the stop);
- its load plan in words (``describe``: one clause for the report's header and summary.json's
  ``setup.load_plan``, None when it was not asked for).

Its :class:`ProfileRun` adds its summary block and hears the test start, stopping and stop.
Nothing here imports Locust or gevent: the configuration side is read without the machinery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError

#: the option adder handed to ``add_arguments``: ``opt(name, help, web_ui=False, **argparse_kw)``
OptionAdder = Callable[..., None]
# the name the open-loop messages have always been logged under
log = logging.getLogger("llm_users.load.study")


def given(opts: Any, name: str) -> Any:
    """An option's value, or None when it is absent or blank."""
    v = getattr(opts, name, None)
    return None if v is None or (isinstance(v, str) and v.strip() == "") else v


def number(opts: Any, name: str, option: str, default: float, low: float, high: float = float("inf")) -> float:
    """A number option within [low, high] (ConfigError naming ``option`` otherwise)."""
    v = given(opts, name)
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
class StudyConfig:
    """Every profile's parsed options, in the registry's order (None: the profile was not asked for)."""

    parts: tuple[tuple[str, Any], ...] = ()
    #: some profile sends on a schedule (open-loop arrivals; Locust's users then idle)
    open_loop: bool = False

    def part(self, name: str) -> Any:
        """The parsed config of the profile called ``name`` (None when absent)."""
        return next((cfg for n, cfg in self.parts if n == name), None)


class ProfileRun:
    """A profile's part in one run (returned by :meth:`LoadProfile.attach`); every hook is optional."""

    def on_test_start(self, fresh: StudyConfig | None) -> None:
        """A test starts: ``fresh`` is the configuration read again now (a worker's options are
        the master's by then, the web UI's form may have set fields), None when it did not read."""

    def on_test_stopping(self) -> None:
        """The test is stopping: nothing new may start."""

    def on_stop(self) -> None:
        """The test stopped, before this node's last data is shipped or merged."""

    def summary(self, s: dict[str, Any]) -> None:
        """Add this profile's block to the summary (master or local runner; may be live)."""


class LoadProfile:
    """A load profile (see the module docstring); the defaults do nothing."""

    #: the profile's name: its key in :class:`StudyConfig`
    name: str = ""

    def add_arguments(self, opt: OptionAdder) -> None:
        """Add the profile's options with ``opt(name, help, web_ui=False, **kw)``."""

    def parse(self, opts: Any) -> Any:
        """The profile's frozen config from the options (ConfigError naming the option), None
        when it was not asked for."""
        return None

    def check(self, study: StudyConfig) -> None:
        """Options that exclude each other, against every profile's parsed config."""

    def open_loop(self, config: Any) -> bool:
        """True when this config sends on a schedule (open-loop arrivals)."""
        return False

    def attach(self, study: Study, config: Any) -> ProfileRun | None:
        """Check the config for the run's role and wire the profile into the run; None when it
        has nothing to do on this node."""
        return None

    def describe(self, config: Any, study: StudyConfig) -> str | None:
        """The load plan this config asks for, in one clause (e.g. ``20 req/s, poisson
        arrivals``); None when the profile was not asked for. ``study``: every profile's config."""
        return None

    def console_lines(self, summary: dict[str, Any]) -> list[str]:
        """Lines printed under the LLM summary table."""
        return []

    def report_sections(self, summary: dict[str, Any]) -> list[str]:
        """HTML parts of report.html (matplotlib may be imported here)."""
        return []

    def files(self, summary: dict[str, Any]) -> dict[str, str]:
        """Files written beside summary.json at the stop: name -> text."""
        return {}


class Study:
    """One node's load profiles in a run: what each profile's ``attach`` gets (the environment,
    the run and its role, the configuration, the others' parts), and one listener per event
    that calls the profiles' runs in the registry's order."""

    def __init__(self, environment: Any, run: Any, config: StudyConfig,
                 user_classes: Callable[[], list[type]], fresh: Callable[[], StudyConfig] | None = None) -> None:
        """``user_classes``: the LLM User classes an open-loop scheduler sends through;
        ``fresh``: reads the configuration again at each test start (None: it stays)."""
        self.environment = environment
        self.run = run
        self.config = config
        self.user_classes = user_classes
        self._fresh = fresh
        # the run's role (llm_users/run.py), never a mode string
        self.on_worker = not run.merges
        self.on_master = run.merges and not run.generates_load
        self.shape: Any = None
        self.runs: dict[type, ProfileRun] = {}

    def attach(self, profiles: list[LoadProfile]) -> Study:
        """Attach each profile in order, then hook their runs into the run's events."""
        for profile in profiles:
            part = profile.attach(self, self.config.part(profile.name))
            if part is not None:
                self.runs[type(profile)] = part
        ev = self.environment.events
        if not self.on_worker:
            self.run.summary_hooks.append(self._summary)
        ev.test_start.add_listener(self._on_test_start)
        ev.test_stopping.add_listener(self._on_test_stopping)
        self.run.stop_hooks.append(self._on_stop)
        return self

    def get(self, profile: type[LoadProfile]) -> Any:
        """The run part of an attached profile (by its class), None when it is not attached."""
        return self.runs.get(profile)

    def set_shape(self, shape: Any) -> None:
        """Give the run a ``LoadTestShape`` (Locust reads it when the test starts; one per run)."""
        self.shape = shape
        self.environment.shape_class = shape
        shape.runner = self.environment.runner

    # the events, fanned out ---------------------------------------------------------------------
    def _on_test_start(self, **_: Any) -> None:
        fresh: StudyConfig | None = self.config
        if self._fresh is not None:
            try:
                fresh = self._fresh()
            except ConfigError as e:  # the web form's fields (the command line's were checked at start)
                log.error("locust-llm: %s; the open-loop settings stay as they were", e)
                fresh = None
        for part in list(self.runs.values()):
            part.on_test_start(fresh)

    def _on_test_stopping(self, **_: Any) -> None:
        for part in list(self.runs.values()):
            part.on_test_stopping()

    def _on_stop(self) -> None:
        for part in list(self.runs.values()):
            part.on_stop()

    def _summary(self, s: dict[str, Any]) -> None:
        for part in list(self.runs.values()):
            part.summary(s)
        collector = getattr(self.run, "collector", None)
        if collector is not None:  # each point's server_metrics and the knee's explanation
            from llm_users.load.explain import annotate

            annotate(s, collector.timeline.extra)
