"""Anthropic Messages: ``POST /v1/messages`` (streaming or not).

Every frame has an ``event:`` line equal to its payload's ``type`` (the SDK drops frames
without one). Order: ``message_start`` (usage.input_tokens, output_tokens 1),
``content_block_start``, ``ping`` (all three right after the response head), then per chunk a
``content_block_delta`` (``text_delta``), then ``content_block_stop``, ``message_delta``
(``stop_reason`` ``max_tokens`` or ``end_turn``, cumulative ``usage.output_tokens``) and
``message_stop``. No [DONE].

When the request asks for thinking (``thinking: {"type": "enabled"|"adaptive", ...}``) the
first quarter of the answer's tokens (at least one, at most ``budget_tokens``) arrive as
``thinking_delta`` in block 0, closed by a ``signature_delta``; the text follows in block 1.
The thinking words are the first tokens of the deterministic sequence, the text the rest.
With ``--reasoning-tokens N`` (N > 0) the first N tokens are thinking, whether or not the request
asked for it, and ``message_delta``'s usage says so (``output_tokens_details.thinking_tokens``).
``--reasoning-stream summary`` (or ``hidden``: Claude 4 always shows a summary) streams only the
last quarter of them as the thinking block's text, as Claude's summarised thinking: the rest
are decoded on the clock, unwritten, and counted.
Accepts ``x-api-key`` or ``Authorization: Bearer`` and any ``anthropic-version``. Errors are
``{"type":"error","error":{"type","message"}}``; a full queue is 529 ``overloaded_error``;
mid-stream an ``event: error`` frame. A request with ``tools`` (``tool_choice`` not ``none``) is
answered with a ``tool_use`` block whose ``input_json_delta`` pieces stream the arguments
(:mod:`llm_users.sim.tools`), ``stop_reason: "tool_use"``.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, Job, Renderer, int_param
from llm_users.sim.images import anthropic_images
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.state import admit
from llm_users.sim.text import content_text, join_prompt
from llm_users.sim.tools import anthropic_shape

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


class AnthropicDialect(Dialect):
    name = "anthropic"

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": kind or ERROR_TYPES.get(status, "api_error"),
                                                        "message": message}})

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(529, "Overloaded", "overloaded_error")

    def unauthorized(self) -> web.Response:
        return self.error(401, "invalid x-api-key", "authentication_error")


DIALECT = AnthropicDialect()


def _event(name: bytes, payload: bytes) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (name, payload)


class AnthropicRenderer(Renderer):
    def __init__(self, job: Job, *, thinking_budget: int | None) -> None:
        super().__init__(job)
        self.id = f"msg_sim{job.seq:016x}"
        t = job.reasoning
        if not t and thinking_budget is not None and job.n >= 2:
            t = min(max(1, job.n // 4), thinking_budget)
        job.show_reasoning(t, {"hidden": "summary"})  # Claude 4 summarises its thinking: never none of it
        self.t = t  # thinking tokens (the streamer cuts chunks there; job.hidden of them never written)
        self.p, self.c, self.r = job.reported()  # input, output, thinking tokens as usage says
        self.text_index = 1 if t else 0
        self.tool: str | None = None  # use_tool: the answer is a call of this tool
        self.text_delta = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,' \
                          b'"delta":{"type":"text_delta","text":"' % self.text_index
        self.think_delta = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,' \
                           b'"delta":{"type":"thinking_delta","thinking":"'

    def use_tool(self, name: str) -> None:
        """The answer (after any thinking) is a ``tool_use`` block: ``input_json_delta`` pieces,
        ``stop_reason: "tool_use"``."""
        self.tool = name
        self.text_delta = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,' \
                          b'"delta":{"type":"input_json_delta","partial_json":"' % self.text_index

    def headers(self) -> dict[str, str]:
        return {"request-id": f"req_sim{self.job.seq:016x}", "Cache-Control": "no-cache"}

    def _start_block(self, index: int, thinking: bool) -> bytes:
        block = b'{"type":"thinking","thinking":"","signature":""}' if thinking else b'{"type":"text","text":""}'
        if not thinking and self.tool is not None:
            block = b'{"type":"tool_use","id":"toolu_sim%016x","name":%b,"input":{}}' % (
                self.job.seq, orjson.dumps(self.tool))
        return _event(b"content_block_start",
                      b'{"type":"content_block_start","index":%d,"content_block":%b}' % (index, block))

    def head(self) -> bytes:
        job = self.job
        message = orjson.dumps({
            "type": "message_start",
            "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": job.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": self.p, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "output_tokens": 0 if job.zero_output else 1},
            },
        })
        return (_event(b"message_start", message) + self._start_block(0, bool(self.t))
                + _event(b"ping", b'{"type":"ping"}'))

    def stop_reason(self) -> str:
        if self.tool is not None:
            return "tool_use"
        return "max_tokens" if self.job.finish == "length" else "end_turn"

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        words = self.job.words
        t = self.t
        out = b""
        if i < t:
            e = min(j, t)
            out = b'%b%b"}}\n\n' % (self.think_delta, b"".join(words[i:e]))
            if e == t:
                out += _event(b"content_block_delta",
                              b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta",'
                              b'"signature":"c2ltdWxhdGVk"}}')
                out += _event(b"content_block_stop", b'{"type":"content_block_stop","index":0}')
                out += self._start_block(1, False)
            i = e
        if i < j:
            text = words[i] if j - i == 1 else b"".join(words[i:j])
            out += b'%b%b"}}\n\n' % (self.text_delta, text)
        if last:
            out += _event(b"content_block_stop", b'{"type":"content_block_stop","index":%d}' % self.text_index)
            out += _event(b"message_delta", b'{"type":"message_delta","delta":{"stop_reason":"%b",'
                          b'"stop_sequence":null},"usage":{"input_tokens":%d,"output_tokens":%d%b}}'
                          % (self.stop_reason().encode(), self.p, self.c,
                             b',"output_tokens_details":{"thinking_tokens":%d}' % self.r
                             if self.r else b""))
            out += _event(b"message_stop", b'{"type":"message_stop"}')
        return out

    def error_frame(self) -> bytes:
        return _event(b"error", DIALECT.error_body(529, "Overloaded", "overloaded_error"))

    def malformed(self) -> bytes:
        return b'event: content_block_delta\ndata: {"type":"content_block_delta","index":\n\n'

    def body(self) -> bytes:
        job = self.job
        content: list[dict[str, Any]] = []
        if self.t:
            content.append({"type": "thinking", "thinking": job.text(job.hidden, self.t).decode(),
                            "signature": "c2ltdWxhdGVk"})
        content.append({"type": "text", "text": job.text(self.t).decode()})
        return orjson.dumps({
            "id": self.id, "type": "message", "role": "assistant", "model": job.model, "content": content,
            "stop_reason": self.stop_reason(), "stop_sequence": None,
            "usage": {"input_tokens": self.p, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": self.c},
        })


def _thinking_budget(body: dict[str, Any], max_tokens: int) -> int | None:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    budget = thinking.get("budget_tokens")
    return budget if isinstance(budget, int) and budget > 0 else max_tokens


async def messages(request: web.Request) -> web.StreamResponse:
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return DIALECT.error(400, "messages: Field required")
    if body.get("max_tokens") is None:
        return DIALECT.error(400, "max_tokens: Field required")
    try:
        max_tokens = int_param(body.get("max_tokens"), "max_tokens")
    except ValueError as e:
        return DIALECT.error(400, str(e))
    assert max_tokens is not None
    model = body.get("model")
    if not model:
        return DIALECT.error(400, "model: Field required")
    try:
        images = anthropic_images(msgs)
    except ValueError as e:
        return DIALECT.error(400, str(e))
    pieces = [content_text(body.get("system"))]
    pieces += [content_text(m.get("content")) for m in msgs if isinstance(m, dict)]
    job = new_job(sim, protocol="anthropic", route="/v1/messages", model=str(model), prompt=join_prompt(pieces),
                  max_tokens=max_tokens, stream=bool(body.get("stream", False)), arrival_ns=arrival,
                  messages=len(msgs) + (1 if pieces[0] else 0), images=images)
    render = AnthropicRenderer(job, thinking_budget=_thinking_budget(body, max_tokens))
    shape = anthropic_shape(body)  # tools: a tool_use block (sim/tools.py)
    if shape is not None and shape.tool is not None:
        shape.apply(job, first=render.t)
        render.use_tool(shape.tool)
    return await serve(sim, request, job, render, DIALECT)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/messages", messages)
