"""The streamer frees a finished request by reference counting: no cyclic garbage per request.

A simulator in a soak grew ~7 MB a minute (issue 10): every finished request's streamer, job,
renderer and future stayed as cyclic garbage (the streamer's cached bound ``_tick``) until a
full gc pass, which a frozen, steady heap makes rare. Served in-process over loopback here, so
the collector's garbage can be inspected.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter

import aiohttp
from aiohttp import web

from llm_users.sim.app import build_app
from llm_users.sim.cli import config_from_args
from tests.helpers import free_port


async def _serve_and_count(requests: list[tuple[str, dict]]) -> Counter[str]:
    cfg, _ = config_from_args(["--ttft-ms", "5", "--itl-ms", "2", "--output-tokens", "12"])
    runner = web.AppRunner(build_app(cfg), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:

            async def one(i: int, path: str, body: dict) -> None:
                async with session.post(f"http://127.0.0.1:{port}{path}", json=body,
                                        headers={"X-Request-Id": f"r{i}"}) as r:
                    assert r.status == 200
                    await r.read()

            await asyncio.gather(*(one(i, p, b) for i, (p, b) in enumerate(requests[:10])))  # warm-up
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                await asyncio.gather(*(one(i, p, b) for i, (p, b) in enumerate(requests, 100)))
                await asyncio.sleep(0.05)
                gc.collect()
                return Counter(type(o).__qualname__ for o in gc.garbage
                               if type(o).__module__.startswith("llm_users.sim"))
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
    finally:
        await runner.cleanup()


def test_finished_requests_leave_no_cyclic_garbage() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 12}
    requests = [("/v1/chat/completions", {**chat, "stream": True})] * 40
    requests += [("/v1/chat/completions", {**chat, "stream": False})] * 10
    requests += [("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 12, "stream": True})] * 10
    garbage = asyncio.run(_serve_and_count(requests))
    assert not garbage, f"finished requests left cyclic garbage: {dict(garbage)}"
