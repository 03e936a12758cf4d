"""Which model an OpenAI-compatible server serves: ``GET /v1/models``, asked once per host and
kept for the run (the preflight fills it first; a User without ``--llm-model`` reads it)."""

from __future__ import annotations

import logging

from llm_users.client.stream import StreamClient
from llm_users.errors import LLMRequestError

log = logging.getLogger(__name__)

_discovered: dict[str, str] = {}


def discover_model(client: StreamClient, backend: str) -> str:
    """Ask an OpenAI-compatible server which model it serves (GET /v1/models), once per host."""
    key = f"{client.scheme}://{client.host_header}"
    if key not in _discovered:
        try:
            data = client.fetch_json("/v1/models")
            _discovered[key] = data["data"][0]["id"]
            log.info("locust-llm: %s serves model %r", key, _discovered[key])
        except (LLMRequestError, KeyError, IndexError, TypeError) as e:
            log.error("locust-llm: could not discover the model from GET /v1/models (%s); "
                      "sending model 'default' (give --llm-model)", e)
            _discovered[key] = "default"
    return _discovered[key]


def discovered_models() -> dict[str, str]:
    """Where the model probe keeps what each host serves (the preflight fills it first)."""
    return _discovered
