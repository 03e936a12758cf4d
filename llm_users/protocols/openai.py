"""OpenAI-compatible protocol: chat and legacy completions, as spoken by OpenAI, vLLM, TGI's
Messages API and Ollama's /v1 routes; the OpenAI and vLLM backends also have the Responses API
(``responses``, :mod:`llm_users.protocols.responses`).

Dialects differ only in how the request says "how many tokens":

- ``openai``: ``max_completion_tokens`` on chat (``max_tokens`` on legacy completions, the only
  name that endpoint knows).
- ``vllm``: ``max_tokens`` plus vLLM's top-level extras ``ignore_eos`` and ``min_tokens``.
- ``compat``: ``max_tokens`` only (TGI Messages API, Ollama /v1, which honour nothing else).

Every request streams with ``stream_options.include_usage`` so token counts come from the
server. Chat requests carry ``tools``/``response_format`` when the run gives them
(:mod:`~llm_users.protocols.tools`); ``delta.tool_calls[].function.arguments`` pieces are
token-bearing output (``Content(tool=True)``). The parser yields :mod:`~llm_users.protocols.base` events from body bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from llm_users.errors import ConfigError
from llm_users.protocols import responses
from llm_users.protocols.backend import (
    Backend,
    BackendDocs,
    RequestSpec,
    Route,
    SDKBinding,
    SDKChunk,
    Tokenizer,
    sdk_arguments,
)
from llm_users.protocols.base import (
    Content,
    Event,
    Finish,
    HTTPRequest,
    ModelName,
    ServerError,
    Usage,
    bearer,
    error_message,
    json_post,
)
from llm_users.protocols.embed import RERANK_OPTIONS, openai_embeddings_route, vllm_rerank_routes
from llm_users.protocols.images import Image, openai_content, with_images
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.sdk_clients import openai_client
from llm_users.protocols.server_side import OPENAI as OPENAI_SIDE
from llm_users.protocols.sse import SSEJSONParser
from llm_users.protocols.tools import ToolSpec, openai_fields

Dialect = Literal["openai", "vllm", "compat"]
Endpoint = Literal["chat", "completions"]

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def build_request(
    *,
    model: str,
    messages: list[dict[str, Any]],
    sampling: Sampling,
    endpoint: Endpoint = "chat",
    dialect: Dialect = "openai",
    api_key: str | None = None,
    extra_headers: dict[str, str] | None = None,
    images: tuple[Image, ...] = (),
    tools: ToolSpec | None = None,
) -> HTTPRequest:
    """A streaming chat or completions request in the given dialect (``tools``: chat
    only; ``images``: chat only, as ``image_url`` data-URL parts of the last user message)."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        body["messages"] = with_images(messages, images, openai_content)
    elif endpoint == "completions":
        if images:
            raise ConfigError("--llm-images: /v1/completions takes no images; use --llm-endpoint chat")
        body["prompt"] = messages_to_prompt(messages)
    else:
        raise ValueError(f"unknown endpoint {endpoint!r}: use 'chat' or 'completions'")
    if dialect == "openai" and endpoint == "chat":
        body["max_completion_tokens"] = sampling.max_tokens
    else:
        body["max_tokens"] = sampling.max_tokens
    body["temperature"] = sampling.temperature
    body["top_p"] = sampling.top_p
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if dialect == "vllm":
        if sampling.ignore_eos:
            body["ignore_eos"] = True
        if sampling.min_tokens is not None:
            body["min_tokens"] = sampling.min_tokens
    if tools is not None and endpoint == "chat":
        body.update(openai_fields(tools))
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return json_post(PATHS[endpoint], body, accept="text/event-stream", auth=bearer(api_key),
                     extra_headers=extra_headers)


def messages_to_prompt(messages: list[dict[str, Any]]) -> str:
    """Flatten chat messages into one prompt string for completion-style endpoints."""
    if len(messages) == 1:
        return str(messages[0].get("content", ""))
    return "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)


class OpenAIStreamParser(SSEJSONParser):
    """Parses an OpenAI-compatible SSE stream (chat chunks or legacy completion chunks).

    Complete once ``data: [DONE]`` or a ``finish_reason`` was seen.
    """

    __slots__ = ("_model",)
    protocol = "OpenAI"
    sentinel = b"[DONE]"
    sentinel_ends = True

    def __init__(self) -> None:
        super().__init__()
        self._model = False

    def _chunk(self, obj: dict[str, Any], name: bytes | None, events: list[Event]) -> None:
        err = obj.get("error")
        if err is not None:
            status = None
            if isinstance(err, dict):
                status = err.get("code") if isinstance(err.get("code"), int) else err.get("http_status_code")
            events.append(ServerError(error_message(err), status=status, kind=_err_type(err)))
            return
        if not self._model:
            model = obj.get("model")
            if model:
                self._model = True
                events.append(ModelName(str(model)))
                rid = obj.get("id")
                if rid:  # the stream's own id (TGI's Messages API sends an empty one)
                    self.response_id = str(rid)
        choices = obj.get("choices")
        if choices:
            for choice in choices:
                delta = choice.get("delta")
                if delta is not None:
                    text = delta.get("content")
                    if not text or len(delta) > 1:  # not the usual {"content": ...}: reasoning, tool calls?
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if reasoning:
                            events.append(Content(reasoning, reasoning=True))
                        calls = delta.get("tool_calls")
                        if calls:
                            for call in calls:
                                args = (call.get("function") or {}).get("arguments")
                                if args:
                                    events.append(Content(args, tool=True))
                else:
                    text = choice.get("text")
                if text:
                    events.append(Content(text))
                reason = choice.get("finish_reason")
                if reason:
                    events.append(Finish(reason))
                    self.complete = True
        usage = obj.get("usage")
        if usage:
            details = usage.get("completion_tokens_details") or {}
            server = obj.get("metrics") or None
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            if isinstance(cached, int):  # OpenAI always, vLLM with --enable-prompt-tokens-details
                server = {**(server or {}), "cached_tokens": cached}
            timings = obj.get("timings")
            if isinstance(timings, dict):  # llama.cpp: its own prefill (prompt_ms) and decode (predicted_ms)
                server = {**(server or {}), "timings": timings}
            events.append(
                Usage(
                    input_tokens=usage.get("prompt_tokens"),
                    output_tokens=usage.get("completion_tokens"),
                    reasoning_tokens=details.get("reasoning_tokens"),
                    server=server,
                )
            )


