"""The prefix-cache reset (issue 29 item 6) against the simulator's routes: which route is
found (vLLM first, SGLang next, none), each reset counted by the server, a failure one warning
line (the simulator's routes themselves: tests/sim/test_routes_sim.py)."""

from __future__ import annotations

import logging

import pytest

from llm_users.load.cache_reset import CacheReset, console_line, server_root
from tests.helpers import free_port, get_json


def _resets(url: str) -> dict[str, int]:
    return get_json(url + "/_sim/stats")["cache_resets"]


@pytest.mark.parametrize(("routes", "method", "calls"), [
    ("vllm,sglang", "vllm /reset_prefix_cache", {"/reset_prefix_cache": 4}),
    ("sglang", "sglang /flush_cache", {"/flush_cache": 4}),
])
def test_detect_then_reset_each_boundary(sim_factory, routes, method, calls) -> None:
    sim = sim_factory("--cache-reset-routes", routes)
    r = CacheReset(sim.url + "/v1")  # a host with a path: the routes are at the server's root
    assert r.detect() == method and r.at_start
    assert all(r.reset() for _ in range(3))
    assert _resets(sim.url) == calls  # the start's call + 3 boundaries, nothing else
    s = r.summary()
    assert s == {"method": method, "count": 3, "failed": 0, "at_start": True}
    assert console_line(s).endswith("3 times") and method.split()[1] in console_line(s)


def test_no_route_means_no_reset_and_says_what_was_tried(sim_factory) -> None:
    sim = sim_factory("--cache-reset-routes", "none")
    r = CacheReset(sim.url)
    assert r.detect() is None and not r.reset()
    s = r.summary()
    assert s["method"] is None and s["count"] == 0 and s["tried"] == ["/reset_prefix_cache: HTTP 404",
                                                                       "/flush_cache: HTTP 404"]
    assert "no reset route answered" in console_line(s)
    assert console_line({"method": None, "off": True}) is None


def test_a_failing_reset_is_one_warning_line(sim_factory, caplog) -> None:
    sim = sim_factory()
    r = CacheReset(sim.url, timeout=1.0)
    assert r.detect() == "vllm /reset_prefix_cache"
    sim.stop()  # the server goes away mid-run
    with caplog.at_level(logging.WARNING, logger="llm_users.load.cache_reset"):
        assert not r.reset() and not r.reset()
    assert r.failed == 2 and r.count == 0
    assert len([m for m in caplog.messages if "prefix-cache reset" in m]) == 1


def test_dead_host_detects_nothing_quickly() -> None:
    r = CacheReset(f"http://127.0.0.1:{free_port()}", timeout=1.0)
    assert r.detect() is None and len(r.tried) == 2


def test_server_root() -> None:
    assert server_root("http://h:8000/v1") == "http://h:8000" and server_root("h:1") == "http://h:1"
