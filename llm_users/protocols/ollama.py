"""Ollama native API: ``POST /api/chat`` (``messages``; text in ``message.content``) and
``POST /api/generate`` (``prompt``; text in ``response``).

Sampling goes in ``options: {num_predict, temperature, top_p, seed?, stop?}``; Ollama has no
ignore_eos. The stream is NDJSON: one JSON object per ``\\n``-ended line, no sentinel. The last
line has ``"done": true``, ``done_reason`` and the server's counters and timings in integer
nanoseconds (zero-valued fields are omitted: read them as 0). A line still without its ``\\n`` past
``--llm-max-event-bytes`` is ``response_too_large`` (:mod:`.limits`). Thinking models put reasoning text in
``message.thinking`` (chat) or ``thinking`` (generate); ``message.tool_calls`` (each call sent
whole) are tool output, their arguments one piece each. A mid-stream failure is an
``{"error": "..."}`` line on HTTP 200.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import orjson

from llm_users.errors import ProtocolError
from llm_users.protocols import limits
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
    bearer,
    error_message,
    json_post,
)
from llm_users.protocols.embed import ollama_embed_route
from llm_users.protocols.images import Image, ollama_images, with_images
from llm_users.protocols.openai import compat_route, messages_to_prompt
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.sdk_clients import ollama_client
from llm_users.protocols.server_side import OLLAMA as OLLAMA_SIDE
from llm_users.protocols.sse import json_object
from llm_users.protocols.tools import ToolSpec, ollama_fields

Endpoint = Literal["chat", "generate"]

PATHS = {"chat": "/api/chat", "generate": "/api/generate"}

#: The timing/counter fields of the final line, reported in ``Usage.server`` (ns / counts).
SERVER_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)


def build_request(
    *,
    model: str,
    messages: list[dict[str, Any]],
    sampling: Sampling,
    api_key: str | None = None,
    endpoint: Endpoint = "chat",
    extra_headers: dict[str, str] | None = None,
    images: tuple[Image, ...] = (),
    tools: ToolSpec | None = None,
) -> HTTPRequest:
    """A streaming Ollama chat or generate request (``tools``: ``tools`` and ``format``;
    ``images``: base64 strings in the last user message's ``images``, or the body's on /api/generate)."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        msgs = [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in messages]
        body["messages"] = with_images(msgs, images, lambda _text, ims: ollama_images(ims), key="images")
    elif endpoint == "generate":
        system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
        rest = [m for m in messages if m.get("role") != "system"]
        body["prompt"] = messages_to_prompt(rest) if rest else ""
        if system:
            body["system"] = "\n\n".join(system)
        if images:
            body["images"] = ollama_images(images)
    else:
        raise ValueError(f"unknown endpoint {endpoint!r}: use 'chat' or 'generate'")
    options: dict[str, Any] = {
        "num_predict": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
    }
    if sampling.seed is not None:
        options["seed"] = sampling.seed
    if sampling.stop:
        options["stop"] = list(sampling.stop)
    body["options"] = options
    if tools is not None:
        body.update(ollama_fields(tools))
    body["stream"] = True
    return json_post(PATHS[endpoint], body, accept="application/x-ndjson", auth=bearer(api_key),
                     extra_headers=extra_headers)


