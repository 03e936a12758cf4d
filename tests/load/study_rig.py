"""What a load profile is handed when it attaches, built for the unit tests of load/profile.py,
load/wiring.py and load/profiles/: a real Locust Environment, a run of a given role (its
Collector, configuration and hooks) and a runner that keeps the messages it is given."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace
from typing import Any

from locust.env import Environment

from llm_users.distributed import Collector
from llm_users.load.profile import Study
from llm_users.load.registry import parse_options
from llm_users.options import RunConfig

#: role -> (merges, generates_load), as llm_users/run.py's classes say
ROLES = {"local": (True, True), "master": (True, False), "worker": (False, True)}


class Runner:
    """The messages a profile registers and sends (a master's or a worker's runner)."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.sent: list[tuple[str, Any]] = []

    def register_message(self, name: str, handler: Any) -> None:
        self.handlers[name] = handler

    def send_message(self, name: str, data: Any = None, client_id: Any = None) -> None:
        self.sent.append((name, data))


def run_of(role: str, slos: dict[str, float] | None = None, run_time: float | None = None) -> SimpleNamespace:
    merges, generates_load = ROLES[role]
    return SimpleNamespace(merges=merges, generates_load=generates_load, summary_hooks=[], stop_hooks=[],
                           collector=Collector(slos), slos=dict(slos or {}), test_start=None,
                           config=RunConfig.from_options(Namespace(run_time=run_time)))


def study_of(role: str, slos: dict[str, float] | None = None, run_time: float | None = None,
             user_classes: list[type] | None = None, **options: Any) -> Study:
    """A Study of this role with the profiles' options parsed (``llm_rate="5"``...), not yet attached."""
    env = Environment(user_classes=list(user_classes or []))
    env.runner = Runner()
    return Study(env, run_of(role, slos, run_time), parse_options(Namespace(**options)), lambda: [])
