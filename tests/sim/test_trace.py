"""Issue 10 item 5: the simulator's ground-truth traces are a small ring unless asked for more
(a test or a bench passes --trace-limit), so a long run cannot grow its memory without bound."""

from __future__ import annotations

from llm_users.sim.cli import config_from_args
from llm_users.sim.config import SimConfig
from llm_users.sim.launcher import start_simulator
from tests.sim.simhttp import get_json, request

DEFAULT_RING = 2_000


def test_the_default_keeps_a_small_ring() -> None:
    cfg, _ = config_from_args([])
    assert cfg.trace_limit == SimConfig().trace_limit == DEFAULT_RING  # was 100,000: 800 MB after 3 min at 200 users


def test_the_ring_keeps_the_newest_and_counters_keep_counting() -> None:
    with start_simulator(["--trace-limit", "5", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "2"]) as sim:
        ids = [f"ring-{i}" for i in range(12)]
        for rid in ids:
            r = request(sim.url, "/v1/chat/completions", {"model": "m", "stream": True,
                                                           "messages": [{"role": "user", "content": "hi"}]},
                        headers={"X-Request-Id": rid})
            assert r.status == 200
        kept = [t["request_id"] for t in get_json(sim.url, "/_sim/trace")]
        assert kept == ids[-5:]
        stats = get_json(sim.url, "/_sim/stats")
        assert stats["started"] == stats["served"] == 12
