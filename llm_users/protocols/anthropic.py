"""Anthropic Messages API: ``POST /v1/messages`` with ``stream: true``.

Request: ``model, max_tokens, messages`` (system messages move to the top-level ``system``),
``stream``, and ``temperature``/``top_p`` under ``anthropic-version: 2023-06-01`` (newer versions,
as the 2.x SDK sends, no longer take them unless ``include_sampling=True``). Auth is the
documented ``x-api-key`` header or, as the 2.x SDK does, ``Authorization: Bearer``.

Stream: SSE frames, each with an ``event:`` line equal to the payload's ``type``. The parser goes
by the payload's ``type`` (falling back to the event name) and is tolerant of the rest:

- ``message_start``: ``message.usage.input_tokens`` (+ cache read/creation tokens);
- ``content_block_delta``: ``text_delta`` -> Content, ``thinking_delta`` -> reasoning Content,
  ``input_json_delta`` (a ``tool_use`` block's arguments) -> tool Content, ``signature_delta``
  and others ignored;
- ``message_delta``: ``delta.stop_reason`` -> Finish, ``usage.output_tokens`` (cumulative; the
  last one wins) and ``usage.output_tokens_details.thinking_tokens`` (the share spent on
  thinking, as the SDK's ``MessageDeltaUsage`` types it) -> Usage;
- ``message_stop``: the terminator. ``ping``, block start/stop: ignored.
- ``error`` (``event: error``): ServerError with ``error.message`` and ``kind=error.type``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from llm_users.protocols import server_side
from llm_users.protocols.backend import (
    Backend,
    BackendDocs,
    RequestSpec,
    Route,
    SDKBinding,
    SDKChunk,
    SDKSetup,
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
from llm_users.protocols.images import Image, anthropic_content, with_images
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.sse import SSEJSONParser
from llm_users.protocols.tools import ToolSpec, anthropic_fields

AuthStyle = Literal["x-api-key", "bearer"]

PATH = "/v1/messages"
DEFAULT_VERSION = "2023-06-01"
_CACHE_FIELDS = ("cache_read_input_tokens", "cache_creation_input_tokens")


def build_request(
    *,
    model: str,
    messages: list[dict[str, Any]],
    sampling: Sampling,
    api_key: str | None = None,
    auth: AuthStyle = "x-api-key",
    anthropic_version: str = DEFAULT_VERSION,
    include_sampling: bool | None = None,
    extra_headers: dict[str, str] | None = None,
    images: tuple[Image, ...] = (),
    tools: ToolSpec | None = None,
) -> HTTPRequest:
    """A streaming Messages request (``tools``: the run's tools, or the forced JSON-answer tool;
    ``images``: base64 ``image`` blocks after the last user message's text).

    ``include_sampling`` None means: send temperature/top_p only under version 2023-06-01.
    """
    system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
    convo = [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in messages
             if m.get("role") != "system"]
    convo = with_images(convo, images, anthropic_content)
    body: dict[str, Any] = {"model": model, "max_tokens": sampling.max_tokens, "messages": convo}
    if system:
        body["system"] = "\n\n".join(system)
    if sampling.stop:
        body["stop_sequences"] = list(sampling.stop)
    if tools is not None:
        body.update(anthropic_fields(tools))
    body["stream"] = True
    if include_sampling is None:
        include_sampling = anthropic_version == DEFAULT_VERSION
    if include_sampling:
        body["temperature"] = sampling.temperature
        if sampling.top_p < 1:  # 1.0 is the API's default; newer models refuse both knobs at once
            body["top_p"] = sampling.top_p
    if auth not in ("x-api-key", "bearer"):
        raise ValueError(f"unknown auth style {auth!r}: use 'x-api-key' or 'bearer'")
    key_header = (("x-api-key", api_key) if auth == "x-api-key" else bearer(api_key)) if api_key else None
    return json_post(PATH, body, accept="text/event-stream", auth=key_header,
                     headers={"anthropic-version": anthropic_version}, extra_headers=extra_headers)


class AnthropicStreamParser(SSEJSONParser):
    """Parses a Messages API SSE stream. Complete once ``message_stop`` arrives."""

    __slots__ = ("_input", "_server")
    protocol = "Anthropic"

    def __init__(self) -> None:
        super().__init__()
        self._input: int | None = None
        self._server: dict[str, Any] | None = None

    def _chunk(self, obj: dict[str, Any], name: bytes | None, events: list[Event]) -> None:
        kind = obj.get("type") or (name.decode("utf-8", "replace") if name else None)
        if kind == "content_block_delta":
            delta = obj["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                text = delta.get("text")
                if text:
                    events.append(Content(text))
            elif dtype == "thinking_delta":
                text = delta.get("thinking")
                if text:
                    events.append(Content(text, reasoning=True))
            elif dtype == "input_json_delta":  # a tool call's arguments
                text = delta.get("partial_json")
                if text:
                    events.append(Content(text, tool=True))
        elif kind == "message_delta":
            reason = (obj.get("delta") or {}).get("stop_reason")
            if reason:
                events.append(Finish(str(reason)))
            usage = obj.get("usage")
            if usage:
                self._note_cache(usage)
                input_tokens = usage.get("input_tokens")
                details = usage.get("output_tokens_details") or {}
                events.append(
                    Usage(
                        input_tokens=self._input if input_tokens is None else input_tokens,
                        output_tokens=usage.get("output_tokens"),
                        reasoning_tokens=details.get("thinking_tokens"),
                        server=dict(self._server) if self._server else None,
                    )
                )
        elif kind == "message_start":
            model = (obj.get("message") or {}).get("model")
            if model:
                events.append(ModelName(str(model)))
            mid = (obj.get("message") or {}).get("id")
            if mid:
                self.response_id = str(mid)
            usage = (obj.get("message") or {}).get("usage") or {}
            self._input = usage.get("input_tokens")
            self._note_cache(usage)
            if self._input is not None or self._server:
                server = dict(self._server) if self._server else None
                events.append(Usage(input_tokens=self._input, server=server))
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error" or ("error" in obj and kind not in _KNOWN):
            err = obj.get("error")
            etype = err.get("type") if isinstance(err, dict) else None
            events.append(ServerError(error_message(err), kind=str(etype) if etype else None))
        # ping, content_block_start/stop and unknown future types are ignored.

    def _note_cache(self, usage: dict[str, Any]) -> None:
        for key in _CACHE_FIELDS:
            value = usage.get(key)
            if value is not None:
                if self._server is None:
                    self._server = {}
                self._server[key] = value


_KNOWN = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
     "message_delta", "message_stop", "ping"}
)


def _build(spec: RequestSpec) -> HTTPRequest:
    o = spec.options
    return build_request(model=spec.model, messages=spec.messages, sampling=spec.sampling, api_key=spec.api_key,
                         auth=o.get("auth", "x-api-key"), anthropic_version=o.get("anthropic_version", DEFAULT_VERSION),
                         tools=spec.tools, images=spec.images)


def _sdk_client(anthropic: Any, setup: SDKSetup) -> Any:
    key = setup.api_key or "EMPTY"
    bearer_auth = setup.options.get("auth") == "bearer"
    http = anthropic.DefaultHttpxClient(**setup.httpx_kwargs)
    return anthropic.Anthropic(
        base_url=setup.base_url, api_key=None if bearer_auth else key, auth_token=key if bearer_auth else None,
        max_retries=0, timeout=http.timeout, http_client=http,
        default_headers={"anthropic-version": setup.options.get("anthropic_version", DEFAULT_VERSION)},
    )


def _sdk_stream(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    create = client.messages.create
    for event in create(**sdk_arguments(create, body)):  # the 2.x SDK has no temperature: extra_body
        yield event.to_dict(), event.type.encode()


SDK = SDKBinding("anthropic", "anthropic", _sdk_client, _sdk_stream, http_package="httpx2")

CLAUDE = Backend(
    name="claude",
    routes=(Route("messages", PATH, _build, AnthropicStreamParser, protocol="anthropic", sdk=SDK,
                  server_side=server_side.ANTHROPIC),),
    auth_header="x-api-key",
    api_key_env="ANTHROPIC_API_KEY",
    requires_api_key=True,
    default_model="claude-sonnet-4-5",
    overload_statuses=frozenset({429, 503, 529}),
    request_options=(("auth", "x-api-key"), ("anthropic_version", DEFAULT_VERSION)),  # AuthStyle, a version
    cached_in_prompt=False,  # cache_read_input_tokens come apart from input_tokens
    sim_routes="llm_users.sim.routes_anthropic",
    docs=BackendDocs(
        locustfile="claude.py", user="ClaudeUser", auth_env="`ANTHROPIC_API_KEY`",
        sampling="`max_tokens`, `temperature` (version 2023-06-01; top_p left at its default)",
        tokens="`message_start` / last `message_delta` usage", cannot="no ignore_eos",
    ),
)
