"""Shared fixtures: real simulator processes on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.sim.launcher import SimProcess, start_simulator
from tests.helpers import get_json

#: ``make test`` runs the suite in parallel shards, then the ``serial`` tests alone (tests/sharding.py).
pytest_plugins = ["tests.sharding"]


#: What the product sets for its whole process (module, attribute), as a run's roles do: a master's
#: folding distributions and patient heartbeat, a worker's cached spawn defaults, the console's
#: table printer, the refusal hook, the bounds, the spill. A shard runs whichever files it claims one
#: after another, so each file and each test gets them back as they were before it (ci13: test_run.py's
#: master left folding on for test_distribution.py; ci14: a master's liveness and a worker's cache
#: left for test_locust_costs.py).
PROCESS_STATE = (
    ("llm_users.metrics.distribution", "_folding"),
    ("llm_users.metrics.seconds", "_shared"),
    ("llm_users.protocols.limits", "CURRENT"),
    ("llm_users.health.console_table", "_locust_print_stats"),
    ("locust.stats", "print_stats"),
    ("llm_users.health.refusal", "_previous_hook"),
    ("sys", "excepthook"),
    ("locust.runners", "HEARTBEAT_LIVENESS"),
    ("locust.argument_parser", "default_args_dict"),
    ("llm_users.health.lagtrace", "_current"),
)
_UNSET = object()


def _process_state() -> dict[tuple[str, str], Any]:
    """Each of PROCESS_STATE's values, where its module is imported (nothing is imported here)."""
    return {(m, a): getattr(sys.modules[m], a, _UNSET) for m, a in PROCESS_STATE if m in sys.modules}


def _restore(before: dict[tuple[str, str], Any]) -> None:
    trace = sys.modules.get("llm_users.health.lagtrace")
    if trace is not None and trace._current is not None and before.get(("llm_users.health.lagtrace", "_current")) is None:
        trace.uninstall()  # a lag trace left installed: its gc callback and greenlet tracer go with it
    for (m, a), value in before.items():
        if value is not _UNSET and getattr(sys.modules[m], a, _UNSET) is not value:
            setattr(sys.modules[m], a, value)


@pytest.fixture(autouse=True, scope="module")
def _process_state_restored_per_file() -> Iterator[None]:
    before = _process_state()
    yield
    _restore(before)


@pytest.fixture(autouse=True)
def _process_state_restored() -> Iterator[None]:
    before = _process_state()
    yield
    _restore(before)


@pytest.fixture
def sim_factory() -> Iterator[Any]:
    """Start simulators with the given llm-sim arguments; all are stopped at the end."""
    started: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        sim = start_simulator([str(a) for a in args])
        started.append(sim)
        return sim

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def shared_sim() -> Iterator[Any]:
    """One simulator per argument list for a module's runs that go one after another (serial
    ones: what a run reads of the simulator's state is its own), its trace emptied for each run;
    stopped at the module's end."""
    sims: dict[tuple[str, ...], SimProcess] = {}

    def get(*args: str) -> SimProcess:
        if args not in sims:
            sims[args] = start_simulator(list(args))
        get_json(sims[args].url + "/_sim/trace", method="DELETE")
        return sims[args]

    yield get
    for s in sims.values():
        s.stop()
