"""The backend descriptors: every backend declares its routes, key, SDK, defaults, tokenizers,
probes, export name, cached-token rule, simulator routes and docs in one place, and the Users,
SDK mode, the outputs, the simulator and the README read them."""

from __future__ import annotations

import orjson
import pytest

from llm_users import users
from llm_users.errors import ConfigError
from llm_users.protocols import backend as registry
from llm_users.protocols.backend import (
    Backend,
    RequestSpec,
    all_backends,
    backend_table,
    builtin_backends,
    extra_sim_routes,
    find_backend,
    get_backend,
    register,
)
from llm_users.protocols.sampling import Sampling
from llm_users.users import ClaudeUser, GeminiUser, LLMUser, OllamaUser
from tests.helpers import ROOT

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
SPEC = RequestSpec(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=7), api_key="sk-secret")


def test_seven_backends_in_readme_order() -> None:
    assert list(all_backends()) == ["vllm", "openai", "tgi", "ollama", "claude", "gemini", "tei"]


@pytest.mark.parametrize("name", list(all_backends()))
def test_every_route_builds_a_request_its_parser_reads(name: str) -> None:
    backend = get_backend(name)
    for route in backend.routes:
        if route.kind != "chat":  # embeddings, rerank: no max tokens (tests/protocols/test_embed.py)
            continue
        req = route.build(SPEC)
        assert req.method == "POST"
        assert req.path.split("?")[0] == route.path.replace("{model}", "m").split("?")[0]
        body = orjson.loads(req.body)
        # the max-token setting travels in the backend's own field (raised to a route's floor: OpenAI's responses)
        assert max(7, route.min_output_tokens) in _values(body), body
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
        "gemini": "google.genai", "tei": None}
    assert b["openai"].base_url("http://h:1/v1/") == "http://h:1"
    assert b["claude"].base_url("http://h:1/v1") == "http://h:1/v1"


@pytest.mark.parametrize("name", list(all_backends()))
def test_users_take_their_defaults_from_the_descriptor(name: str) -> None:
    d = get_backend(name)
    assert d.docs is not None
    cls = getattr(users, d.docs.user)
    assert cls.backend == name and cls.descriptor is d and cls.abstract is True
    assert cls.endpoint == d.default_endpoint
    assert cls.api_key_env == d.api_key_env
    assert cls.model == d.default_model and cls.ignore_eos == d.sends_ignore_eos
    assert cls.requires_api_key == d.requires_api_key
    assert cls.request_options == tuple(k for k, _ in d.request_options)
    assert all(getattr(cls, k) == v for k, v in d.request_options)
    assert issubclass(cls, LLMUser)


def test_user_defaults_are_what_they_were() -> None:
    """The values the six User classes had as class attributes before the descriptor owned them."""
    got = {n: (getattr(users, d.docs.user).model, getattr(users, d.docs.user).ignore_eos,
               getattr(users, d.docs.user).requires_api_key) for n, d in all_backends().items() if d.docs}
    assert got == {"vllm": (None, True, False), "openai": ("gpt-4o-mini", False, True), "tgi": ("tgi", False, False),
                   "ollama": ("llama3.2", False, False), "claude": ("claude-sonnet-4-5", False, True),
                   "gemini": ("gemini-2.5-flash", False, True), "tei": ("tei", False, False)}
    assert (ClaudeUser.auth, ClaudeUser.anthropic_version) == ("x-api-key", "2023-06-01")
    assert ClaudeUser.request_options == ("auth", "anthropic_version")
    assert GeminiUser.api_version == "v1beta" and GeminiUser.request_options == ("api_version",)

    class Mine(OllamaUser):
        endpoint = "generate"

    assert Mine.endpoint == "generate" and Mine.backend == "ollama"


def test_a_subclass_keeps_what_it_sets() -> None:
    class Mine(ClaudeUser):
        model = "claude-x"
        auth = "bearer"
        ignore_eos = True

    assert (Mine.model, Mine.auth, Mine.ignore_eos, Mine.backend) == ("claude-x", "bearer", True, "claude")
    assert ClaudeUser.model == "claude-sonnet-4-5" and ClaudeUser.auth == "x-api-key"


