"""OpenAI-compatible routes, in vLLM's dialect: ``POST /v1/chat/completions``,
``POST /v1/completions`` (streaming or not) and ``GET /v1/models``; ``POST /v1/responses`` comes
from :mod:`llm_users.sim.routes_responses`.

The same route stands in for TGI's Messages API and Ollama's /v1. Length comes from
``max_completion_tokens`` or ``max_tokens`` (chat default 512, completions default 16 like
vLLM). Streams: the first chat chunk carries the role and empty content, the last token's
chunk carries ``finish_reason`` (vLLM style, with ``stop_reason``), then with
``stream_options.include_usage`` a ``"choices":[]`` usage chunk, then ``data: [DONE]``.
``continuous_usage_stats`` adds usage to every chunk. With ``--reasoning-tokens N`` the first N
tokens of a chat answer stream as ``delta.reasoning`` (vLLM's field since 0.19; llama.cpp and older
vLLM write ``reasoning_content``: the client reads both), then the answer as ``delta.content``;
usage reports them in ``completion_tokens_details.reasoning_tokens``. ``--reasoning-stream hidden``
(or ``summary``: chat has none) writes none of them, as OpenAI's o-series: the first chunk is the
answer's, after the reasoning's time. ``--timings`` adds vLLM's per-request
``metrics`` (``--enable-per-request-metrics``) to the usage chunk: ``queue_time_ms`` (arrival ->
batch slot), ``time_to_first_token_ms`` (slot -> first token: prefill), ``generation_time_ms``
(first -> last token: decode), from the engine's own stamps. A chat request with ``tools`` is
answered with a tool call (``delta.tool_calls``, ``finish_reason: "tool_calls"``; after the
reasoning tokens, if any), one with ``response_format`` json_object/json_schema with JSON text
(:mod:`llm_users.sim.tools`). Errors are vLLM's
``{"error": {message, type, param, code=int status}}``.
"""

from __future__ import annotations

import time
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim import routes_responses
from llm_users.sim.base import Dialect, Job, Renderer, int_param
from llm_users.sim.images import openai_images
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.state import SIM_KEY, admit
from llm_users.sim.text import content_text, join_prompt
from llm_users.sim.tools import openai_shape

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class OpenAIDialect(Dialect):
    name = "openai"

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        return orjson.dumps(
            {"error": {"message": message, "type": kind or ERROR_TYPES.get(status, "Error"), "param": None,
                       "code": status}}
        )

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(503, "The server is overloaded: the request queue is full. Try again later.")

    def unauthorized(self) -> web.Response:
        return self.error(401, "Incorrect API key provided.")


DIALECT = OpenAIDialect()
DONE = b"data: [DONE]\n\n"


def _usage(p: int, c: int, r: int = 0, cached: int | None = None) -> bytes:
    details = b',"completion_tokens_details":{"reasoning_tokens":%d}' % r if r else b""
    if cached is not None:
        details += b',"prompt_tokens_details":{"cached_tokens":%d}' % cached
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%b}' % (p, p + c, c, details)


class _Base(Renderer):
    object_name = b""

    def __init__(self, job: Job, *, include_usage: bool, continuous: bool, timings: bool = False) -> None:
        super().__init__(job)
        self.timings = timings
        self.include_usage = include_usage
        self.continuous = continuous
        self.id = ("chatcmpl-" if job.route.endswith("chat/completions") else "cmpl-") + f"sim{job.seq:012x}"
        self.created = int(time.time())
        self.model_json = orjson.dumps(job.model)
        self.obj_head = b'{"id":"%b","object":"%b","created":%d,"model":%b,' % (
            self.id.encode(), self.object_name, self.created, self.model_json)
        self.p, self.c, self.r = job.reported()  # prompt, completion, reasoning tokens as usage says
        self.cached = None if job.cached_tokens is None else (0 if job.zero_input else job.cached_tokens)
        # The tail of a content chunk when it does not depend on the chunk: no usage, or usage whose
        # completion count is always 0 (--usage-zero); None: cumulative usage, built per chunk.
        self.cont_fixed: bytes | None = b"}\n\n"
        if continuous:
            self.cont_fixed = b',"usage":%b}\n\n' % _usage(self.p, 0) if job.zero_output else None

    def headers(self) -> dict[str, str]:
        return {"X-Request-Id": self.job.request_id or self.id}

    def _usage_frame(self) -> bytes:
        if not self.include_usage:
            return b""
        usage = _usage(self.p, self.c, self.r, self.cached)
        if self.timings:
            usage += b',"metrics":' + orjson.dumps(self._metrics())
        return b'data: %b"choices":[],"usage":%b}\n\n' % (self.obj_head, usage)

    def _metrics(self) -> dict[str, float | None]:
        """vLLM's per-request metrics from the engine's stamps, as the last chunk is written."""
        job = self.job
        now = perf_counter_ns()
        admitted = job.admitted_ns or job.arrival_ns
        first = job.first_ns or now  # a one-chunk answer: its only chunk is the first
        n = job.n
        return {
            "time_to_first_token_ms": round((first - admitted) / 1e6, 6),
            "generation_time_ms": round((now - first) / 1e6, 6),
            "queue_time_ms": round((admitted - job.arrival_ns) / 1e6, 6),
            "mean_itl_ms": round((now - first) / 1e6 / (n - 1), 6) if n > 1 else None,
            "tokens_per_second": round(n / ((now - admitted) / 1e9), 3) if now > admitted else None,
        }

    def _cont(self, j: int) -> bytes:
        fixed = self.cont_fixed
        if fixed is not None:
            return fixed
        return b',"usage":%b}\n\n' % _usage(self.p, j)

    def error_frame(self) -> bytes:
        err = DIALECT.error_body(500, "The simulator failed this request mid-stream (midstream_error fault)")
        return b"data: " + err + b"\n\n" + DONE

    def malformed(self) -> bytes:
        return b'data: {"id":"%b","object":\n\n' % self.id.encode()

    def finish_reason(self) -> str:
        return self.job.finish

    def usage_dict(self) -> dict[str, int]:
        p, c = self.p, self.c
        return {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}


