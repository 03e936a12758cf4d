"""Shared fixtures: real simulator processes on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.sim.launcher import SimProcess, start_simulator
from tests.helpers import get_json

#: ``make test`` runs the suite in parallel shards, then the ``serial`` tests alone (tests/sharding.py).
pytest_plugins = ["tests.sharding"]


@pytest.fixture(autouse=True)
def _process_state_restored() -> Iterator[None]:
    """What a test may set for its whole process, as it was before it: a shard runs whichever
    files it claims one after another, so no test may see another's. A master's run makes the
    process's distributions fold (``fold_in_this_process``): tests/test_run.py's left it on for
    tests/metrics/test_distribution.py in ci13."""
    from llm_users.metrics import distribution

    folding = distribution._folding
    yield
    distribution._folding = folding


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
