"""sim/metrics.py: ``GET /metrics`` in vLLM's and TGI's names, computed at scrape time from the
simulator's own state (the engine's slots, the counters and histograms of sim/stats.py)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llm_users.sim.config import SimConfig
from llm_users.sim.metrics import build_registry
from llm_users.sim.state import SimState
from tests.sim import simhttp
from tests.sim.test_app import CHAT

VLLM_NAMES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
              "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:time_to_first_token_seconds",
              "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds"]
TGI_NAMES = ["tgi_queue_size", "tgi_batch_current_size", "tgi_request_generated_tokens",
             "tgi_request_queue_duration", "tgi_request_mean_time_per_token_duration"]


def test_metrics_parse(sim, rid):
    simhttp.request(sim.url, "/v1/chat/completions", CHAT, {"X-Request-Id": rid})
    simhttp.trace(sim.url, rid)
    r = simhttp.request(sim.url, "/metrics", method="GET")
    assert r.status == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.body.decode())}
    for name in VLLM_NAMES + TGI_NAMES:
        assert name in families, name
    assert families["vllm:num_requests_running"].samples[0].labels == {"model_name": "sim-model"}
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert families["tgi_request_generated_tokens"].type == "histogram"
    gen = next(s for s in families["vllm:generation_tokens"].samples if s.name == "vllm:generation_tokens_total")
    assert gen.value >= 5
    ttft_count = next(s for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count"))
    assert ttft_count.value >= 1
    kv = families["vllm:kv_cache_usage_perc"].samples[0].value
    assert 0.0 <= kv <= 1.0


def _scrape(sim: SimState) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape: (name, sorted labels) -> value."""
    text = generate_latest(build_registry(sim)).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_each_family_reads_the_state_at_scrape_time() -> None:
    sim = SimState(SimConfig(model="llama", max_batch=4))
    m = (("model_name", "llama"),)
    assert _scrape(sim)[("vllm:num_requests_running", m)] == 0.0
    for _ in range(3):
        sim.engine.try_acquire()  # three of four slots busy
    st = sim.stats
    st.prompt_tokens, st.generation_tokens, st.started, st.served, st.chunks, st.aborted = 40, 90, 5, 3, 30, 1
    st.finished = {"length": 2, "stop": 1}
    st.faults = {"reset": 2}
    for v in (0.003, 0.05, 0.05, 30.0):
        st.ttft.observe(v)
    got = _scrape(sim)
    assert got[("vllm:num_requests_running", m)] == 3.0 and got[("tgi_batch_current_size", ())] == 3.0
    assert got[("vllm:kv_cache_usage_perc", m)] == got[("vllm:gpu_cache_usage_perc", m)] == 0.75
    assert got[("tgi_batch_current_max_tokens", ())] == 4 * 2048
    assert got[("vllm:prompt_tokens_total", m)] == 40 and got[("vllm:generation_tokens_total", m)] == 90
    assert got[("vllm:request_success_total", (("finished_reason", "length"), *m))] == 2
    assert got[("vllm:request_success_total", (("finished_reason", "stop"), *m))] == 1
    assert got[("tgi_request_count_total", ())] == 5 and got[("tgi_request_success_total", ())] == 3
    assert got[("llm_sim_chunks_total", ())] == 30 and got[("llm_sim_aborted_total", ())] == 1
    assert got[("llm_sim_faults_total", (("kind", "reset"),))] == 2
    # the histogram's buckets are cumulative, on vLLM's bounds
    bucket = {le: got[("vllm:time_to_first_token_seconds_bucket", (("le", le), *m))]
              for le in ("0.001", "0.005", "0.04", "0.06", "20.0", "40.0", "+Inf")}
    assert bucket == {"0.001": 0, "0.005": 1, "0.04": 1, "0.06": 3, "20.0": 3, "40.0": 4, "+Inf": 4}
    assert got[("vllm:time_to_first_token_seconds_count", m)] == 4
    assert abs(got[("vllm:time_to_first_token_seconds_sum", m)] - 30.103) < 1e-9


def test_a_private_registry_per_state() -> None:
    """Two simulators in one process (tests, benches) never share a family."""
    a, b = SimState(SimConfig(model="a")), SimState(SimConfig(model="b"))
    b.stats.chunks = 7
    assert _scrape(a)[("llm_sim_chunks_total", ())] == 0 and _scrape(b)[("llm_sim_chunks_total", ())] == 7
