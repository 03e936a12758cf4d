"""Shared fixtures: real simulator processes on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.sim.launcher import SimProcess, start_simulator

#: ``make test`` runs the suite in parallel shards, then the ``serial`` tests alone (tests/sharding.py).
pytest_plugins = ["tests.sharding"]


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
