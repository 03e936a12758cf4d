"""Google Gemini API (Generative Language REST): ``POST /{api_version}/models/{model}:
streamGenerateContent?alt=sse`` with the key in the ``x-goog-api-key`` header.

Request: ``contents`` (roles ``user``/``model``; system messages go to ``systemInstruction``) and
``generationConfig {maxOutputTokens, temperature, topP, seed?, stopSequences?}``. Gemini has no
ignore_eos.

Stream: SSE frames (``data: {...}`` separated by ``\\r\\n\\r\\n``), often several tokens each.
Text is in ``candidates[0].content.parts[].text``; parts with ``"thought": true`` are reasoning;
a ``functionCall`` part (sent whole) is a tool call, its ``args`` one piece of tool output.
``usageMetadata`` is cumulative: the last one that has ``candidatesTokenCount`` gives output
tokens and ``promptTokenCount`` input. Gemini's ``candidatesTokenCount`` leaves the thoughts out
(``thoughtsTokenCount``): output is their sum, as every other dialect counts reasoning inside
its output, and ``thoughtsTokenCount`` is kept as the reasoning tokens. The
frame with ``finishReason`` completes the stream (the server then closes the connection; there is
no sentinel), as does a prompt blocked with ``promptFeedback.blockReason``. Errors arrive as
``{"error": {"code", "message", "status"}}`` payloads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from llm_users.protocols.backend import (
    Backend,
    BackendDocs,
    RequestSpec,
    Route,
    SDKBinding,
    SDKChunk,
)
from llm_users.protocols.base import (
    Content,
    Event,
    Finish,
    HTTPRequest,
    ModelName,
    ServerError,
    Usage,
    error_message,
    json_post,
)
from llm_users.protocols.embed import gemini_embed_routes
from llm_users.protocols.images import Image, gemini_parts, with_images
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.sdk_clients import GEMINI_API_VERSION, genai_client
from llm_users.protocols.sse import SSEJSONParser
from llm_users.protocols.tools import ToolSpec, gemini_fields


def build_request(
    *,
    model: str,
    messages: list[dict[str, Any]],
    sampling: Sampling,
    api_key: str | None = None,
    api_version: str = GEMINI_API_VERSION,
    extra_headers: dict[str, str] | None = None,
    images: tuple[Image, ...] = (),
    tools: ToolSpec | None = None,
) -> HTTPRequest:
    """A streaming generateContent request (``tools``: ``functionDeclarations`` and the JSON answer's
    ``responseMimeType``/``responseJsonSchema``; ``images``: ``inlineData`` parts after the last user
    message's text)."""
    model = model.removeprefix("models/")
    system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
    convo = with_images([m for m in messages if m.get("role") != "system"], images, gemini_parts, key="parts")
    contents = [
        {
            "role": "model" if m.get("role") in ("assistant", "model") else "user",
            "parts": m.get("parts") or [{"text": str(m.get("content", ""))}],
        }
        for m in convo
    ]
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    config: dict[str, Any] = {
        "maxOutputTokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "topP": sampling.top_p,
    }
    if sampling.seed is not None:
        config["seed"] = sampling.seed
    if sampling.stop:
        config["stopSequences"] = list(sampling.stop)
    declared, answer = gemini_fields(tools)
    if declared:
        body["tools"] = declared
    config.update(answer)
    body["generationConfig"] = config
    name = f"/{api_version}/models/{model}:streamGenerateContent"
    return json_post(name + "?alt=sse", body, accept="text/event-stream", name=name,
                     auth=("x-goog-api-key", api_key) if api_key else None, extra_headers=extra_headers)


class GeminiStreamParser(SSEJSONParser):
    """Parses a ``streamGenerateContent?alt=sse`` stream.

    Complete once a candidate's ``finishReason`` (or a prompt ``blockReason``) arrives; a stream
    that ends without one was truncated.
    """

    __slots__ = ("_model",)
    protocol = "Gemini"

    def __init__(self) -> None:
        super().__init__()
        self._model = False

    def _chunk(self, obj: dict[str, Any], name: bytes | None, events: list[Event]) -> None:
        err = obj.get("error")
        if err is not None:
            status = err.get("code") if isinstance(err, dict) else None
            kind = err.get("status") if isinstance(err, dict) else None
            events.append(
                ServerError(
                    error_message(err),
                    status=status if isinstance(status, int) else None,
                    kind=str(kind) if kind else None,
                )
            )
            return
        if not self._model and obj.get("modelVersion"):
            self._model = True
            events.append(ModelName(str(obj["modelVersion"])))
            if obj.get("responseId"):
                self.response_id = str(obj["responseId"])
        reason = None
        candidates = obj.get("candidates")
        if candidates:
            cand = candidates[0]
            content = cand.get("content")
            if content:
                for part in content.get("parts") or ():
                    text = part.get("text")
                    if text:
                        events.append(Content(text, reasoning=bool(part.get("thought"))))
                    call = part.get("functionCall")
                    if call:  # Gemini sends a call whole: its arguments as one piece of output
                        events.append(Content(orjson.dumps(call.get("args") or {}).decode(), tool=True))
            reason = cand.get("finishReason")
        else:
            feedback = obj.get("promptFeedback")
            if feedback:
                reason = feedback.get("blockReason")
        meta = obj.get("usageMetadata")
        if meta and meta.get("candidatesTokenCount") is not None:
            cached = meta.get("cachedContentTokenCount")
            events.append(
                Usage(
                    input_tokens=meta.get("promptTokenCount"),
                    output_tokens=meta["candidatesTokenCount"] + (meta.get("thoughtsTokenCount") or 0),
                    reasoning_tokens=meta.get("thoughtsTokenCount"),
                    server={"cachedContentTokenCount": cached} if cached is not None else None,
                )
            )
        if reason:
            events.append(Finish(str(reason)))
            self.complete = True


def _build(spec: RequestSpec) -> HTTPRequest:
    return build_request(model=spec.model, messages=spec.messages, sampling=spec.sampling, api_key=spec.api_key,
                         api_version=spec.options.get("api_version", GEMINI_API_VERSION), tools=spec.tools,
                         images=spec.images)


def _sdk_stream(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    config = dict(body["generationConfig"])
    for key in ("systemInstruction", "tools"):
        if key in body:
            config[key] = body[key]
    model = spec.model.removeprefix("models/")
    for chunk in client.models.generate_content_stream(model=model, contents=body["contents"], config=config):
        yield chunk.model_dump(mode="json", by_alias=True, exclude_none=True), None


SDK = SDKBinding("google.genai", "google-genai", genai_client, _sdk_stream)

GEMINI = Backend(
    name="gemini",
    routes=(Route("generate", "/v1beta/models/{model}:streamGenerateContent?alt=sse", _build, GeminiStreamParser,
                  protocol="gemini", sdk=SDK), *gemini_embed_routes()),
    auth_header="x-goog-api-key",
    api_key_env="GEMINI_API_KEY,GOOGLE_API_KEY",
    requires_api_key=True,
    default_model="gemini-2.5-flash",
    overload_statuses=frozenset({429, 503}),
    request_options=(("api_version", GEMINI_API_VERSION),),
    sim_routes="llm_users.sim.routes_gemini",
    docs=BackendDocs(
        locustfile="gemini.py", user="GeminiUser", auth_env="`GEMINI_API_KEY` or `GOOGLE_API_KEY`",
        sampling="`generationConfig.maxOutputTokens/temperature/topP`",
        tokens="last `usageMetadata.candidatesTokenCount` (thinking tokens kept apart)",
        cannot="no ignore_eos; several tokens per chunk",
    ),
)