class ChatRenderer(_Base):
    object_name = b"chat.completion.chunk"

    def __init__(self, job: Job, *, include_usage: bool, continuous: bool, timings: bool = False) -> None:
        super().__init__(job, include_usage=include_usage, continuous=continuous, timings=timings)
        self.pre = b'data: %b"choices":[{"index":0,"delta":{' % self.obj_head
        self.mid = b'"},"logprobs":null,"finish_reason":null}]'
        self.role = b'%b"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]' % self.pre
        # the first tokens are reasoning (the streamer cuts chunks there); chat completions have no
        # summary: OpenAI's hide it all (o-series), vLLM's stream it all
        job.show_reasoning(job.reasoning, {"summary": "hidden"})

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        words = self.job.words
        text = words[i] if j - i == 1 else b"".join(words[i:j])
        key = b'"reasoning":"' if i < self.job.thinking else b'"content":"'
        if not last:
            out = b'%b%b%b%b%b' % (self.pre, key, text, self.mid, self._cont(j))
        else:
            out = b'%b%b%b"},"logprobs":null,"finish_reason":"%b","stop_reason":null}]%b%b%b' % (
                self.pre, key, text, self.job.finish.encode(), self._cont(j), self._usage_frame(), DONE)
        if i == self.job.hidden:  # the first chunk written (hidden reasoning: the answer's first)
            return self.role + self._cont(i) + out
        return out

    def body(self) -> bytes:
        job = self.job
        return orjson.dumps({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": job.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": job.text(job.thinking).decode(), "tool_calls": [],
                            **({"reasoning": job.text(job.hidden, job.thinking).decode()}
                               if job.thinking > job.hidden else {})},
                "logprobs": None, "finish_reason": job.finish, "stop_reason": None,
            }],
            "usage": self.usage_dict(),
        })


class ToolCallRenderer(ChatRenderer):
    """A chat answer that is one tool call: the first chunk names the function (``id``, ``type``,
    ``name``, empty ``arguments``) with the role, each token chunk carries an ``arguments`` piece,
    the last ``finish_reason: "tool_calls"``, as OpenAI and vLLM stream one."""

    def __init__(self, job: Job, name: str, *, include_usage: bool, continuous: bool, timings: bool = False) -> None:
        super().__init__(job, include_usage=include_usage, continuous=continuous, timings=timings)
        call = b'{"index":0,"id":"call_sim%012x","type":"function","function":{"name":%b,"arguments":""}}' % (
            job.seq, orjson.dumps(name))
        self.call = b'%b"tool_calls":[%b]},"logprobs":null,"finish_reason":null}]' % (self.pre, call)
        self.role = b'%b"role":"assistant","content":null},"logprobs":null,"finish_reason":null}]' % self.pre
        self.args = b'%b"tool_calls":[{"index":0,"function":{"arguments":"' % self.pre

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        thinking = self.job.thinking
        if i < thinking:  # reasoning first, as any chat answer streams it
            return super().chunk(i, j, last)
        text = b"".join(self.job.words[i:j])
        if not last:
            out = b'%b%b"}}]},"logprobs":null,"finish_reason":null}]%b' % (self.args, text, self._cont(j))
        else:
            out = b'%b%b"}}]},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]%b%b%b' % (
                self.args, text, self._cont(j), self._usage_frame(), DONE)
        if i == thinking:  # the call's head (id, name) before its first arguments piece
            out = self.call + self._cont(thinking) + out
            if i == self.job.hidden:  # nothing streamed before it (no reasoning, or all of it hidden)
                out = self.role + self._cont(i) + out
        return out


