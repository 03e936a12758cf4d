"""Embeddings and rerank routes, every dialect's, with their own capacity model.

Routes: ``POST /v1/embeddings`` (OpenAI, vLLM), ``/v1/rerank``, ``/v2/rerank`` (vLLM) and
``/rerank`` (vLLM's ``{query, documents}`` or TEI's ``{query, texts}``, told apart by the body),
``/api/embed`` (Ollama), ``/embed`` (TEI), and Gemini's ``:embedContent`` and
``:batchEmbedContents`` (served through :mod:`.routes_gemini`'s model action). Answers have the
real servers' shapes (docs in :mod:`llm_users.protocols.embed`), vectors of ``--embed-dim``
numbers (the same deterministic vector for every input), usage where the real API gives it.

The cost model (docs/simulator.md, "Embeddings and rerank"): a request holds one of
``--embed-max-batch`` slots (a FIFO queue in front, apart from the chat engine) for
``--embed-base-ms + --embed-token-ms x T`` ms, T being the input tokens of the whole batch (one
token per word; a rerank pair counts query + document). Timed from arrival when a slot is free,
from admission when it waited, as the chat engine. So N closed-loop users with C slots and
batches of T tokens run at ``min(N, C) / S`` requests/s, S = base + per-token x T.
``X-Sim-Fault`` (or ``--fault-rate`` with ``--fault-kinds``) http_429/500/503, ``malformed`` (a cut
JSON body) and ``empty_200`` apply, the other kinds are about streams;
``X-Sim-Vectors: N`` answers N vectors or scores whatever the batch (a wrong count);
``--usage-zero input|both`` reports 0 input tokens where the answer has a count.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from functools import cache
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, read_json
from llm_users.sim.engine import QueueFull
from llm_users.sim.faults import FaultHeaderError, draw_fault, parse_fault_header
from llm_users.sim.routes_ollama import DIALECT as OLLAMA
from llm_users.sim.routes_openai import DIALECT as OPENAI
from llm_users.sim.routes_tgi import DIALECT as TEI  # TEI answers errors as TGI does: {error, error_type}
from llm_users.sim.state import SIM_KEY, SimState
from llm_users.sim.text import content_text, count_input_tokens
from llm_users.sim.timing import request_rng

#: the fault kinds a whole JSON answer can have (the others are about streams)
EMBED_FAULTS = ("http_429", "http_500", "http_503", "malformed", "empty_200")

#: ``(texts, tokens, n results, model) -> body``: one dialect's answer
Answer = Callable[[list[str], int, int, str], bytes]


@cache
def vector(dim: int, seed: int) -> bytes:
    """One unit-ish vector of ``dim`` short numbers, as JSON (the same for every input)."""
    values = [((zlib.crc32(f"{seed}:{i}".encode()) % 2001) - 1000) / 16000 for i in range(dim)]
    return orjson.dumps([round(v, 5) for v in values])


def _score(text: str) -> float:
    return round((zlib.crc32(text.encode()) % 10000) / 10000, 4)


def _texts(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


async def _serve(request: web.Request, dialect: Dialect, route: str, texts: list[str], tokens: int, model: str,
                 answer: Answer, arrival: int) -> web.Response:
    sim: SimState = request.app[SIM_KEY]
    stats = sim.stats
    rs = stats.route(route)
    stats.started += 1
    rs.started += 1
    n = len(texts)
    forced = request.headers.get("X-Sim-Vectors")
    if forced is not None and forced.strip().isdigit():
        n = int(forced)
    header = request.headers.get("X-Sim-Fault")
    fault = None
    if header:
        try:
            fault = parse_fault_header(header)
        except FaultHeaderError as e:
            return _refused(sim, rs, dialect.error(400, str(e)))
    elif sim.cfg.fault_rate > 0:  # --fault-rate: the kinds of --fault-kinds a JSON answer can have
        kinds = tuple(k for k in sim.cfg.fault_kinds if k in EMBED_FAULTS)
        fault = draw_fault(request_rng(sim.cfg.seed, sim.next_seq(), "fault"), sim.cfg.fault_rate, kinds, 1)
    if fault is not None:
        stats.faults[fault.kind] = stats.faults.get(fault.kind, 0) + 1
        if fault.http_status is not None:
            return _refused(sim, rs, dialect.fault(fault.http_status, retry_after=sim.cfg.retry_after_s))
    engine = sim.embed_engine
    try:
        waiter = engine.try_acquire()
    except QueueFull:
        stats.rejected += 1
        return _refused(sim, rs, dialect.overloaded())
    stats.active += 1
    try:
        if waiter is not None:
            await waiter
        start = perf_counter_ns() if waiter is not None else arrival
        stats.prompt_tokens += tokens
        stats.queue.observe((start - arrival) * 1e-9)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sim.clock.schedule(start + sim.embed_cost_ns(tokens), lambda: done.done() or done.set_result(None))
        await done
    finally:
        stats.active -= 1
        if waiter is None or (waiter.done() and not waiter.cancelled()):
            engine.release()
        else:
            waiter.cancel()
    zero = sim.cfg.usage_zero in ("input", "both")  # --usage-zero: the answer's count only (the cost is real)
    body = answer(texts, 0 if zero else tokens, n, model)
    if fault is not None and fault.kind == "malformed":
        body = body[: max(1, len(body) // 2)]
    elif fault is not None and fault.kind == "empty_200":
        body = b""
    stats.served += 1
    rs.served += 1
    stats.e2e.observe((perf_counter_ns() - arrival) * 1e-9)
    return web.Response(body=body, content_type="application/json")


def _refused(sim: SimState, rs: Any, resp: web.Response) -> web.Response:
    sim.stats.errors += 1
    rs.errors += 1
    return resp


def _vectors(request: web.Request, n: int) -> bytes:
    sim = request.app[SIM_KEY]
    v = vector(sim.cfg.embed_dim, sim.cfg.seed)
    return b",".join([v] * n)


# the dialects ---------------------------------------------------------------------------------------
async def openai_embeddings(request: web.Request) -> web.Response:
    arrival = perf_counter_ns()
    body = await _read(request, OPENAI)
    if isinstance(body, web.Response):
        return body
    texts = _texts(body.get("input"))
    if texts is None:
        return OPENAI.error(400, "'input' must be a string or a non-empty list of strings")

    def answer(texts: list[str], tokens: int, n: int, model: str) -> bytes:
        v = vector(request.app[SIM_KEY].cfg.embed_dim, request.app[SIM_KEY].cfg.seed)
        data = b",".join(b'{"object":"embedding","index":%d,"embedding":%b}' % (i, v) for i in range(n))
        usage = orjson.dumps({"prompt_tokens": tokens, "total_tokens": tokens})
        return b'{"object":"list","data":[%b],"model":%b,"usage":%b}' % (data, orjson.dumps(model), usage)

    tokens = sum(count_input_tokens(t) for t in texts)
    return await _serve(request, OPENAI, "/v1/embeddings", texts, tokens, _model(request, body), answer, arrival)


def _rerank_answer(tei: bool, query: str) -> Answer:
    def answer(texts: list[str], tokens: int, n: int, model: str) -> bytes:
        ranked = sorted(((i, _score(query + "\n" + texts[i % len(texts)])) for i in range(n)), key=lambda x: -x[1])
        if tei:
            return orjson.dumps([{"index": i, "score": s} for i, s in ranked])
        results = [{"index": i, "document": {"text": texts[i % len(texts)]}, "relevance_score": s} for i, s in ranked]
        return orjson.dumps({"id": "rerank-sim", "model": model, "usage": {"prompt_tokens": tokens,
                                                                             "total_tokens": tokens},
                             "results": results})

    return answer


async def rerank(request: web.Request) -> web.Response:
    arrival = perf_counter_ns()
    tei = request.path == "/rerank"  # vLLM's /rerank and TEI's: told apart by the body
    body = await _read(request, OPENAI)
    if isinstance(body, web.Response):
        return body
    tei = tei and "texts" in body
    dialect = TEI if tei else OPENAI
    query = body.get("query")
    docs = _texts(body.get("texts" if tei else "documents"))
    if not isinstance(query, str) or docs is None:
        return dialect.error(400, "rerank needs 'query' and a non-empty list of "
                                  + ("'texts'" if tei else "'documents'"))
    q = count_input_tokens(query)
    tokens = sum(q + count_input_tokens(d) for d in docs)
    return await _serve(request, dialect, request.path, docs, tokens, _model(request, body),
                        _rerank_answer(tei, query), arrival)


async def ollama_embed(request: web.Request) -> web.Response:
    arrival = perf_counter_ns()
    body = await _read(request, OLLAMA)
    if isinstance(body, web.Response):
        return body
    texts = _texts(body.get("input"))
    if texts is None:
        return OLLAMA.error(400, "input is required")

    def answer(texts: list[str], tokens: int, n: int, model: str) -> bytes:
        took = max(1, perf_counter_ns() - arrival)
        return b'{"model":%b,"embeddings":[%b],"total_duration":%d,"load_duration":%d,"prompt_eval_count":%d}' % (
            orjson.dumps(model), _vectors(request, n), took, 1000, tokens)

    tokens = sum(count_input_tokens(t) for t in texts)
    return await _serve(request, OLLAMA, "/api/embed", texts, tokens, _model(request, body), answer, arrival)


async def tei_embed(request: web.Request) -> web.Response:
    arrival = perf_counter_ns()
    body = await _read(request, TEI)
    if isinstance(body, web.Response):
        return body
    texts = _texts(body.get("inputs"))
    if texts is None:
        return TEI.error(422, "inputs must be a string or a non-empty list of strings", "validation")

    def answer(texts: list[str], tokens: int, n: int, model: str) -> bytes:
        return b"[%b]" % _vectors(request, n)

    tokens = sum(count_input_tokens(t) for t in texts)
    return await _serve(request, TEI, "/embed", texts, tokens, "tei", answer, arrival)


async def gemini_embed(request: web.Request, action: str, model: str, dialect: Dialect) -> web.Response:
    """``:embedContent`` and ``:batchEmbedContents`` (called by routes_gemini's model action)."""
    arrival = perf_counter_ns()
    body = await _read(request, dialect)
    if isinstance(body, web.Response):
        return body
    if action == "embedContent":
        contents = [body.get("content")]
    else:
        reqs = body.get("requests")
        contents = [r.get("content") for r in reqs if isinstance(r, dict)] if isinstance(reqs, list) else []
    texts = [content_text(c.get("parts")) for c in contents if isinstance(c, dict)]
    if not texts or len(texts) != len(contents):
        return dialect.error(400, "* content: each request needs a content with parts")
    single = action == "embedContent"

    def answer(texts: list[str], tokens: int, n: int, model: str) -> bytes:
        v = vector(request.app[SIM_KEY].cfg.embed_dim, request.app[SIM_KEY].cfg.seed)
        if single and n == 1:
            return b'{"embedding":{"values":%b}}' % v
        return b'{"embeddings":[%b]}' % b",".join([b'{"values":%b}' % v] * n)

    tokens = sum(count_input_tokens(t) for t in texts)
    version = request.match_info.get("version", "v1beta")
    return await _serve(request, dialect, f"/{version}/models:{action}", texts, tokens, model.removeprefix("models/"),
                        answer, arrival)


GEMINI_ACTIONS = ("embedContent", "batchEmbedContents")


async def _read(request: web.Request, dialect: Dialect) -> dict[str, Any] | web.Response:
    if not request.app[SIM_KEY].authorized(request):
        return dialect.unauthorized()
    return await read_json(request, dialect)


def _model(request: web.Request, body: dict[str, Any]) -> str:
    sim = request.app[SIM_KEY]
    return sim.cfg.answer_model or str(body.get("model") or sim.cfg.model)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/embeddings", openai_embeddings)
    for path in ("/v1/rerank", "/v2/rerank", "/rerank"):
        app.router.add_post(path, rerank)
    app.router.add_post("/api/embed", ollama_embed)
    app.router.add_post("/embed", tei_embed)
