"""Hugging Face TGI routes: ``POST /generate_stream``, ``POST /generate``, ``POST /`` (streams
when the body says ``"stream": true``; huggingface_hub's ``InferenceClient(URL)`` posts there)
and ``GET /info``.

Frames are ``data:{...}`` with NO space after the colon, one per token (``--tokens-per-chunk K``
writes K frames at once), ``index`` counting from 1; the last frame carries
``generated_text`` and, with ``details: true``, ``details {finish_reason, generated_tokens,
input_length, seed}``. When the answer ends on its own (not by length) the last token is the
special ``</s>`` (``special: true``, not part of the text; it counts in ``generated_tokens``).
No [DONE].

Validation as TGI does it: a given ``temperature`` must be > 0 and a given ``top_p`` strictly
between 0 and 1. On the streaming routes validation and overload errors arrive as an SSE
payload ``{"error", "error_type"}`` on HTTP 200 (TGI's ``generate_stream_internal`` yields
them as events); the non-streaming routes answer 422 / 429. ``parameters.grammar`` of type
``json`` makes the answer JSON text (:mod:`llm_users.sim.tools`).
"""

from __future__ import annotations

from functools import cache
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, Job, Renderer, int_param
from llm_users.sim.images import markdown_images
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.state import SIM_KEY, admit
from llm_users.sim.text import vocabulary, vocabulary_bytes
from llm_users.sim.tools import tgi_shape

TOKEN_ID_BASE = 1000
EOS = b'{"id":2,"text":"</s>","logprob":-0.01,"special":true}'

ERROR_TYPES = {401: "authorization", 422: "validation", 424: "generation", 429: "overloaded",
               500: "incomplete_generation", 503: "unavailable", 400: "validation"}


class TGIDialect(Dialect):
    name = "tgi"

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        return orjson.dumps({"error": message, "error_type": kind or ERROR_TYPES.get(status, "error")})

    def error(
        self, status: int, message: str, kind: str | None = None, *, stream: bool = False, retry_after: int = 1
    ) -> web.Response:
        if stream and status in (422, 429):
            # TGI's /generate_stream reports validation and overload as an event on HTTP 200.
            return web.Response(status=200, body=b"data:" + self.error_body(status, message, kind) + b"\n\n",
                                content_type="text/event-stream")
        return super().error(status, message, kind, retry_after=retry_after)

    def fault(self, status: int, *, stream: bool = False, retry_after: int = 1) -> web.Response:
        messages = {429: "Model is overloaded", 500: "Incomplete generation", 503: "Service unavailable"}
        return super().error(status, messages.get(status, "error"), retry_after=retry_after)

    def overloaded(self, *, stream: bool = False) -> web.Response:
        return self.error(429, "Model is overloaded", "overloaded", stream=stream)

    def unauthorized(self) -> web.Response:
        return super().error(401, "Unauthorized", "authorization")


DIALECT = TGIDialect()


@cache
def token_frames() -> tuple[bytes, ...]:
    """The ``token`` object of every vocabulary word, prebuilt."""
    return tuple(
        b'{"id":%d,"text":"%b","logprob":%s,"special":false}'
        % (TOKEN_ID_BASE + i, w.encode(), repr(-round(0.05 + (i % 37) / 40, 4)).encode())
        for i, w in enumerate(vocabulary())
    )


