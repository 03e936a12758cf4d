"""The simulator's app served in this process by aiohttp's test server (as tests/sim/test_streamer.py
serves it), for the route modules' own tests: no child process, each call a fresh app with
fast timing unless the test says otherwise."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer

from llm_users.sim.app import build_app
from llm_users.sim.config import SimConfig

#: fast, fixed timing and a fixed answer length: what a route test reads is the bytes, not the clock
FAST: dict[str, Any] = {"ttft_ms": 1.0, "itl_ms": 1.0, "output_tokens": 5, "seed": 3}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def exchange(*requests: tuple[str, str, Any] | tuple[str, str, Any, dict[str, str]], **settings: Any) -> list[Answer]:
    """Each (method, path, JSON body or bytes or None[, headers]) in turn against one fresh app
    built from ``FAST`` updated by ``settings`` (SimConfig's fields); the answers, read whole."""

    async def run() -> list[Answer]:
        app = build_app(SimConfig(**{**FAST, **settings}))
        async with TestClient(TestServer(app)) as client:
            out = []
            for method, path, body, *rest in requests:
                headers = rest[0] if rest else {}
                data = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
                async with client.request(method, path, data=data,
                                          headers={"Content-Type": "application/json", **headers}) as r:
                    out.append(Answer(r.status, dict(r.headers), await r.read()))
            return out

    return asyncio.run(run())


def one(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, **settings: Any) -> Answer:
    """One request against a fresh app (see :func:`exchange`)."""
    return exchange((method, path, body, headers or {}), **settings)[0]
