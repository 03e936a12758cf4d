"""The backend descriptors: every backend declares its routes, key, SDK and docs in one place,
and the Users, SDK mode and the README read them."""

from __future__ import annotations

import orjson
import pytest

from llm_users.errors import ConfigError
from llm_users.protocols.backend import RequestSpec, all_backends, backend_table, get_backend
from llm_users.protocols.sampling import Sampling
from llm_users.users import ClaudeUser, GeminiUser, LLMUser, OllamaUser, OpenAIUser, TGIUser, VLLMUser
from tests.helpers import ROOT

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
SPEC = RequestSpec(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=7), api_key="sk-secret")


def test_six_backends_in_readme_order() -> None:
    assert list(all_backends()) == ["vllm", "openai", "tgi", "ollama", "claude", "gemini"]


@pytest.mark.parametrize("name", ["vllm", "openai", "tgi", "ollama", "claude", "gemini"])
def test_every_route_builds_a_request_its_parser_reads(name: str) -> None:
    backend = get_backend(name)
    for route in backend.routes:
        req = route.build(SPEC)
        assert req.method == "POST"
        assert req.path.split("?")[0] == route.path.replace("{model}", "m").split("?")[0]
        body = orjson.loads(req.body)
        assert 7 in _values(body), body  # the max-token setting travels in the backend's own field
        # the key travels in the descriptor's header, marked secret
        assert backend.auth_header in req.headers and "sk-secret" in req.headers[backend.auth_header]
        assert req.redacted_headers()[backend.auth_header] == "***"
        parser = route.parser()
        assert parser.complete is False and parser.feed(b"") == []


def _values(obj: object) -> list[object]:
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _values(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in _values(x)]
    return [obj]


def test_route_lookup_names_the_valid_endpoints() -> None:
    ollama = get_backend("ollama")
    assert ollama.default_endpoint == "chat"
    assert ollama.route(None).path == "/api/chat"
    assert ollama.route("generate").path == "/api/generate"
    assert ollama.route("openai").protocol == "openai"
    with pytest.raises(ConfigError, match="--llm-endpoint for ollama must be one of chat, generate, openai"):
        ollama.route("embeddings")
    with pytest.raises(ConfigError, match="unknown backend"):
        get_backend("nope")


def test_descriptor_facts() -> None:
    b = all_backends()
    assert b["vllm"].sends_ignore_eos and not any(b[n].sends_ignore_eos for n in b if n != "vllm")
    assert 529 in b["claude"].overload_statuses and 529 not in b["openai"].overload_statuses
    assert {n: x.sdk_module for n, x in b.items()} == {  # the default route's SDK
        "vllm": "openai", "openai": "openai", "tgi": None, "ollama": "ollama", "claude": "anthropic",
        "gemini": "google.genai"}
    assert b["openai"].base_url("http://h:1/v1/") == "http://h:1"
    assert b["claude"].base_url("http://h:1/v1") == "http://h:1/v1"


def test_users_take_their_defaults_from_the_descriptor() -> None:
    for cls, name in [(VLLMUser, "vllm"), (OpenAIUser, "openai"), (TGIUser, "tgi"), (OllamaUser, "ollama"),
                      (ClaudeUser, "claude"), (GeminiUser, "gemini")]:
        assert cls.backend == name and cls.descriptor is get_backend(name)
        assert cls.endpoint == cls.descriptor.default_endpoint
        assert cls.api_key_env == cls.descriptor.api_key_env
    assert issubclass(ClaudeUser, LLMUser)

    class Mine(OllamaUser):
        endpoint = "generate"

    assert Mine.endpoint == "generate" and Mine.backend == "ollama"


def test_claude_options_reach_the_builder() -> None:
    route = get_backend("claude").route(None)
    req = route.build(RequestSpec(model="m", messages=MESSAGES, sampling=Sampling(), api_key="k",
                                  options={"auth": "bearer", "anthropic_version": "2023-06-01"}))
    assert req.headers["Authorization"] == "Bearer k" and "x-api-key" not in req.headers


def test_readme_table_is_rendered_from_the_descriptors() -> None:
    assert backend_table() in (ROOT / "README.md").read_text()
