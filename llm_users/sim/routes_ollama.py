"""Ollama's native routes: ``POST /api/chat``, ``POST /api/generate``, ``GET /api/tags``,
``GET /api/version``.

NDJSON (``application/x-ndjson``): one object per ``\\n``-ended line, no blank lines, no
sentinel; ``stream`` defaults to true; ``options.num_predict`` is the max (absent or negative:
512). Every /api/chat line carries ``message.role``. The last line has ``done: true``,
``done_reason`` (``length`` or ``stop``) and the timings in INTEGER nanoseconds
(``total_duration, load_duration, prompt_eval_count, prompt_eval_duration, eval_count,
eval_duration``); zero-valued fields are left out, as Ollama does, except a count that
``--usage-zero`` zeroes (written as 0, as a gateway that reports 0 would). Errors are
``{"error": "..."}``; a full queue is 503 "server busy"; mid-stream an ``{"error"}`` line. With
``--reasoning-tokens N`` the first N tokens stream as ``message.thinking`` (/api/chat) or
``thinking`` (/api/generate) with empty content, as Ollama streams a thinking model; ``eval_count``
counts them too (Ollama reports no reasoning count of its own). With ``tools``
/api/chat answers with ``message.tool_calls`` (the call whole, in one line); with ``format``
(``"json"`` or a schema) with JSON text (:mod:`llm_users.sim.tools`).
"""

from __future__ import annotations

import datetime as dt
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, Job, Renderer
from llm_users.sim.images import ollama_images
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.state import SIM_KEY, admit
from llm_users.sim.text import content_text, join_prompt
from llm_users.sim.tools import Shape, ollama_shape

VERSION = "0.12.6"
CONTEXT_ID_BASE = 1000


class OllamaDialect(Dialect):
    name = "ollama"

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(503, "server busy, please try again.  maximum pending requests exceeded")

    def unauthorized(self) -> web.Response:
        return self.error(401, "unauthorized")


DIALECT = OllamaDialect()


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class OllamaRenderer(Renderer):
    content_type = "application/x-ndjson"

    def __init__(self, job: Job, *, chat: bool) -> None:
        super().__init__(job)
        self.chat = chat
        self.created = _now_iso()
        head = b'{"model":%b,"created_at":"%b",' % (orjson.dumps(job.model), self.created.encode())
        self.head_bytes = head
        self.p, self.c, _ = job.reported()  # prompt_eval_count and eval_count as the answer says
        self.zeroed = tuple(k for k, z in (("prompt_eval_count", job.zero_input), ("eval_count", job.zero_output)) if z)
        job.thinking = job.reasoning  # the first tokens stream as thinking (the streamer cuts chunks there)
        if chat:
            self.pre = head + b'"message":{"role":"assistant","content":"'
            self.post = b'"},"done":false}\n'
            self.think_pre = head + b'"message":{"role":"assistant","content":"","thinking":"'
        else:
            self.pre = head + b'"response":"'
            self.post = b'","done":false}\n'
            self.think_pre = head + b'"response":"","thinking":"'

    def _final(self, *, content: bytes = b"", thinking: bytes = b"") -> dict[str, Any]:
        job = self.job
        now = perf_counter_ns()
        out: dict[str, Any] = {"model": job.model, "created_at": _now_iso()}
        if self.chat:
            out["message"] = {"role": "assistant", "content": content.decode()}
        else:
            out["response"] = content.decode()
        if thinking:
            (out["message"] if self.chat else out)["thinking"] = thinking.decode()
        out["done"] = True
        out["done_reason"] = job.finish
        if not self.chat:
            out["context"] = [CONTEXT_ID_BASE + i for i in job.indices]
        first = job.first_ns or now
        timings = {
            "total_duration": now - job.arrival_ns,
            "load_duration": int(job.cold_ms * 1e6),
            "prompt_eval_count": self.p,
            "prompt_eval_duration": max(0, first - (job.admitted_ns or job.arrival_ns)),
            "eval_count": self.c,
            "eval_duration": max(0, now - first),
        }
        out.update({k: int(v) for k, v in timings.items() if v or k in self.zeroed})
        return out

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        words = self.job.words
        text = words[i] if j - i == 1 else b"".join(words[i:j])
        line = b"%b%b%b" % (self.think_pre if i < self.job.thinking else self.pre, text, self.post)
        if last:
            return line + orjson.dumps(self._final()) + b"\n"
        return line

    def error_frame(self) -> bytes:
        return b'{"error":"an error was encountered while running the model: simulated midstream_error fault"}\n'

    def malformed(self) -> bytes:
        return self.head_bytes + b'"done":fal\n'

    def body(self) -> bytes:
        t = self.job.thinking
        return orjson.dumps(self._final(content=self.job.text(t), thinking=self.job.text(0, t)))


