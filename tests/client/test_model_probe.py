"""client/model_probe.py: which model an OpenAI-compatible server serves, asked once per host
(GET /v1/models) and kept for the run; a server that cannot say gets 'default' and one error line."""

from __future__ import annotations

import logging

import pytest

from llm_users.client import model_probe
from llm_users.client.model_probe import discover_model, discovered_models
from llm_users.client.stream import StreamClient
from tests.helpers import free_port


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing discovered (the probe keeps what it learns for the process)."""
    monkeypatch.setattr(model_probe, "_discovered", {})


def test_the_served_model_is_asked_once_per_host(sim_factory) -> None:
    sim = sim_factory("--model", "probe-model")
    assert discover_model(StreamClient(sim.url), "vllm") == "probe-model"
    assert discovered_models() == {sim.url: "probe-model"}
    sim.stop()
    assert discover_model(StreamClient(sim.url), "vllm") == "probe-model"  # kept: not asked again


def test_a_server_that_cannot_say_gets_default_and_one_error_line(sim_factory, caplog) -> None:
    tgi_only = sim_factory("--only-backends", "tgi")  # no /v1/models: 404
    with caplog.at_level(logging.ERROR, logger="llm_users.client.model_probe"):
        assert discover_model(StreamClient(tgi_only.url), "vllm") == "default"
    [line] = caplog.messages
    assert "could not discover the model from GET /v1/models" in line and "give --llm-model" in line
    refused = f"http://127.0.0.1:{free_port()}"
    assert discover_model(StreamClient(refused), "vllm") == "default"
    assert discovered_models() == {tgi_only.url: "default", refused: "default"}
