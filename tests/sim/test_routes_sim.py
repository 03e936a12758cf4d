"""sim/routes_sim.py: the simulator's own endpoints: the ground-truth trace (one record, all,
compact, cleared), /_sim/stats and /_sim/config (the API key masked), /health, and the
prefix-cache reset routes (vLLM's and SGLang's, only those --cache-reset-routes names)."""

from __future__ import annotations

import urllib.request

import orjson

from tests.sim import simhttp
from tests.sim.inproc import exchange
from tests.sim.test_app import CHAT


def test_delete_trace(sim, rid):
    simhttp.request(sim.url, "/v1/chat/completions", CHAT, {"X-Request-Id": rid})
    simhttp.trace(sim.url, rid)
    assert simhttp.request(sim.url, "/_sim/trace", method="DELETE").status == 200
    assert simhttp.request(sim.url, f"/_sim/trace?request_id={rid}", method="GET").status == 404


def test_sim_reset_empties_its_prefix_cache(sim_factory) -> None:
    sim = sim_factory("--prefix-cache-block", "4", "--ttft-ms", "1", "--itl-ms", "1")

    def cached() -> int:  # the streamed usage says how many prompt tokens the server found cached
        body = orjson.dumps({"model": "m", "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True},
                             "messages": [{"role": "user", "content": "a b c d e f g h i"}]})
        req = urllib.request.Request(sim.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            events = [orjson.loads(x[6:]) for x in resp.read().split(b"\n") if x.startswith(b"data: {")]
        usage = next(e["usage"] for e in events if e.get("usage"))
        return usage["prompt_tokens_details"]["cached_tokens"]

    assert cached() == 0 and cached() == 8
    urllib.request.urlopen(urllib.request.Request(sim.url + "/flush_cache", method="POST"), timeout=10).read()
    assert cached() == 0 and cached() == 8


PLAIN = {**CHAT, "stream": False, "max_tokens": 3}


def test_the_trace_one_record_all_of_them_compact_and_cleared() -> None:
    one, unknown, every, compact, cleared, after = exchange(
        ("POST", "/v1/chat/completions", PLAIN, {"X-Request-Id": "r1"}),
        ("GET", "/_sim/trace?request_id=nope", None),
        ("GET", "/_sim/trace", None),
        ("GET", "/_sim/trace?request_id=r1&compact=1", None),
        ("DELETE", "/_sim/trace", None),
        ("GET", "/_sim/trace", None))
    assert one.status == 200
    assert unknown.status == 404 and unknown.json() == {"error": "no trace record for request_id 'nope'"}
    [rec] = every.json()
    assert rec["request_id"] == "r1" and rec["outcome"] == "ok" and [k for _, k in rec["chunks"]] == [3]  # one whole body
    assert compact.json()["request_id"] == "r1" and "chunks" not in compact.json()
    assert cleared.json() == {"cleared": True} and after.json() == []


def test_stats_count_what_was_served_and_config_masks_the_key() -> None:
    key = {"Authorization": "Bearer sekrit"}
    _, _, stats, config, health = exchange(
        ("POST", "/v1/chat/completions", PLAIN, key),
        ("POST", "/v1/chat/completions", PLAIN, key),
        ("GET", "/_sim/stats", None),
        ("GET", "/_sim/config", None),
        ("GET", "/health", None),
        require_api_key="sekrit", model="judge")
    s = stats.json()
    assert (s["served"], s["started"], s["chunks"], s["generation_tokens"]) == (2, 2, 6, 6)
    assert s["by_route"] == {"/v1/chat/completions": {"started": 2, "served": 2, "aborted": 0, "errors": 0}}
    assert s["event_loop"] == "asyncio"  # in-process: this test's own loop
    c = config.json()
    assert c["require_api_key"] == "***" and c["model"] == "judge" and c["output_tokens"] == 5
    assert health.status == 200


def test_only_the_named_reset_routes_answer_and_each_call_is_counted() -> None:
    vllm, flush_post, flush_get, stats = exchange(
        ("POST", "/reset_prefix_cache", None), ("POST", "/flush_cache", None), ("GET", "/flush_cache", None),
        ("GET", "/_sim/stats", None), cache_reset_routes="sglang")
    assert vllm.status == 404 and vllm.json() == {"detail": "Not Found"}
    assert flush_post.status == flush_get.status == 200 and flush_post.body.startswith(b"Cache flushed.\n")
    assert stats.json()["cache_resets"] == {"/flush_cache": 2}  # the refused route is not counted
    none = exchange(("POST", "/reset_prefix_cache", None), ("POST", "/flush_cache", None), ("GET", "/_sim/stats", None),
                    cache_reset_routes="none")
    assert [a.status for a in none[:2]] == [404, 404] and none[2].json()["cache_resets"] == {}
    vllm_only = exchange(("POST", "/reset_prefix_cache", None), cache_reset_routes="vllm")[0]
    assert vllm_only.status == 200 and vllm_only.body == b""