class TGIRenderer(Renderer):
    content_type = "text/event-stream"

    def __init__(self, job: Job, *, details: bool, seed: int | None, as_list: bool = False) -> None:
        super().__init__(job)
        self.details = details
        self.seed = seed
        self.as_list = as_list  # POST / answers [GenerateResponse], like the Inference API
        self.eos = job.finish == "stop"
        frames = token_frames()
        self.frames = [frames[i] for i in job.indices]
        self.p, self.c, _ = job.reported()  # input_length and generated_tokens as the answer says

    def retext(self) -> None:
        """The job's words were rewritten (a JSON answer): the token frames follow them."""
        job = self.job
        for t, word in enumerate(job.words):
            if word != vocabulary_bytes()[job.indices[t]]:
                frame = orjson.loads(self.frames[t])
                frame["text"] = job.text(t, t + 1).decode()
                self.frames[t] = orjson.dumps(frame)

    def _text(self) -> bytes:
        job = self.job
        return job.text(0, job.n - 1 if self.eos else job.n)

    def _finish_reason(self) -> str:
        return "eos_token" if self.eos else "length"

    def _details(self) -> bytes:
        if not self.details:
            return b"null"
        return orjson.dumps({"finish_reason": self._finish_reason(), "generated_tokens": self.c,
                             "input_length": self.p, "seed": self.seed})

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        frames = self.frames
        out = []
        end = j - 1 if last else j
        for t in range(i, end):
            out.append(b'data:{"index":%d,"token":%b,"generated_text":null,"details":null}\n\n' % (t + 1, frames[t]))
        if last:
            tok = EOS if self.eos else frames[j - 1]
            out.append(b'data:{"index":%d,"token":%b,"generated_text":%b,"details":%b}\n\n'
                       % (j, tok, orjson.dumps(self._text().decode()), self._details()))
        return out[0] if len(out) == 1 else b"".join(out)

    def error_frame(self) -> bytes:
        return b'data:{"error":"Request failed during generation: simulated midstream_error fault",' \
               b'"error_type":"generation"}\n\n'

    def malformed(self) -> bytes:
        return b'data:{"index":0,"token":\n\n'

    def body(self) -> bytes:
        out: dict[str, Any] = {"generated_text": self._text().decode()}
        if self.details:
            tokens = [orjson.Fragment(f) for f in self.frames]
            if self.eos:
                tokens[-1] = orjson.Fragment(EOS)
            out["details"] = {"finish_reason": self._finish_reason(), "generated_tokens": self.c, "seed": self.seed,
                              "prefill": [], "tokens": tokens}
        return orjson.dumps([out] if self.as_list else out)

    def headers(self) -> dict[str, str]:
        job = self.job
        h = {"x-compute-type": "sim", "x-compute-characters": str(len(job.prompt))}
        if job.stream:
            h["X-Accel-Buffering"] = "no"
            return h
        # Non-streaming answers carry TGI's timing headers (milliseconds), computed at the end.
        now = perf_counter_ns()
        admitted = job.admitted_ns or job.arrival_ns
        inference = now - admitted
        h.update({
            "x-compute-time": repr(round((now - job.arrival_ns) / 1e9, 6)),
            "x-total-time": str((now - job.arrival_ns) // 1_000_000),
            "x-validation-time": "0",
            "x-queue-time": str((admitted - job.arrival_ns) // 1_000_000),
            "x-inference-time": str(inference // 1_000_000),
            "x-time-per-token": str(inference // max(1, job.n) // 1_000_000),
            "x-prompt-tokens": str(self.p),
            "x-generated-tokens": str(self.c),
        })
        return h


def _validate(params: dict[str, Any]) -> tuple[int, bool, int | None]:
    temperature = params.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or temperature <= 0):
        raise ValueError("Input validation error: `temperature` must be strictly positive")
    top_p = params.get("top_p")
    if top_p is not None and (not isinstance(top_p, int | float) or not 0 < top_p < 1):
        raise ValueError("Input validation error: `top_p` must be > 0.0 and < 1.0")
    try:
        max_new = int_param(params.get("max_new_tokens"), "max_new_tokens")
    except ValueError as e:
        raise ValueError(f"Input validation error: {e}") from None
    seed = params.get("seed")
    return max_new or 512, bool(params.get("details", False)), seed if isinstance(seed, int) else None


async def _generate(request: web.Request, *, stream: bool | None, route: str) -> web.StreamResponse:
    compat = stream is None
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    if stream is None:
        stream = bool(body.get("stream", False))
    inputs = body.get("inputs")
    if not isinstance(inputs, str):
        return DIALECT.error(422, "Failed to deserialize the JSON body: `inputs` must be a string", stream=stream)
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        return DIALECT.error(422, "Failed to deserialize the JSON body: `parameters` must be an object",
                             stream=stream)
    try:
        max_new, details, seed = _validate(params)
    except ValueError as e:
        return DIALECT.error(422, str(e), "validation", stream=stream)
    try:
        inputs, images = markdown_images(inputs)
    except ValueError as e:
        return DIALECT.error(422, f"Input validation error: {e}", "validation", stream=stream)
    job = new_job(sim, protocol="tgi", route=route, model=sim.cfg.model, prompt=inputs, max_tokens=max_new,
                  stream=stream, arrival_ns=arrival, images=images)
    render = TGIRenderer(job, details=details, seed=seed, as_list=compat and not stream)
    shape = tgi_shape(params)  # parameters.grammar json: a JSON answer (sim/tools.py)
    if shape is not None:
        shape.apply(job, last=job.n - 2 if render.eos else None)  # EOS is the last token, not text
        render.retext()
    return await serve(sim, request, job, render, DIALECT)


async def generate_stream(request: web.Request) -> web.StreamResponse:
    return await _generate(request, stream=True, route="/generate_stream")


async def generate(request: web.Request) -> web.StreamResponse:
    return await _generate(request, stream=False, route="/generate")


async def compat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, stream=None, route="/")


async def info(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    return web.json_response({
        "model_id": sim.cfg.model,
        "model_sha": None,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": sim.cfg.max_batch + (sim.cfg.max_queue or 0),
        "max_best_of": 2,
        "max_stop_sequences": 4,
        "max_input_tokens": 8191,
        "max_total_tokens": 8192,
        "validation_workers": 2,
        "max_client_batch_size": 4,
        "router": "text-generation-router",
        "version": "3.3.6-sim",
        "sha": None,
        "docker_label": None,
    })


def add_routes(app: web.Application) -> None:
    app.router.add_post("/generate_stream", generate_stream)
    app.router.add_post("/generate", generate)
    app.router.add_post("/", compat)
    app.router.add_get("/info", info)
