"""One simulator for the whole tests/sim session (fixed timing, fixed seed), started as a real
child process with the launcher; tests talk to it over loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from llm_users.sim.launcher import SimProcess, start_simulator
from tests.sim.simsettings import SIM_ARGS


@pytest.fixture(scope="session")
def sim() -> Iterator[SimProcess]:
    with start_simulator(SIM_ARGS) as s:
        yield s
        errors = s.stderr_text()
    assert "Traceback" not in errors, f"the simulator logged errors:\n{errors}"


@pytest.fixture
def rid() -> str:
    return "t-" + uuid.uuid4().hex
