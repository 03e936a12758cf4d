"""OpenAI Responses API: ``POST /v1/responses`` with ``stream: true``, as OpenAI, vLLM, llama.cpp's
server and LiteLLM's bridge speak it (``--llm-endpoint responses`` of the OpenAI and vLLM users).

Request: ``model``; ``input`` (one user message as a plain string, else message items
``{"type": "message", "role", "content"}``: llama.cpp's server refuses an assistant item without
``type``); ``max_output_tokens`` (OpenAI refuses less than 16, so the ``openai`` dialect sends at
least 16); ``temperature``, ``top_p``; ``stream: true``. The ``vllm`` dialect adds what vLLM's
``ResponsesRequest`` takes beyond the API: ``ignore_eos``, ``seed``, ``stop`` (no ``min_tokens``).
No ``store``: the server's default (OpenAI and vLLM store; vLLM only with
``VLLM_ENABLE_RESPONSES_API_STORE=1``).

Multi-turn: an assistant message that carries a ``response_id`` (a session under
``--llm-responses-chain previous_id``, :mod:`llm_users.workload.sessions`) is already on the
server: the request names the last such message's id as ``previous_response_id`` and sends only
the messages after it. Without one the whole history goes as input items.

Stream: SSE frames whose payload's ``type`` names the event (OpenAI, vLLM and llama.cpp also write
it as the ``event:`` line; LiteLLM's bridge writes none and ends with ``data: [DONE]``, which is
no terminator here). The parser goes by ``type`` (falling back to the event name):

- ``response.created`` / ``in_progress`` / ``queued``: the model (:class:`ModelName`, once);
- ``response.output_text.delta`` and ``response.refusal.delta``: output :class:`Content`;
- ``response.reasoning_text.delta``, ``response.reasoning_summary_text.delta``:
  ``Content(reasoning=True)``;
- ``response.function_call_arguments.delta``: ``Content(tool=True)`` (token-bearing);
- ``response.completed``: :class:`Usage` (``input_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens``; in ``server`` the ``cached_tokens``, llama.cpp's
  ``timings`` and the ``response_id`` a chained next turn names), ``Finish("completed")``; the
  terminator;
- ``response.incomplete``: the same, with ``Finish(incomplete_details.reason)``
  (``max_output_tokens``: how OpenAI ends an answer cut at the maximum; a success);
- ``response.failed``: :class:`ServerError` from ``response.error`` (``kind`` its ``code``);
- ``error``: :class:`ServerError` (``message``, ``kind`` = ``code``; also a bare ``{"error": ...}``
  payload, the shape OpenAI-compatible servers use);
- everything else (item and part added/done, ``*.done`` events, annotations): ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from llm_users.protocols.backend import RequestSpec, Route, SDKBinding, SDKChunk, SDKSetup, sdk_arguments
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
from llm_users.protocols.images import Image, responses_content, with_images
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.sse import SSEJSONParser
from llm_users.protocols.tools import ToolSpec, responses_fields

Dialect = Literal["openai", "vllm"]

PATH = "/v1/responses"
ENDPOINT = "responses"
OPENAI_MIN_OUTPUT_TOKENS = 16  # OpenAI: "integer below minimum value. Expected a value >= 16"
#: the key of an assistant message that says the server holds that turn (sessions set it)
RESPONSE_ID = "response_id"


def split_input(messages: list[dict[str, Any]]) -> tuple[str | None, str | list[dict[str, Any]]]:
    """(``previous_response_id``, ``input``): the last assistant message carrying a response id
    is on the server, only the messages after it are sent; one user message goes as a string."""
    previous = None
    start = 0
    for i, m in enumerate(messages):
        rid = m.get(RESPONSE_ID)
        if rid:
            previous, start = str(rid), i + 1
    tail = messages[start:]
    if len(tail) == 1 and tail[0].get("role", "user") == "user" and isinstance(tail[0].get("content"), str):
        return previous, tail[0]["content"]
    items = [{"type": "message", "role": m.get("role", "user"), "content": m.get("content", "")} for m in tail]
    return previous, items


def build_request(
    *,
    model: str,
    messages: list[dict[str, Any]],
    sampling: Sampling,
    dialect: Dialect = "openai",
    api_key: str | None = None,
    extra_headers: dict[str, str] | None = None,
    tools: ToolSpec | None = None,
    images: tuple[Image, ...] = (),
) -> HTTPRequest:
    """A streaming Responses request in the given dialect (``tools``: --llm-tools and
    --llm-response-format in this API's shape)."""
    if dialect not in ("openai", "vllm"):
        raise ValueError(f"unknown Responses dialect {dialect!r}: use 'openai' or 'vllm'")
    previous, input_ = split_input(with_images(messages, images, responses_content))
    body: dict[str, Any] = {"model": model, "input": input_}
    if previous is not None:
        body["previous_response_id"] = previous
    max_tokens = sampling.max_tokens
    if dialect == "openai":
        max_tokens = max(max_tokens, OPENAI_MIN_OUTPUT_TOKENS)
    body["max_output_tokens"] = max_tokens
    body["temperature"] = sampling.temperature
    body["top_p"] = sampling.top_p
    if dialect == "vllm":
        if sampling.ignore_eos:
            body["ignore_eos"] = True
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
    body.update(responses_fields(tools))
    body["stream"] = True
    return json_post(PATH, body, accept="text/event-stream", auth=bearer(api_key), extra_headers=extra_headers)


_OUTPUT = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
_STARTS = frozenset({"response.created", "response.in_progress", "response.queued"})


class ResponsesStreamParser(SSEJSONParser):
    """Parses a Responses API SSE stream. Complete once ``response.completed`` or
    ``response.incomplete`` arrives."""

    __slots__ = ("_model",)
    protocol = "OpenAI Responses"
    sentinel = b"[DONE]"  # LiteLLM's bridge, after response.completed: not an end of its own

    def __init__(self) -> None:
        super().__init__()
        self._model = False

    def _chunk(self, obj: dict[str, Any], name: bytes | None, events: list[Event]) -> None:
        kind = obj.get("type") or (name.decode("utf-8", "replace") if name else None)
        if kind in _OUTPUT:
            text = obj.get("delta")
            if text:
                events.append(Content(text))
        elif kind in _REASONING:
            text = obj.get("delta")
            if text:
                events.append(Content(text, reasoning=True))
        elif kind == "response.function_call_arguments.delta":
            text = obj.get("delta")
            if text:
                events.append(Content(text, tool=True))
        elif kind in _STARTS:
            self._note_model(obj.get("response"), events)
        elif kind == "response.completed" or kind == "response.incomplete":
            self._end(obj, kind, events)
        elif kind == "response.failed":
            err = (obj.get("response") or {}).get("error") or {}
            events.append(_server_error(err, "the response failed (response.failed without an error)"))
        elif kind == "error" or ((not kind or not kind.startswith("response.")) and "error" in obj):
            err = obj.get("error")
            events.append(_server_error(err if err is not None else obj, "error event without a message"))
        # item/part added and done, *.done, annotations, unknown future types: ignored

    def _note_model(self, response: Any, events: list[Event]) -> None:
        if not self._model and isinstance(response, dict):
            model = response.get("model")
            if model:
                self._model = True
                events.append(ModelName(str(model)))

    def _end(self, obj: dict[str, Any], kind: str, events: list[Event]) -> None:
        resp = obj.get("response") or {}
        self._note_model(resp, events)
        usage = resp.get("usage") or {}
        server: dict[str, Any] = {}
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        if isinstance(cached, int):
            server["cached_tokens"] = cached
        timings = obj.get("timings") or resp.get("timings")  # llama.cpp: its own prefill and decode
        if isinstance(timings, dict):
            server["timings"] = timings
        rid = resp.get("id")
        if rid:
            server[RESPONSE_ID] = str(rid)
        details = usage.get("output_tokens_details") or {}
        events.append(Usage(input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens"),
                            reasoning_tokens=details.get("reasoning_tokens"), server=server or None))
        if kind == "response.completed":
            events.append(Finish("completed"))
        else:
            reason = (resp.get("incomplete_details") or {}).get("reason")
            events.append(Finish(str(reason) if reason else "incomplete"))
        self.complete = True


def _server_error(err: Any, default: str) -> ServerError:
    """A ServerError from an error object: its message; an integer code is a status, a string
    code (or type) the kind."""
    message = error_message(err) if err else default
    status = kind = None
    if isinstance(err, dict):
        code = err.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            status = code
        elif isinstance(code, str) and code.isdigit():  # LiteLLM: "code": "500"
            status = int(code)
        elif code:
            kind = str(code)
        if kind is None and err.get("type"):
            kind = str(err["type"])
    return ServerError(message or default, status=status, kind=kind)


# SDK mode: the openai package's Responses streaming ------------------------------------------
def _sdk_stream(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    create = client.responses.create
    for event in create(**sdk_arguments(create, body)):  # vLLM's ignore_eos/seed/stop: extra_body
        yield event.to_dict(), event.type.encode()


def route(dialect: Dialect, sdk_client: Callable[[Any, SDKSetup], Any]) -> Route:
    """The ``responses`` route of an OpenAI-compatible backend; ``sdk_client`` makes the openai
    SDK's client (the one its chat route uses). OpenAI's refuses ``--llm-max-tokens`` below 16 at
    start (the builder still raises the preflight's one-token probe to 16)."""

    def build(spec: RequestSpec) -> HTTPRequest:
        return build_request(model=spec.model, messages=spec.messages, sampling=spec.sampling, dialect=dialect,
                             api_key=spec.api_key, tools=spec.tools, images=spec.images)

    sdk = SDKBinding("openai", "openai", sdk_client, _sdk_stream, http_package="httpx2")
    return Route(ENDPOINT, PATH, build, ResponsesStreamParser, protocol="openai-responses", sdk=sdk,
                 chunk_has_a_token=True, min_output_tokens=OPENAI_MIN_OUTPUT_TOKENS if dialect == "openai" else 1)