def _err_type(err: Any) -> str | None:
    if isinstance(err, dict):
        kind = err.get("type") or err.get("error_type")
        return str(kind) if kind else None
    return None


# SDK mode: the openai package -----------------------------------------------------------------
def _sdk_stream(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    create = client.completions.create if "prompt" in body else client.chat.completions.create
    for chunk in create(**sdk_arguments(create, body)):  # vLLM's ignore_eos/min_tokens: extra_body
        yield chunk.to_dict(), None


SDK = SDKBinding("openai", "openai", openai_client, _sdk_stream, http_package="httpx2")


# the backends that speak this protocol natively ----------------------------------------------
def _route(endpoint: Endpoint, dialect: Dialect) -> Route:
    def build(spec: RequestSpec) -> HTTPRequest:
        return build_request(model=spec.model, messages=spec.messages, sampling=spec.sampling,
                             endpoint=endpoint, dialect=dialect, api_key=spec.api_key, tools=spec.tools,
                             images=spec.images)

    return Route(endpoint, PATHS[endpoint], build, OpenAIStreamParser, protocol="openai", sdk=SDK,
                 chunk_has_a_token=True, server_side=OPENAI_SIDE)


def compat_route(endpoint: str) -> Route:
    """The OpenAI-compatible chat route other backends also serve (TGI's Messages API, Ollama's
    /v1): ``max_tokens`` only."""
    r = _route("chat", "compat")
    return Route(endpoint, r.path, r.build, r.parser, r.protocol, sdk=r.sdk,
                 chunk_has_a_token=r.chunk_has_a_token, server_side=r.server_side)


# the tokenize endpoints OpenAI-compatible servers have (shapes from the servers' sources), tried in turn
TOKENIZERS = (
    Tokenizer("vllm", "/tokenize", lambda model, text: {"model": model, "prompt": text}),
    Tokenizer("llama.cpp", "/tokenize", lambda model, text: {"content": text}),
    Tokenizer("llama-cpp-python", "/extras/tokenize", lambda model, text: {"input": text, "model": model}),
)
SIM_ROUTES = "llm_users.sim.routes_openai"

VLLM = Backend(
    name="vllm",
    routes=(_route("chat", "vllm"), _route("completions", "vllm"), responses.route("vllm", openai_client),
            openai_embeddings_route(), *vllm_rerank_routes()),
    auth_header="Authorization",
    api_key_env=None,
    strip_v1=True,
    discover_model=True,
    sends_ignore_eos=True,
    request_options=RERANK_OPTIONS,
    tokenizers=TOKENIZERS,
    probes=("/version", "/v1/models", "/props"),  # /props: llama.cpp's server (build, model file)
    bench_name="openai-chat",
    sim_routes=SIM_ROUTES,
    docs=BackendDocs(
        locustfile="vllm.py", user="VLLMUser", auth_env="none (optional `--llm-api-key-env`)",
        sampling="`max_tokens`, `temperature`, `top_p`, `ignore_eos: true` (responses: `max_output_tokens`)",
        tokens="usage chunk (`stream_options.include_usage`); responses: `response.completed` usage",
        cannot="-",
    ),
)

OPENAI = Backend(
    name="openai",
    routes=(_route("chat", "openai"), _route("completions", "openai"), responses.route("openai", openai_client),
            openai_embeddings_route()),
    auth_header="Authorization",
    api_key_env="OPENAI_API_KEY",
    requires_api_key=True,
    default_model="gpt-4o-mini",
    strip_v1=True,
    discover_model=True,
    tokenizers=TOKENIZERS,
    probes=("/props",),
    bench_name="openai-chat",
    sim_routes=SIM_ROUTES,
    docs=BackendDocs(
        locustfile="openai.py", user="OpenAIUser", auth_env="`OPENAI_API_KEY`",
        sampling="`max_completion_tokens`, `temperature`, `top_p` (responses: `max_output_tokens`, at least 16)",
        tokens="usage chunk; responses: `response.completed` usage",
        cannot="no ignore_eos: output length may vary",
    ),
)
