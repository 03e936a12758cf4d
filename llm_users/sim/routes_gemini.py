"""Google Gemini (Generative Language API): ``POST /{v1beta|v1}/models/{model}:streamGenerateContent``
(``?alt=sse``) and ``:generateContent``.

Frames are ``data: {...}`` WITH the space (google-genai requires it) and end in ``\\r\\n\\r\\n``.
Each carries ``candidates[0].content.parts[0].text`` (role ``model``) and cumulative
``usageMetadata {promptTokenCount, candidatesTokenCount, totalTokenCount}``; the last one also
``finishReason`` (``MAX_TOKENS`` or ``STOP``). With ``--reasoning-tokens N`` the first N tokens
stream as parts with ``"thought": true`` and ``usageMetadata`` counts them in ``thoughtsTokenCount``,
apart from ``candidatesTokenCount`` (the answer only, as Gemini counts); ``--reasoning-stream
hidden`` writes no thought part (Gemini without ``includeThoughts``: only the count), ``summary``
the last quarter of them (thought summaries). The body just ends: no sentinel. Several tokens
per chunk by default (``--gemini-tokens-per-chunk``), as Gemini streams. The max is
``generationConfig.maxOutputTokens``. Errors are ``{"error": {code, message, status}}``; a full
queue is 503 UNAVAILABLE; mid-stream a ``data: {"error": ...}`` frame. With ``tools``
(``functionDeclarations``) the answer is a ``functionCall`` part sent whole in one chunk; with
``responseMimeType: application/json`` JSON text (:mod:`llm_users.sim.tools`).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, Job, Renderer, int_param, read_json
from llm_users.sim.images import gemini_images
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.routes_embed import GEMINI_ACTIONS, gemini_embed
from llm_users.sim.state import SIM_KEY
from llm_users.sim.text import content_text, join_prompt
from llm_users.sim.tools import Shape, gemini_shape

STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
          429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
END = b"\r\n\r\n"


class GeminiDialect(Dialect):
    name = "gemini"

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        return orjson.dumps({"error": {"code": status, "message": message,
                                       "status": kind or STATUS.get(status, "UNKNOWN")}})

    def fault(self, status: int, *, stream: bool = False, retry_after: int = 1) -> web.Response:
        messages = {429: "Resource has been exhausted (e.g. check quota).", 500: "An internal error has occurred.",
                    503: "The model is overloaded. Please try again later."}
        return self.error(status, messages.get(status, "error"), retry_after=retry_after)

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(503, "The model is overloaded. Please try again later.")

    def unauthorized(self) -> web.Response:
        return self.error(401, "API key not valid. Please pass a valid API key.")


DIALECT = GeminiDialect()


class GeminiRenderer(Renderer):
    content_type = "text/event-stream"

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        self.response_id = f"sim{job.seq:012x}"
        self.pre = b'data: {"candidates":[{"content":{"parts":[{"text":"'
        self.thought = b'","thought":true'
        job.show_reasoning(job.reasoning)  # the first tokens are thoughts (the streamer cuts chunks there)
        self.tail = b',"modelVersion":%b,"responseId":"%b"}' % (orjson.dumps(job.model), self.response_id.encode())
        self.p, self.c, self.r = job.reported()  # prompt, candidates, thoughts tokens as usageMetadata says
        # With --usage-zero output|both every chunk's usageMetadata is the same: built once.
        self.usage_fixed = self._usage(0) if job.zero_output else None

    def finish_reason(self) -> str:
        return "MAX_TOKENS" if self.job.finish == "length" else "STOP"

    def _usage(self, c: int) -> bytes:
        p, r = self.p, self.r
        thoughts = b',"thoughtsTokenCount":%d' % r if r else b""
        return b'"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d%b}' % (
            p, c, p + c + r, thoughts)

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        words = self.job.words
        text = words[i] if j - i == 1 else b"".join(words[i:j])
        finish = b',"finishReason":"%b"' % self.finish_reason().encode() if last else b""
        usage = self.usage_fixed
        t = self.job.thinking
        return b'%b%b%b}],"role":"model"}%b,"index":0}],%b%b%b' % (
            self.pre, text, self.thought if i < t else b'"', finish,
            (self._usage(max(j - self.r, 0)) if usage is None else usage), self.tail, END)

    def error_frame(self) -> bytes:
        return b"data: " + DIALECT.error_body(500, "An internal error has occurred.") + END

    def malformed(self) -> bytes:
        return b'data: {"candidates":[{"content":' + END

    def body(self) -> bytes:
        job = self.job
        p, c, r, t = self.p, self.c, self.r, job.thinking
        h = job.hidden
        parts: list[dict[str, Any]] = [{"text": job.text(h, t).decode(), "thought": True}] if t > h else []
        parts.append({"text": job.text(t).decode()})
        usage = {"promptTokenCount": p, "candidatesTokenCount": c - r, "totalTokenCount": p + c}
        if r:
            usage["thoughtsTokenCount"] = r
        return orjson.dumps({
            "candidates": [{"content": {"parts": parts, "role": "model"},
                            "finishReason": self.finish_reason(), "index": 0}],
            "usageMetadata": usage,
            "modelVersion": job.model, "responseId": self.response_id,
        })


class FunctionCallRenderer(GeminiRenderer):
    """An answer that is one function call. Gemini sends a call whole (``args`` is an object, not
    text), so all the answer's tokens (after any thought parts) come in one chunk: ``parts
    [{"functionCall": {"name", "args"}}]``, ``finishReason: "STOP"``."""

    def __init__(self, job: Job, shape: Shape) -> None:
        super().__init__(job)
        job.k = max(1, job.n)
        self.call = orjson.dumps({"functionCall": {"name": shape.tool, "args": shape.arguments}})

    def finish_reason(self) -> str:
        return "STOP"

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        if i < self.job.thinking:  # thought parts first
            return super().chunk(i, j, last)
        usage = self.usage_fixed
        return b'data: {"candidates":[{"content":{"parts":[%b],"role":"model"},"finishReason":"STOP","index":0}],' \
               b'%b%b%b' % (self.call, self._usage(j) if usage is None else usage, self.tail, END)


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    v = d.get(camel)
    return d.get(snake) if v is None else v


def _prompt(body: dict[str, Any]) -> str:
    pieces = []
    system = _get(body, "systemInstruction", "system_instruction")
    if isinstance(system, dict):
        pieces.append(content_text(system.get("parts")))
    elif isinstance(system, str):
        pieces.append(system)
    contents = body.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    for c in contents or []:
        if isinstance(c, dict):
            pieces.append(content_text(c.get("parts")))
        elif isinstance(c, str):
            pieces.append(c)
    return join_prompt(pieces)


async def model_action(request: web.Request) -> web.StreamResponse:
    arrival = perf_counter_ns()
    sim = request.app[SIM_KEY]
    if not sim.authorized(request):
        return DIALECT.unauthorized()
    target = request.match_info["target"]
    model, _, action = target.rpartition(":")
    if action in GEMINI_ACTIONS and model:  # embeddings: their own route module
        return await gemini_embed(request, action, model, DIALECT)
    if action not in ("streamGenerateContent", "generateContent") or not model:
        return DIALECT.error(404, f"Method not found: {target}")
    body = await read_json(request, DIALECT)
    if isinstance(body, web.Response):
        return body
    if not body.get("contents"):
        return DIALECT.error(400, "* GenerateContentRequest.contents: contents is not specified")
    config = _get(body, "generationConfig", "generation_config") or {}
    try:
        max_tokens = int_param(_get(config, "maxOutputTokens", "max_output_tokens"), "maxOutputTokens")
    except ValueError as e:
        return DIALECT.error(400, str(e))
    stream = action == "streamGenerateContent"
    version = request.match_info["version"]
    contents = body["contents"]
    try:
        images = gemini_images(contents if isinstance(contents, list) else [contents])
    except ValueError as e:
        return DIALECT.error(400, str(e))
    job = new_job(sim, protocol="gemini", route=f"/{version}/models:{action}", model=model.removeprefix("models/"),
                  prompt=_prompt(body), max_tokens=max_tokens or 512, stream=stream, arrival_ns=arrival,
                  k=sim.cfg.gemini_tokens_per_chunk,
                  messages=len(body["contents"]) + (1 if _get(body, "systemInstruction", "system_instruction") else 0),
                  images=images)
    shape = gemini_shape(body, config)  # tools / a JSON answer (sim/tools.py)
    render = GeminiRenderer(job)
    if shape is not None:
        shape.apply(job, escape=shape.tool is None, first=job.thinking)  # after the thought tokens
        if shape.tool is not None:
            render = FunctionCallRenderer(job, shape)
    return await serve(sim, request, job, render, DIALECT)


def add_routes(app: web.Application) -> None:
    app.router.add_post(r"/{version:v1beta|v1|v1alpha}/models/{target}", model_action)
