"""The tokenizer endpoints real servers expose, counting as the simulator does (one token per
whitespace-separated word, or ``--tokenizer``'s count; chat messages add ``--template-tokens``
each); ``/_sim/stats`` ``tokenize_calls`` counts the calls answered:

- ``POST /tokenize``, by body shape: vLLM ``{"model"?, "prompt"}`` or ``{"messages": [...]}``
  -> ``{"count", "max_model_len", "tokens"}``; llama.cpp ``{"content"}`` -> ``{"tokens"}``;
  TGI ``{"inputs"}`` -> ``[{"id", "text", "start", "stop"}, ...]``;
- ``POST /extras/tokenize`` (llama-cpp-python) ``{"input"}`` -> ``{"tokens"}``;
- ``GET /version`` (vLLM) -> ``{"version"}``.

Token ids are the words' indices in a hash-free toy vocabulary (stable, meaningless), or
``--tokenizer``'s ids.
"""

from __future__ import annotations

import zlib
from typing import Any

from aiohttp import web

from llm_users.sim.routes_openai import DIALECT
from llm_users.sim.state import SIM_KEY, SimState
from llm_users.sim.text import content_text, join_prompt

MAX_MODEL_LEN = 32768
VLLM_VERSION = "0.0.0-sim"


def _ids(text: str, sim: SimState | None = None) -> list[int]:
    real = sim.token_ids(text) if sim is not None else None
    if real is not None:
        return real or [0]
    return [zlib.crc32(w.encode()) % 32000 for w in text.split()] or [0]


def _spans(text: str) -> list[dict[str, Any]]:
    out = []
    pos = 0
    for w in text.split() or [""]:
        start = text.find(w, pos)
        pos = start + len(w)
        out.append({"id": zlib.crc32(w.encode()) % 32000, "text": w, "start": start, "stop": pos})
    return out


async def tokenize(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    if not sim.authorized(request):
        return DIALECT.unauthorized()
    try:
        body = await request.json()
    except ValueError:
        return DIALECT.error(400, "request body is not valid JSON")
    if not isinstance(body, dict):
        return DIALECT.error(400, "request body must be a JSON object")
    sim.stats.tokenize_calls += 1
    if isinstance(body.get("inputs"), str):  # TGI
        if sim.tokenizer is not None:
            return web.json_response([{"id": i, "text": "", "start": 0, "stop": 0} for i in _ids(body["inputs"], sim)])
        return web.json_response(_spans(body["inputs"]))
    if isinstance(body.get("content"), str):  # llama.cpp server
        return web.json_response({"tokens": _ids(body["content"], sim)})
    if isinstance(body.get("messages"), list):  # vLLM, chat template applied
        msgs = [m for m in body["messages"] if isinstance(m, dict)]
        text = join_prompt([content_text(m.get("content")) for m in msgs])
        count = sim.count_prompt(text) + sim.cfg.template_tokens * len(msgs)
        ids = _ids(text, sim)
        ids = ids + [1] * (count - len(ids))
    elif isinstance(body.get("prompt"), str):  # vLLM
        ids = _ids(body["prompt"], sim)
        count = len(ids)
    else:
        return DIALECT.error(400, "tokenize needs 'prompt' or 'messages' (vLLM), 'content' (llama.cpp) "
                                  "or 'inputs' (TGI)")
    return web.json_response({"count": count, "max_model_len": MAX_MODEL_LEN, "tokens": ids})


async def extras_tokenize(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        return DIALECT.error(400, "request body is not valid JSON")
    text = body.get("input") if isinstance(body, dict) else None
    if not isinstance(text, str):
        return DIALECT.error(400, "input is required")
    sim = request.app[SIM_KEY]
    sim.stats.tokenize_calls += 1
    return web.json_response({"tokens": _ids(text, sim)})


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": VLLM_VERSION})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/extras/tokenize", extras_tokenize)
    app.router.add_get("/version", version)
