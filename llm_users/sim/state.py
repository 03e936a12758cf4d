"""The simulator's shared state: one object per application, built from a :class:`SimConfig`.

Holds the capacity engine, the statistics, the ground-truth trace, the token source and the
latency distributions, hands out request sequence numbers, remembers which TCP connections
already had their cold start, and checks API keys.
"""

from __future__ import annotations

import weakref
from time import perf_counter_ns
from typing import Any

from aiohttp import web

from llm_users.sim.base import read_json
from llm_users.sim.clock import Clock
from llm_users.sim.config import SimConfig
from llm_users.sim.engine import Engine
from llm_users.sim.prefix_cache import PrefixCache
from llm_users.sim.stats import Stats
from llm_users.sim.text import TokenSource, count_input_tokens
from llm_users.sim.timing import Dist
from llm_users.sim.trace import TraceStore
from llm_users.workload.local_tokenizer import LocalTokenizer


class SimState:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.engine = Engine(cfg.max_batch, cfg.max_queue)
        self.embed_engine = Engine(cfg.embed_max_batch, cfg.max_queue)  # embeddings, rerank (routes_embed.py)
        self.stats = Stats()
        self.trace = TraceStore(cfg.trace_limit, cfg.trace_file)
        self.tokens = TokenSource(cfg.seed)
        self.ttft = Dist(cfg.ttft_dist, cfg.ttft_ms, cfg.ttft_sd_ms)
        self.itl = Dist(cfg.itl_dist, cfg.itl_ms, cfg.itl_sd_ms)
        self.slope_ns = int(round(cfg.itl_slope_ms * 1e6))
        self.stall_ns = int(round(cfg.stall_ms * 1e6))
        self.cold_ns = int(round(cfg.cold_start_ms * 1e6))
        self.prefill_ns_per_token = cfg.prefill_us_per_token * 1e3
        self.clock: Clock = None  # type: ignore[assignment]  # made at startup, on the running loop
        self._seq = 0
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self.prefix_cache = PrefixCache(cfg.prefix_cache_block) if cfg.prefix_cache_block else None
        self.tokenizer = LocalTokenizer(cfg.tokenizer, "--tokenizer") if cfg.tokenizer else None

    def count_prompt(self, text: str) -> int:
        """Prompt tokens of ``text`` (template tokens apart): one per word, or ``--tokenizer``'s count."""
        if self.tokenizer is None:
            return count_input_tokens(text)
        return max(1, self.tokenizer.count(text))

    def token_ids(self, text: str) -> list[int] | None:
        """The ids of ``text`` by ``--tokenizer``, or None (the toy ids)."""
        return self.tokenizer.ids(text) if self.tokenizer is not None else None

    def embed_cost_ns(self, tokens: int) -> int:
        """An embeddings or rerank batch's service time: base + per-token x its input tokens."""
        cfg = self.cfg
        return int(round((cfg.embed_base_ms + cfg.embed_token_ms * tokens) * 1e6))

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def cold_start(self, request: web.Request) -> bool:
        """True for the first request on a TCP connection (only when --cold-start-ms is set)."""
        if not self.cold_ns:
            return False
        transport = request.transport
        if transport is None:
            return False
        if transport in self._seen:  # asyncio's and uvloop's transports take weak references
            return False
        self._seen.add(transport)
        return True

    def authorized(self, request: web.Request) -> bool:
        key = self.cfg.require_api_key
        if key is None:
            return True
        h = request.headers
        auth = h.get("Authorization", "")
        if auth[:7].lower() == "bearer " and auth[7:].strip() == key:
            return True
        return key in (h.get("x-api-key"), h.get("x-goog-api-key"), request.query.get("key"))


SIM_KEY = web.AppKey("llm_sim_state", SimState)


async def admit(request: web.Request, dialect: Any) -> tuple[int, SimState, dict[str, Any]] | web.Response:
    """The prelude every generation route shares: stamp the arrival, check the key, read the
    JSON body. Returns (arrival_ns, state, body), or the protocol's error answer."""
    arrival = perf_counter_ns()
    sim = request.app[SIM_KEY]
    if not sim.authorized(request):
        return dialect.unauthorized()
    body = await read_json(request, dialect)
    if isinstance(body, web.Response):
        return body
    return arrival, sim, body