def test_backend_facts_the_rest_reads() -> None:
    """Tokenizer shapes, environment probes, export names, the cached-token rule, sim routes."""
    b = all_backends()
    assert {n: [t.name for t in x.tokenizers] for n, x in b.items()} == {
        "vllm": ["vllm", "llama.cpp", "llama-cpp-python"], "openai": ["vllm", "llama.cpp", "llama-cpp-python"],
        "tgi": ["tgi"], "ollama": [], "claude": [], "gemini": [], "tei": ["tei"]}
    shapes = {t.name: (t.path, t.body("m", "some text")) for t in b["vllm"].tokenizers + b["tgi"].tokenizers}
    assert shapes == {"vllm": ("/tokenize", {"model": "m", "prompt": "some text"}),
                      "llama.cpp": ("/tokenize", {"content": "some text"}),
                      "llama-cpp-python": ("/extras/tokenize", {"input": "some text", "model": "m"}),
                      "tgi": ("/tokenize", {"inputs": "some text"})}
    assert {n: x.probes for n, x in b.items()} == {
        "vllm": ("/version", "/v1/models", "/props"), "openai": ("/props",), "tgi": ("/info",),
        "ollama": ("/api/version",), "claude": (), "gemini": (), "tei": ("/info",)}
    assert {n: x.bench_name or n for n, x in b.items()} == {
        "vllm": "openai-chat", "openai": "openai-chat", "tgi": "tgi", "ollama": "ollama", "claude": "claude",
        "gemini": "gemini", "tei": "tei"}
    assert [n for n, x in b.items() if not x.cached_in_prompt] == ["claude"]
    assert {n: x.sim_routes for n, x in b.items()} == {
        "vllm": "llm_users.sim.routes_openai", "openai": "llm_users.sim.routes_openai",
        "tgi": "llm_users.sim.routes_tgi", "ollama": "llm_users.sim.routes_ollama",
        "claude": "llm_users.sim.routes_anthropic", "gemini": "llm_users.sim.routes_gemini",
        "tei": "llm_users.sim.routes_embed"}


def _toy(name: str = "toy", sim_routes: str | None = "toy_routes") -> Backend:
    route = get_backend("ollama").routes[0]
    return Backend(name=name, routes=(route,), auth_header=None, api_key_env=None, sim_routes=sim_routes)


def test_register_adds_a_backend_after_the_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_registered", {})
    toy = register(_toy())
    assert list(all_backends()) == [*builtin_backends(), "toy"]
    assert find_backend("toy") is toy and get_backend("toy") is toy and find_backend("nope") is None
    again = register(_toy())  # the module imported twice: the last one wins
    assert get_backend("toy") is again
    with pytest.raises(ConfigError, match="'vllm' is built in"):
        register(_toy("vllm"))
    assert list(builtin_backends()) == ["vllm", "openai", "tgi", "ollama", "claude", "gemini", "tei"]
    assert backend_table() in (ROOT / "README.md").read_text()  # the README's table: the built-ins only
    # the simulator serves the built-ins' routes itself: --routes names only the others
    assert extra_sim_routes([get_backend("vllm"), toy, get_backend("claude"), _toy("t2")]) == ["toy_routes"]
    assert extra_sim_routes([get_backend("tgi"), _toy("t3", None)]) == []

    class Toy(LLMUser):
        descriptor = toy

    assert (Toy.backend, Toy.endpoint, Toy.model, Toy.ignore_eos, Toy.abstract) == ("toy", "chat", None, False, False)


def test_claude_options_reach_the_builder() -> None:
    route = get_backend("claude").route(None)
    req = route.build(RequestSpec(model="m", messages=MESSAGES, sampling=Sampling(), api_key="k",
                                  options={"auth": "bearer", "anthropic_version": "2023-06-01"}))
    assert req.headers["Authorization"] == "Bearer k" and "x-api-key" not in req.headers


def test_readme_table_is_rendered_from_the_descriptors() -> None:
    assert backend_table() in (ROOT / "README.md").read_text()