class ToolCallRenderer(OllamaRenderer):
    """/api/chat answered with one tool call: Ollama sends a call whole (``arguments`` is an
    object), so all the answer's tokens come in one line, ``message.tool_calls``, then the final
    line."""

    def __init__(self, job: Job, shape: Shape) -> None:
        super().__init__(job, chat=True)
        job.k = max(1, job.n)
        calls = orjson.dumps([{"function": {"name": shape.tool, "arguments": shape.arguments}}])
        self.line = self.head_bytes + b'"message":{"role":"assistant","content":"","tool_calls":%b},"done":false}\n' % calls

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        if i < self.job.thinking:  # thinking lines first
            return super().chunk(i, j, last)
        if last:
            return self.line + orjson.dumps(self._final()) + b"\n"
        return self.line


def _max_tokens(body: dict[str, Any]) -> int:
    options = body.get("options") or {}
    n = options.get("num_predict") if isinstance(options, dict) else None
    if isinstance(n, int | float) and not isinstance(n, bool) and n > 0:
        return int(n)
    return 512


async def _handle(request: web.Request, *, chat: bool) -> web.StreamResponse:
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    model = body.get("model")
    if not model:
        return DIALECT.error(400, "model is required")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return DIALECT.error(400, "messages is required")
        prompt = join_prompt([content_text(m.get("content")) for m in messages if isinstance(m, dict)])
    else:
        raw = body.get("prompt")
        if not isinstance(raw, str):
            return DIALECT.error(400, "prompt is required")
        system = body.get("system")
        prompt = join_prompt([system if isinstance(system, str) else "", raw])
    try:
        images = ollama_images(body, chat)
    except ValueError as e:
        return DIALECT.error(400, str(e))
    stream = body.get("stream")
    job = new_job(sim, protocol="ollama", route="/api/chat" if chat else "/api/generate", model=str(model),
                  prompt=prompt, max_tokens=_max_tokens(body), stream=True if stream is None else bool(stream),
                  arrival_ns=arrival, messages=len(body["messages"]) if chat else 0, images=images)
    render = OllamaRenderer(job, chat=chat)
    shape = ollama_shape(body) if chat else ollama_shape({"format": body.get("format")})  # sim/tools.py
    if shape is not None:
        shape.apply(job, escape=shape.tool is None, first=job.thinking)  # after the thinking tokens
        if shape.tool is not None:
            render = ToolCallRenderer(job, shape)
    return await serve(sim, request, job, render, DIALECT)


async def api_chat(request: web.Request) -> web.StreamResponse:
    return await _handle(request, chat=True)


async def api_generate(request: web.Request) -> web.StreamResponse:
    return await _handle(request, chat=False)


async def api_tags(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    name = sim.cfg.model if ":" in sim.cfg.model else sim.cfg.model + ":latest"
    return web.json_response({"models": [{
        "name": name, "model": name, "modified_at": _now_iso(), "size": 4_661_224_676,
        "digest": "0" * 64,
        "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                    "parameter_size": "8.0B", "quantization_level": "Q4_K_M"},
    }]})


async def api_version(request: web.Request) -> web.Response:
    return web.json_response({"version": VERSION})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/chat", api_chat)
    app.router.add_post("/api/generate", api_generate)
    app.router.add_get("/api/tags", api_tags)
    app.router.add_get("/api/version", api_version)
