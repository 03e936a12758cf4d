"""The load profiles, in one explicit ordered list (never import order), and what is done
with all of them: their options, parsing them into one frozen :class:`StudyConfig`, and their
console lines, report sections and files (from the final summary).

The order is the order of the options in ``--help``, of the checks, of the attaching (the
open-loop engine first: the others drive it), of the summary blocks and of the outputs.

A profile of your own is one module with a :class:`~llm_users.load.profile.LoadProfile`;
register it from the locustfile, before Locust reads the command line::

    from llm_users.load import registry
    registry.register(MyProfile)   # or MyProfile(); a second call is a no-op
"""

from __future__ import annotations

from typing import Any

from llm_users.load.profile import LoadProfile, OptionAdder, StudyConfig
from llm_users.load.profiles.cache_reset import CacheResetProfile
from llm_users.load.profiles.open_loop import OpenLoop
from llm_users.load.profiles.stages import Stages
from llm_users.load.profiles.sweep import Sweep
from llm_users.load.profiles.trace import Trace

PROFILES: list[LoadProfile] = [OpenLoop(), Stages(), Sweep(), Trace(), CacheResetProfile()]


def register(profile: LoadProfile | type[LoadProfile], *, before: str | None = None) -> LoadProfile:
    """Add a profile (an instance, or its class: made with no arguments) at the end of the list,
    or before the one named ``before``. A profile of a class already listed is not added again."""
    p = profile() if isinstance(profile, type) else profile
    if not p.name:
        raise ValueError(f"{type(p).__name__}: a load profile needs a name")
    for known in PROFILES:
        if type(known) is type(p):
            return known
        if known.name == p.name:
            raise ValueError(f"a load profile called {p.name!r} is registered already ({type(known).__name__})")
    names = [k.name for k in PROFILES]
    PROFILES.insert(names.index(before) if before in names else len(PROFILES), p)
    return p


def profiles() -> list[LoadProfile]:
    """The profiles, in order."""
    return list(PROFILES)


def add_arguments(parser: Any) -> None:
    """Every profile's options (``init_command_line_parser``); each also LOCUST_LLM_* in the env."""
    g = parser.add_argument_group("locust-llm studies", "open-loop arrivals, stages, SLO sweeps, trace replay")

    def opt(name: str, help: str, web_ui: bool = False, **kw: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        # web_ui: read again as each test starts; the start form's LLM group (webui/form.py) lists it
        action = g.add_argument(name, env_var=env, default=kw.pop("default", None), help=help, **kw)
        action.llm_per_test = web_ui

    adder: OptionAdder = opt
    for p in profiles():
        p.add_arguments(adder)


def parse_options(opts: Any) -> StudyConfig:
    """Every profile's options read and checked (ConfigError: one line naming the option); what
    depends on the run's role is checked when the profiles attach."""
    found = profiles()
    parts = tuple((p.name, p.parse(opts)) for p in found)
    study = StudyConfig(parts, open_loop=any(p.open_loop(cfg) for p, (_, cfg) in zip(found, parts, strict=True)))
    for p in found:
        p.check(study)
    return study


def describe(study: StudyConfig) -> dict[str, str]:
    """The load plan in words: profile name -> its clause, for each profile asked for, in order
    (empty: a plain closed-loop run, Locust's users)."""
    out = {}
    for p in profiles():
        text = p.describe(study.part(p.name), study)
        if text:
            out[p.name] = text
    return out


def console_lines(summary: dict[str, Any]) -> list[str]:
    """The profiles' lines under the LLM summary table."""
    return [line for p in profiles() for line in p.console_lines(summary)]


def report_sections(summary: dict[str, Any]) -> list[str]:
    """The profiles' parts of report.html."""
    return [part for p in profiles() for part in p.report_sections(summary)]


def files(summary: dict[str, Any]) -> dict[str, str]:
    """The profiles' files (name -> text), written beside summary.json at the stop."""
    out: dict[str, str] = {}
    for p in profiles():
        out.update(p.files(summary))
    return out
