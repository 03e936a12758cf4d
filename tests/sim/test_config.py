"""sim/config.py: the simulator's settings: the defaults a bare ``llm-sim`` runs with, and every
value refused at once with a line naming the setting (the command line and a test building a
SimConfig by hand get the same check)."""

from __future__ import annotations

import dataclasses

import pytest

from llm_users.sim.config import DEFAULT_MAX_TOKENS, FAULT_KINDS, SimConfig


def test_the_defaults() -> None:
    c = SimConfig()
    assert (c.host, c.port, c.model, c.seed) == ("127.0.0.1", 8000, "sim-model", 0)
    assert (c.ttft_ms, c.itl_ms, c.ttft_dist, c.itl_dist) == (50.0, 10.0, "fixed", "fixed")
    assert c.output_tokens is None and DEFAULT_MAX_TOKENS == 512  # as many as the request allows
    assert (c.max_batch, c.max_queue, c.fault_rate, c.fault_kinds) == (256, None, 0.0, FAULT_KINDS)
    assert (c.trace_limit, c.cache_reset_routes, c.routes, c.only_backends) == (2000, "vllm,sglang", (), ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(("kw", "says"), [
    ({"ttft_dist": "uniform"}, "ttft_dist must be one of fixed, normal, lognormal"),
    ({"itl_dist": "x"}, "itl_dist must be one of"),
    ({"ttft_ms": -1.0}, "ttft_ms must be >= 0, got -1.0"),
    ({"itl_slope_ms": -0.5}, "itl_slope_ms must be >= 0"),
    ({"prefill_us_per_token": -1.0}, "prefill_us_per_token must be >= 0"),
    ({"output_tokens": 0}, "output_tokens must be >= 1, got 0"),
    ({"tokens_per_chunk": 0}, "tokens per chunk must be >= 1"),
    ({"gemini_tokens_per_chunk": 0}, "tokens per chunk must be >= 1"),
    ({"embed_dim": 0}, "embed_max_batch and embed_dim must be >= 1"),
    ({"embed_token_ms": -0.1}, "embed_base_ms and embed_token_ms must be >= 0"),
    ({"max_batch": 0}, "max_batch must be >= 1, got 0"),
    ({"max_queue": -1}, "max_queue must be >= 0, got -1"),
    ({"fault_rate": 1.5}, r"fault_rate must be in \[0, 1\], got 1.5"),
    ({"fault_kinds": ("reset", "explode")}, r"unknown fault kinds \['explode'\]: choose from http_429"),
    ({"fault_rate": 0.1, "fault_kinds": ()}, "fault_rate > 0 needs at least one fault kind"),
    ({"usage_zero": "all"}, "usage_zero must be one of output, input, both, got 'all'"),
    ({"reasoning_stream": "off"}, "reasoning_stream must be one of full, summary, hidden, got 'off'"),
    ({"cache_reset_routes": "vllm,tgi"}, "cache_reset_routes must list vllm, sglang or none"),
    ({"prefix_cache_block": -1}, "prefix_cache_block must be >= 0"),
    ({"template_tokens": -1}, "template_tokens must be >= 0"),
    ({"trace_limit": -1}, "trace_limit must be >= 0"),
    ({"routes": ("my.routes", "not a module")}, "routes must be module names, got 'my.routes', 'not a module'"),
])
def test_a_bad_value_is_refused_naming_the_setting(kw: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        SimConfig(**kw)


def test_the_edges_are_accepted() -> None:
    c = SimConfig(fault_rate=1.0, fault_kinds=("hang",), max_queue=0, output_tokens=1, ttft_ms=0.0,
                  cache_reset_routes="none", routes=("my_pkg.routes",), usage_zero="both", trace_limit=0)
    assert (c.fault_rate, c.max_queue, c.output_tokens, c.routes) == (1.0, 0, 1, ("my_pkg.routes",))
    assert SimConfig(fault_rate=0.0, fault_kinds=()).fault_kinds == ()  # no faults drawn: no kind needed