class CompletionRenderer(_Base):
    object_name = b"text_completion"

    def __init__(self, job: Job, *, include_usage: bool, continuous: bool, timings: bool = False) -> None:
        super().__init__(job, include_usage=include_usage, continuous=continuous, timings=timings)
        self.pre = b'data: %b"choices":[{"index":0,"text":"' % self.obj_head

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        words = self.job.words
        text = words[i] if j - i == 1 else b"".join(words[i:j])
        if not last:
            return b'%b%b","logprobs":null,"finish_reason":null,"stop_reason":null}]%b' % (
                self.pre, text, self._cont(j))
        return b'%b%b","logprobs":null,"finish_reason":"%b","stop_reason":null}]%b%b%b' % (
            self.pre, text, self.job.finish.encode(), self._cont(j), self._usage_frame(), DONE)

    def body(self) -> bytes:
        job = self.job
        return orjson.dumps({
            "id": self.id, "object": "text_completion", "created": self.created, "model": job.model,
            "choices": [{"index": 0, "text": job.text().decode(), "logprobs": None, "finish_reason": job.finish,
                         "stop_reason": None, "prompt_logprobs": None}],
            "usage": self.usage_dict(),
        })


def _common(body: dict[str, Any], default_max: int, names: tuple[str, ...]) -> tuple[bool, bool, bool, int]:
    stream = bool(body.get("stream") or False)
    so = body.get("stream_options")
    if so is not None and not stream:
        raise ValueError("Stream options can only be defined when `stream=True`.")
    include_usage = bool(stream and isinstance(so, dict) and so.get("include_usage"))
    continuous = bool(include_usage and isinstance(so, dict) and so.get("continuous_usage_stats"))
    max_tokens = None
    for name in names:
        max_tokens = int_param(body.get(name), name)
        if max_tokens is not None:
            break
    for name in ("temperature", "top_p"):
        v = body.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            raise ValueError(f"{name} must be a non-negative number, got {v!r}")
    return stream, include_usage, continuous, max_tokens or default_max


async def chat_completions(request: web.Request) -> web.StreamResponse:
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return DIALECT.error(400, "messages: a non-empty list of messages is required")
    try:
        stream, include_usage, continuous, max_tokens = _common(
            body, 512, ("max_completion_tokens", "max_tokens"))
        images = openai_images(messages)
    except ValueError as e:
        return DIALECT.error(400, str(e))
    prompt = join_prompt([content_text(m.get("content")) for m in messages if isinstance(m, dict)])
    job = new_job(sim, protocol="openai", route="/v1/chat/completions", model=body.get("model") or sim.cfg.model,
                  prompt=prompt, max_tokens=max_tokens, stream=stream, arrival_ns=arrival, messages=len(messages),
                  images=images)
    shape = openai_shape(body)  # tools / response_format: a tool call or a JSON answer (sim/tools.py)
    if shape is not None and shape.tool is not None:
        render: ChatRenderer = ToolCallRenderer(job, shape.tool, include_usage=include_usage, continuous=continuous,
                                                timings=sim.cfg.timings)
    else:
        render = ChatRenderer(job, include_usage=include_usage, continuous=continuous, timings=sim.cfg.timings)
    if shape is not None:
        shape.apply(job, first=job.thinking)  # after the reasoning tokens (the renderer set them)
    return await serve(sim, request, job, render, DIALECT)


async def completions(request: web.Request) -> web.StreamResponse:
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    raw = body.get("prompt")
    input_tokens = None
    if isinstance(raw, str):
        prompt = raw
    elif isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        prompt = " ".join(map(str, raw))
        input_tokens = len(raw)
    elif isinstance(raw, list) and raw and all(isinstance(t, str) for t in raw):
        prompt = "\n".join(raw)
    else:
        return DIALECT.error(400, "prompt: a string, a list of strings or a list of token ids is required")
    try:
        stream, include_usage, continuous, max_tokens = _common(body, 16, ("max_tokens",))
    except ValueError as e:
        return DIALECT.error(400, str(e))
    job = new_job(sim, protocol="openai", route="/v1/completions", model=body.get("model") or sim.cfg.model,
                  prompt=prompt, max_tokens=max_tokens, stream=stream, arrival_ns=arrival, input_tokens=input_tokens)
    render = CompletionRenderer(job, include_usage=include_usage, continuous=continuous, timings=sim.cfg.timings)
    return await serve(sim, request, job, render, DIALECT)


async def models(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    if not sim.authorized(request):
        return DIALECT.unauthorized()
    created = int(time.time())
    name = sim.cfg.model
    return web.json_response({
        "object": "list",
        "data": [{"id": name, "object": "model", "created": created, "owned_by": "llm-sim", "root": name,
                  "parent": None, "max_model_len": 32768, "permission": []}],
    }, dumps=lambda o: orjson.dumps(o).decode())


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    routes_responses.add_routes(app)  # /v1/responses: the OpenAI and vLLM backends' ``responses`` route
