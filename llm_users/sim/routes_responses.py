"""OpenAI Responses API: ``POST /v1/responses`` (streaming or not), added by
:mod:`llm_users.sim.routes_openai` beside chat and completions.

A stream is OpenAI's event sequence, each frame with an ``event:`` line equal to its payload's
``type`` and a ``sequence_number`` counting from 0: ``response.created``, ``response.in_progress``,
then per output item ``response.output_item.added`` and ``response.content_part.added``, one
delta per chunk, ``*.done`` for the text, the part and the item, and at the end
``response.completed`` (``response.incomplete`` with ``incomplete_details.reason:
"max_output_tokens"`` when the answer stopped at the maximum, as OpenAI does) with the whole
response and its ``usage`` (``input_tokens``, ``output_tokens``, ``output_tokens_details.
reasoning_tokens``, ``input_tokens_details.cached_tokens``). No ``[DONE]``. Deltas carry
``item_id``, ``output_index`` and ``content_index``.

With ``--reasoning-tokens N`` the first N tokens of the answer are a ``reasoning`` item
(output_index 0, ``response.reasoning_text.delta``), the text a ``message`` item after it.
``--reasoning-stream summary`` streams only the last quarter of them, as a summary part
(``response.reasoning_summary_part.added``, ``response.reasoning_summary_text.delta`` with
``summary_index``, the item's ``summary``); ``hidden`` none: the item (``summary: []``) ends as
the answer's first chunk comes, as OpenAI's o-series without a summary asked for.

A request with function ``tools`` (and a ``tool_choice`` that allows a call) is answered with a
``function_call`` item instead of the message: ``response.output_item.added`` (``name``,
``call_id``, empty ``arguments``), the arguments JSON streamed as
``response.function_call_arguments.delta`` over the answer's tokens, then
``response.function_call_arguments.done`` and ``response.output_item.done``; ``text.format``
``json_object`` / ``json_schema`` makes the message's text JSON (:mod:`llm_users.sim.tools`).

Multi-turn by ``previous_response_id``: every response is kept (``store`` not false; the last
:data:`STORE_LIMIT`, oldest dropped) as its conversation so far (the prompt and the answer's
text), so a chained request is the same prompt, the same input tokens and the same answer as
the request that sends the whole history. An unknown id is OpenAI's 400
``previous_response_not_found``. ``GET /_sim/responses`` says how many responses are kept and
how many requests named a previous one (``{"stored", "chained"}``).

Faults as every route: a mid-stream error is ``response.failed`` with ``error.code
"server_error"``; errors are OpenAI's ``{"error": {message, type, param, code}}``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, Job, Renderer, int_param
from llm_users.sim.images import responses_images
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.state import admit
from llm_users.sim.text import content_text, join_prompt
from llm_users.sim.tools import responses_shape

ROUTE = "/v1/responses"
STORE_LIMIT = 10_000
ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
               429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}


class ResponsesDialect(Dialect):
    name = "openai-responses"

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": kind or ERROR_TYPES.get(status, "server_error"),
                                       "param": None, "code": None}})

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(503, "The server is overloaded: the request queue is full. Try again later.")

    def unauthorized(self) -> web.Response:
        return self.error(401, "Incorrect API key provided.")


DIALECT = ResponsesDialect()


class ResponseStore:
    """The conversations responses ended (id -> (prompt with the answer, message count)), LRU."""

    def __init__(self, limit: int = STORE_LIMIT) -> None:
        self.limit = limit
        self._items: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self.chained = 0  # requests that named a kept previous response

    def put(self, rid: str, conversation: str, messages: int) -> None:
        self._items[rid] = (conversation, messages)
        if len(self._items) > self.limit:
            self._items.popitem(last=False)

    def get(self, rid: str) -> tuple[str, int] | None:
        return self._items.get(rid)

    def __len__(self) -> int:
        return len(self._items)


STORE_KEY = web.AppKey("llm_sim_responses", ResponseStore)


def _event(kind: bytes, payload: bytes) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (kind, payload)


class ResponsesRenderer(Renderer):
    def __init__(self, job: Job, *, request: dict[str, Any], store: ResponseStore | None,
                 tool: str | None = None) -> None:
        super().__init__(job)
        self.request = request  # what the response object echoes (temperature, previous id...)
        self.store = store
        self.tool = tool  # the answer is a call of this function (a function_call item), not a message
        seq = job.seq
        self.id = f"resp_sim{seq:016x}"
        self.msg_id = f"{'fc' if tool else 'msg'}_sim{seq:016x}"
        self.call_id = f"call_sim{seq:016x}"
        self.rs_id = f"rs_sim{seq:016x}"
        self.created = int(time.time())
        self.seq = 0  # the next event's sequence_number
        job.show_reasoning(min(job.reasoning, job.n))  # reasoning tokens (the streamer cuts there), hidden ones
        self.t, self.h = job.thinking, job.hidden
        self.p, self.c, self.r = job.reported()
        self.cached = 0 if job.cached_tokens is None or job.zero_input else job.cached_tokens
        self.msg_index = 1 if self.t else 0
        self.msg_started = False

    def headers(self) -> dict[str, str]:
        return {"x-request-id": self.job.request_id or f"req_sim{self.job.seq:016x}"}

    # events -----------------------------------------------------------------------------------
    def _ev(self, kind: str, fields: dict[str, Any]) -> bytes:
        payload = orjson.dumps({"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1
        return _event(kind.encode(), payload)

    def _delta(self, kind: bytes, item_id: str, index: int, text: bytes, logprobs: bool) -> bytes:
        tail = b',"logprobs":[]}' if logprobs else b"}"
        out = b'event: %b\ndata: {"type":"%b","sequence_number":%d,"item_id":"%b","output_index":%d,' \
              b'"content_index":0,"delta":"%b"%b\n\n' % (kind, kind, self.seq, item_id.encode(), index, text, tail)
        self.seq += 1
        return out

    def _reasoning_delta(self, text: bytes) -> bytes:
        if self.job.shown != "summary":
            return self._delta(b"response.reasoning_text.delta", self.rs_id, 0, text, False)
        out = b'event: response.reasoning_summary_text.delta\ndata: {"type":"response.reasoning_summary_text.delta",' \
              b'"sequence_number":%d,"item_id":"%b","output_index":0,"summary_index":0,"delta":"%b"}\n\n' % (
                  self.seq, self.rs_id.encode(), text)
        self.seq += 1
        return out

    def response(self, status: str, output: list[dict[str, Any]], *, usage: bool = False,
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        job, req = self.job, self.request
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "background": False,
            "error": error, "incomplete_details": incomplete, "instructions": req.get("instructions"),
            "max_output_tokens": job.max_tokens, "model": job.model, "output": output,
            "parallel_tool_calls": True, "previous_response_id": req.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None}, "store": req.get("store", True) is not False,
            "temperature": req.get("temperature", 1.0), "text": req.get("text") or {"format": {"type": "text"}},
            "tool_choice": req.get("tool_choice") or "auto", "tools": req.get("tools") or [], "top_p": req.get("top_p", 1.0), "truncation": "disabled",
            "usage": self.usage() if usage else None, "user": None, "metadata": {},
        }

    def usage(self) -> dict[str, Any]:
        p, c = self.p, self.c
        return {"input_tokens": p, "input_tokens_details": {"cached_tokens": self.cached, "cache_write_tokens": 0},
                "output_tokens": c,
                "output_tokens_details": {"reasoning_tokens": self.r}, "total_tokens": p + c}

    def _reasoning_item(self, done: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self.rs_id, "type": "reasoning", "summary": []}
        if done:
            shown = self.job.shown
            if shown == "full":
                item["content"] = [{"type": "reasoning_text", "text": self.job.text(0, self.t).decode()}]
            elif shown == "summary":
                item["summary"] = [self._summary_part()]
            item["status"] = "completed"
        return item

    def _summary_part(self) -> dict[str, Any]:
        return {"type": "summary_text", "text": self.job.text(self.h, self.t).decode()}

    def _text_part(self, done: bool) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [],
                "text": self.job.text(self.t).decode() if done else ""}

    def _message_item(self, done: bool) -> dict[str, Any]:
        status = ("incomplete" if self.job.finish == "length" else "completed") if done else "in_progress"
        if self.tool:
            return {"id": self.msg_id, "type": "function_call", "status": status, "call_id": self.call_id,
                    "name": self.tool, "arguments": self.job.text(self.t).decode() if done else ""}
        return {"id": self.msg_id, "type": "message", "status": status, "role": "assistant",
                "content": [self._text_part(True)] if done else []}

    def _output(self) -> list[dict[str, Any]]:
        return ([self._reasoning_item(True)] if self.t else []) + [self._message_item(True)]

    def _start_message(self) -> bytes:
        self.msg_started = True
        i = self.msg_index
        if self.tool:
            return self._ev("response.output_item.added", {"output_index": i, "item": self._message_item(False)})
        return (self._ev("response.output_item.added", {"output_index": i, "item": self._message_item(False)})
                + self._ev("response.content_part.added", {"item_id": self.msg_id, "output_index": i,
                                                           "content_index": 0, "part": self._text_part(False)}))

    def _end_reasoning(self) -> bytes:
        shown = self.job.shown
        out = b""
        if shown == "summary":
            part = self._summary_part()
            where = {"item_id": self.rs_id, "output_index": 0, "summary_index": 0}
            out = (self._ev("response.reasoning_summary_text.done", {**where, "text": part["text"]})
                   + self._ev("response.reasoning_summary_part.done", {**where, "part": part}))
        elif shown == "full":
            text = self.job.text(0, self.t).decode()
            where = {"item_id": self.rs_id, "output_index": 0, "content_index": 0}
            out = (self._ev("response.reasoning_text.done", {**where, "text": text})
                   + self._ev("response.content_part.done",
                              {**where, "part": {"type": "reasoning_text", "text": text}}))
        return out + self._ev("response.output_item.done", {"output_index": 0, "item": self._reasoning_item(True)})

    def head(self) -> bytes:
        out = (self._ev("response.created", {"response": self.response("in_progress", [])})
               + self._ev("response.in_progress", {"response": self.response("in_progress", [])}))
        if self.t:
            out += self._ev("response.output_item.added", {"output_index": 0, "item": self._reasoning_item(False)})
            shown = self.job.shown
            if shown == "summary":
                out += self._ev("response.reasoning_summary_part.added", {
                    "item_id": self.rs_id, "output_index": 0, "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""}})
            elif shown == "full":
                out += self._ev("response.content_part.added", {"item_id": self.rs_id, "output_index": 0,
                                                                "content_index": 0,
                                                                "part": {"type": "reasoning_text", "text": ""}})
        else:
            out += self._start_message()
        return out

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        words = self.job.words
        t = self.t
        out = b""
        if i < t:
            e = min(j, t)
            out = self._reasoning_delta(b"".join(words[i:e]))
            if e == t:
                out += self._end_reasoning() + self._start_message()
            i = e
        elif t and not self.msg_started:  # all of the reasoning hidden: its item ends as the answer starts
            out = self._end_reasoning() + self._start_message()
        if i < j:
            text = words[i] if j - i == 1 else b"".join(words[i:j])
            if self.tool:
                out += b'event: response.function_call_arguments.delta\ndata: {"type":' \
                       b'"response.function_call_arguments.delta","sequence_number":%d,"item_id":"%b",' \
                       b'"output_index":%d,"delta":"%b"}\n\n' % (self.seq, self.msg_id.encode(), self.msg_index, text)
                self.seq += 1
            else:
                out += self._delta(b"response.output_text.delta", self.msg_id, self.msg_index, text, True)
        if last:
            out += self._finish()
        return out

    def _finish(self) -> bytes:
        job = self.job
        out = b"" if self.msg_started else self._start_message()
        text = job.text(self.t).decode()
        if self.tool:
            out += self._ev("response.function_call_arguments.done", {
                "item_id": self.msg_id, "output_index": self.msg_index, "name": self.tool, "arguments": text})
        else:
            where = {"item_id": self.msg_id, "output_index": self.msg_index, "content_index": 0}
            out += self._ev("response.output_text.done", {**where, "text": text, "logprobs": []})
            out += self._ev("response.content_part.done", {**where, "part": self._text_part(True)})
        out += self._ev("response.output_item.done", {"output_index": self.msg_index,
                                                      "item": self._message_item(True)})
        status = "incomplete" if job.finish == "length" else "completed"
        out += self._ev(f"response.{status}", {"response": self.response(status, self._output(), usage=True)})
        self._remember()
        return out

    def _remember(self) -> None:
        if self.store is not None:
            job = self.job
            self.store.put(self.id, join_prompt([job.prompt, job.text(self.t).decode()]), job.messages + 1)

    def error_frame(self) -> bytes:
        error = {"code": "server_error", "message": "The simulator failed this request mid-stream "
                                                    "(midstream_error fault)"}
        return self._ev("response.failed", {"response": self.response("failed", [], error=error)})

    def malformed(self) -> bytes:
        return b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":\n\n'

    def body(self) -> bytes:
        status = "incomplete" if self.job.finish == "length" else "completed"
        self._remember()
        return orjson.dumps(self.response(status, self._output(), usage=True))


def _input_pieces(body: dict[str, Any]) -> tuple[list[str], int] | str:
    """The text pieces of ``instructions`` and ``input`` and how many messages they are, or a
    400 message."""
    raw = body.get("input")
    pieces = [content_text(body.get("instructions"))]
    if isinstance(raw, str) and raw:
        return [*pieces, raw], 1
    if not isinstance(raw, list) or not raw:
        return "input: a string or a non-empty list of input items is required"
    for item in raw:
        if not isinstance(item, dict):
            return "input: every input item must be an object"
        pieces.append(content_text(item.get("content") if "content" in item else item.get("output")))
    return pieces, len(raw)


async def responses(request: web.Request) -> web.StreamResponse:
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    parsed = _input_pieces(body)
    if isinstance(parsed, str):
        return DIALECT.error(400, parsed)
    pieces, messages = parsed
    try:
        max_tokens = int_param(body.get("max_output_tokens"), "max_output_tokens") or 512
        images = responses_images(body.get("input"))
    except ValueError as e:
        return DIALECT.error(400, str(e))
    for name in ("temperature", "top_p"):
        v = body.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            return DIALECT.error(400, f"{name} must be a non-negative number, got {v!r}")
    store = request.app[STORE_KEY]
    previous = body.get("previous_response_id")
    if previous is not None:
        earlier = store.get(str(previous))
        if earlier is None:
            return web.Response(status=400, content_type="application/json", body=orjson.dumps({"error": {
                "message": f"Previous response with id '{previous}' not found.", "type": "invalid_request_error",
                "param": "previous_response_id", "code": "previous_response_not_found"}}))
        store.chained += 1
        pieces = [earlier[0], *pieces]
        messages += earlier[1]
    job = new_job(sim, protocol="responses", route=ROUTE, model=str(body.get("model") or sim.cfg.model),
                  prompt=join_prompt(pieces), max_tokens=max_tokens, stream=bool(body.get("stream") or False),
                  arrival_ns=arrival, messages=messages, images=images)
    shape = responses_shape(body)  # tools / text.format: a function call or a JSON answer (sim/tools.py)
    render = ResponsesRenderer(job, request=body, store=None if body.get("store") is False else store,
                               tool=shape.tool if shape is not None else None)
    if shape is not None:
        shape.apply(job, first=job.thinking)  # after the reasoning tokens (the renderer set them)
    return await serve(sim, request, job, render, DIALECT)


async def kept(request: web.Request) -> web.Response:
    store = request.app[STORE_KEY]
    return web.json_response({"stored": len(store), "chained": store.chained})


def add_routes(app: web.Application) -> None:
    app[STORE_KEY] = ResponseStore()
    app.router.add_post(ROUTE, responses)
    app.router.add_get("/_sim/responses", kept)
