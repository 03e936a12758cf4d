"""Build the simulator's aiohttp Application from a :class:`SimConfig`.

Nothing happens at import; :func:`build_app` wires the shared state, the routes of every
backend's simulator module (:mod:`llm_users.sim.routes`: the built-ins' and ``--routes``), the
tokenizer, ground-truth and metrics endpoints, and the background jobs (the once-a-second sample
behind ``chunks_per_s``, the trace file, and with ``exit_with_parent`` a watch on the parent
process) as startup/cleanup hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator

from aiohttp import web

from llm_users.sim import routes_sim, routes_tokenize
from llm_users.sim.clock import Clock
from llm_users.sim.config import SimConfig
from llm_users.sim.metrics import REGISTRY_KEY, build_registry, metrics
from llm_users.sim.routes import route_modules
from llm_users.sim.state import SIM_KEY, SimState


async def _background(app: web.Application) -> AsyncIterator[None]:
    sim = app[SIM_KEY]
    sim.clock = Clock(asyncio.get_running_loop())
    sim.trace.open()
    parent = os.getppid()

    async def tick() -> None:
        while True:
            await asyncio.sleep(1.0)
            sim.stats.sample()
            if sim.cfg.exit_with_parent and os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)

    task = asyncio.create_task(tick())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    sim.trace.close()


def build_app(cfg: SimConfig) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    sim = SimState(cfg)
    app[SIM_KEY] = sim
    app[REGISTRY_KEY] = build_registry(sim)
    routes_sim.add_routes(app)
    app.router.add_get("/metrics", metrics)
    for module in route_modules(cfg):  # each backend's, from its descriptor (sim_routes), and --routes
        module.add_routes(app)
    routes_tokenize.add_routes(app)
    app.cleanup_ctx.append(_background)
    return app