class OllamaStreamParser:
    """Parses an Ollama NDJSON stream from ``/api/chat`` or ``/api/generate``.

    Lines end in ``\\n``; ``\\r\\n`` and blank lines are tolerated. Complete on ``done: true``.
    ``max_bytes``: the line bound (default: the process's, :data:`.limits.CURRENT`).
    """

    __slots__ = ("_buf", "complete", "frames", "_model", "max_bytes")

    def __init__(self, max_bytes: int | None = None) -> None:
        self._buf = bytearray()  # the unfinished last line: appended to, joined once when it ends
        self.complete = False
        self.frames = 0
        self._model = False
        self.max_bytes = limits.CURRENT.event_bytes if max_bytes is None else max_bytes

    def feed(self, data: bytes) -> list[Event]:
        cut = data.rfind(b"\n")
        if cut < 0:
            self._buf += data
            if len(self._buf) > self.max_bytes:  # a line that does not end
                self._buf = bytearray()  # held no longer (a failure's traceback keeps the parser a while)
                raise limits.event_too_large("an NDJSON line", self.max_bytes)
            return []
        if self._buf:
            self._buf += data[: cut + 1]
            block = bytes(self._buf)
        else:
            block = data[: cut + 1]
        self._buf = bytearray(data[cut + 1:])
        lines = block.split(b"\n")
        lines.pop()
        events: list[Event] = []
        for line in lines:
            self._line(line, events)
        return events

    def close(self) -> list[Event]:
        """End of body: a last line without its ``\\n`` counts if it is a whole JSON object;
        a cut-off fragment is dropped (the caller sees ``complete`` false)."""
        rest, self._buf = bytes(self._buf), bytearray()
        events: list[Event] = []
        if rest.strip():
            try:
                orjson.loads(rest)
            except orjson.JSONDecodeError:
                return events
            self._line(rest, events)
        return events

    def payload(self, obj: dict[str, Any], name: bytes | None = None) -> list[Event]:
        """One decoded line (SDK mode) through the same rules as a line off the wire."""
        self.frames += 1
        events: list[Event] = []
        try:
            self._chunk(obj, events)
        except (AttributeError, TypeError, ValueError):
            raise ProtocolError(f"unexpected Ollama line shape: {str(obj)[:120]}") from None
        return events

    def _line(self, line: bytes, events: list[Event]) -> None:
        if line[-1:] == b"\r":
            line = line[:-1]
        if not line or line.isspace():
            return
        self.frames += 1
        obj = json_object(line, "NDJSON line")
        try:
            self._chunk(obj, events)
        except (AttributeError, TypeError, ValueError):
            raise ProtocolError(f"unexpected Ollama line shape: {line[:120]!r}") from None

    def _chunk(self, obj: dict[str, Any], events: list[Event]) -> None:
        err = obj.get("error")
        if err is not None:
            events.append(ServerError(error_message(err)))
            return
        if not self._model and obj.get("model"):
            self._model = True
            events.append(ModelName(str(obj["model"])))
        message = obj.get("message")
        if message is not None:
            thinking = message.get("thinking")
            text = message.get("content")
            for call in message.get("tool_calls") or ():  # sent whole: the arguments as one piece
                args = (call.get("function") or {}).get("arguments")
                events.append(Content(args if isinstance(args, str) else orjson.dumps(args or {}).decode(),
                                      tool=True))
        else:
            thinking = obj.get("thinking")
            text = obj.get("response")
        if thinking:
            events.append(Content(thinking, reasoning=True))
        if text:
            events.append(Content(text))
        if obj.get("done"):
            server = {k: int(obj.get(k) or 0) for k in SERVER_FIELDS}
            events.append(
                Usage(
                    input_tokens=server["prompt_eval_count"],
                    output_tokens=server["eval_count"],
                    server=server,
                )
            )
            reason = obj.get("done_reason")
            if reason:
                events.append(Finish(str(reason)))
            self.complete = True


def _sdk_stream(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    call = client.chat if "messages" in body else client.generate
    for part in call(**body):
        yield part.model_dump(exclude_none=True), None


SDK = SDKBinding("ollama", "ollama", ollama_client, _sdk_stream)


def _route(endpoint: Endpoint) -> Route:
    def build(spec: RequestSpec) -> HTTPRequest:
        return build_request(model=spec.model, messages=spec.messages, sampling=spec.sampling,
                             api_key=spec.api_key, endpoint=endpoint, tools=spec.tools, images=spec.images)

    return Route(endpoint, PATHS[endpoint], build, OllamaStreamParser, protocol="ollama", sdk=SDK, chunk_has_a_token=True,
                 server_side=OLLAMA_SIDE)


OLLAMA = Backend(
    name="ollama",
    routes=(_route("chat"), _route("generate"), compat_route("openai"), ollama_embed_route()),
    auth_header="Authorization",
    api_key_env=None,
    default_model="llama3.2",
    overload_statuses=frozenset({429, 503}),
    probes=("/api/version",),
    sim_routes="llm_users.sim.routes_ollama",
    docs=BackendDocs(
        locustfile="ollama.py", user="OllamaUser", auth_env="none",
        sampling="`options.num_predict/temperature/top_p`",
        tokens="final line `eval_count` / `prompt_eval_count` (+ server timings in ns)", cannot="no ignore_eos",
    ),
)
