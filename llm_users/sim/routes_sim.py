"""The simulator's own endpoints: ground truth, statistics, health.

- ``GET /_sim/trace``: every finished record kept (JSON list); ``?request_id=X``: that one
  record (the latest with that id; an unfinished one shows ``"outcome": "active"``), 404 if
  unknown.
- ``DELETE /_sim/trace``: forget the finished records.
- ``GET /_sim/stats``: counters (see :meth:`~.stats.Stats.as_dict`).
- ``GET /_sim/config``: the settings in force.
- ``GET /health``: 200, like vLLM and TGI.
- ``POST /reset_prefix_cache`` (vLLM) and ``POST``/``GET /flush_cache`` (SGLang): empty the
  ``--prefix-cache-block`` model (if any), 200; the calls are counted by path in
  ``/_sim/stats`` ``cache_resets``; ``--cache-reset-routes`` says which answer (the others 404).
"""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
from aiohttp import web

from llm_users.sim.state import SIM_KEY


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def get_trace(request: web.Request) -> web.Response:
    trace = request.app[SIM_KEY].trace
    rid = request.query.get("request_id")
    compact = request.query.get("compact") in ("1", "true")
    if rid is None:
        return _json(trace.all(compact))
    rec = trace.get(rid, compact)
    if rec is None:
        return _json({"error": f"no trace record for request_id {rid!r}"}, status=404)
    return _json(rec)


async def delete_trace(request: web.Request) -> web.Response:
    request.app[SIM_KEY].trace.clear()
    return _json({"cleared": True})


async def stats(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    out = sim.stats.as_dict(sim.engine.running, sim.engine.waiting)
    out["event_loop"] = type(asyncio.get_running_loop()).__module__.split(".")[0]  # "asyncio" or "uvloop"
    return _json(out)


async def config(request: web.Request) -> web.Response:
    cfg = dataclasses.asdict(request.app[SIM_KEY].cfg)
    if cfg.get("require_api_key"):
        cfg["require_api_key"] = "***"
    return _json(cfg)


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def reset_cache(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    path = request.path
    if ("vllm" if path == "/reset_prefix_cache" else "sglang") not in sim.cfg.cache_reset_routes.split(","):
        return _json({"detail": "Not Found"}, status=404)  # --cache-reset-routes: this server has no such route
    sim.stats.cache_resets[path] = sim.stats.cache_resets.get(path, 0) + 1
    if sim.prefix_cache is not None:
        sim.prefix_cache.clear()
    if path == "/flush_cache":  # SGLang answers in text
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")
    return web.Response(status=200)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/reset_prefix_cache", reset_cache)
    app.router.add_post("/flush_cache", reset_cache)
    app.router.add_get("/flush_cache", reset_cache)
    app.router.add_get("/_sim/trace", get_trace)
    app.router.add_delete("/_sim/trace", delete_trace)
    app.router.add_get("/_sim/stats", stats)
    app.router.add_get("/_sim/config", config)
    app.router.add_get("/health", health)
