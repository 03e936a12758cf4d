"""Fixtures of the real-server tier: llama.cpp's server and the LiteLLM proxy, started once per
session on free 127.0.0.1 ports (tests/real/servers.py), stopped by PID at the end. A server
that cannot be installed or started fails the tests that need it: never a skip."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real.servers import ServerProcess, start_litellm, start_llama, start_llama_embeddings

#: slots of the shared llama.cpp server (and so how many streams it batches) and context per slot
SLOTS = 4
CTX_PER_SLOT = 1024


def _keep_logs_on_failure(request: pytest.FixtureRequest, server: ServerProcess) -> None:
    """Copy a server's log next to the test session's output when any test failed."""
    if request.session.testsfailed:
        keep = Path(request.config.rootpath) / "tests-real-logs"
        keep.mkdir(exist_ok=True)
        shutil.copy(server.log, keep / server.log.name)
        print(f"\n{server.name} log kept: {keep / server.log.name}")


@pytest.fixture(scope="session")
def real_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-servers")


@pytest.fixture(scope="session")
def llama(request: pytest.FixtureRequest, real_logs: Path) -> Iterator[ServerProcess]:
    server = start_llama(real_logs, slots=SLOTS, ctx_per_slot=CTX_PER_SLOT)
    yield server
    server.stop()
    _keep_logs_on_failure(request, server)


@pytest.fixture(scope="session")
def llama_embeddings(request: pytest.FixtureRequest, real_logs: Path) -> Iterator[ServerProcess]:
    """llama.cpp's server in embedding mode (tests/real/test_llamacpp_embeddings.py)."""
    server = start_llama_embeddings(real_logs)
    yield server
    server.stop()
    _keep_logs_on_failure(request, server)


@pytest.fixture(scope="session")
def litellm(request: pytest.FixtureRequest, llama: ServerProcess, real_logs: Path) -> Iterator[ServerProcess]:
    server = start_litellm(llama.url, real_logs)
    yield server
    server.stop()
    _keep_logs_on_failure(request, server)
