"""``GET /metrics``: Prometheus text computed at scrape time from the simulator's own state.

A private ``CollectorRegistry`` (never the global one) holds one collector that reads the
engine and the statistics when scraped. Names follow the servers the simulator stands in for,
so the scrapers and dashboards made for them work unchanged:

- vLLM (label ``model_name``): ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (and the older ``vllm:gpu_cache_usage_perc``, both
  running / max_batch), ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:num_preemptions_total``, ``vllm:request_success_total{finished_reason}``, histograms
  ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds``.
- TGI: ``tgi_queue_size``, ``tgi_batch_current_size``, ``tgi_batch_current_max_tokens``,
  ``tgi_request_count``, ``tgi_request_success``, histograms ``tgi_request_generated_tokens``,
  ``tgi_request_input_length``, ``tgi_request_queue_duration``, ``tgi_request_duration``,
  ``tgi_request_mean_time_per_token_duration``.
- The simulator's own: ``llm_sim_chunks_total``, ``llm_sim_aborted_total``, ``llm_sim_faults_total{kind}``.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llm_users.sim.state import SimState
from llm_users.sim.stats import Hist

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _hist(name: str, doc: str, h: Hist, labels: dict[str, str]) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), h.cumulative(), h.sum)
    return fam


def _gauge(name: str, doc: str, value: float, labels: dict[str, str]) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value)
    return fam


def _counter(name: str, doc: str, value: float, labels: dict[str, str]) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value)
    return fam


class SimCollector(Collector):
    def __init__(self, sim: SimState) -> None:
        self.sim = sim

    def collect(self) -> Iterator[Metric]:
        sim = self.sim
        st = sim.stats
        eng = sim.engine
        m = {"model_name": sim.cfg.model}
        yield _gauge("vllm:num_requests_running", "Requests in the model's batch.", eng.running, m)
        yield _gauge("vllm:num_requests_waiting", "Requests waiting in the queue.", eng.waiting, m)
        yield _gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1 (running / max batch).", eng.kv_usage(), m)
        yield _gauge("vllm:gpu_cache_usage_perc", "Older name of kv_cache_usage_perc.", eng.kv_usage(), m)
        yield _counter("vllm:prompt_tokens", "Prefilled prompt tokens.", st.prompt_tokens, m)
        yield _counter("vllm:generation_tokens", "Generated tokens.", st.generation_tokens, m)
        yield _counter("vllm:num_preemptions", "Preemptions (never, in the simulator).", 0, m)
        fam = CounterMetricFamily("vllm:request_success", "Finished requests by reason.",
                                  labels=["model_name", "finished_reason"])
        for reason, count in sorted(st.finished.items()):
            fam.add_metric([sim.cfg.model, reason], count)
        yield fam
        yield _hist("vllm:time_to_first_token_seconds", "Time to first token.", st.ttft, m)
        yield _hist("vllm:inter_token_latency_seconds", "Gap between consecutive chunks.", st.itl, m)
        yield _hist("vllm:e2e_request_latency_seconds", "End-to-end request latency.", st.e2e, m)
        yield _hist("vllm:request_queue_time_seconds", "Time spent waiting for a batch slot.", st.queue, m)

        yield _gauge("tgi_queue_size", "Requests waiting in the queue.", eng.waiting, {})
        yield _gauge("tgi_batch_current_size", "Requests in the batch.", eng.running, {})
        yield _gauge("tgi_batch_current_max_tokens", "Max tokens the batch may hold (nominal).",
                     eng.max_batch * 2048, {})
        yield _counter("tgi_request_count", "Requests received.", st.started, {})
        yield _counter("tgi_request_success", "Requests answered in full.", st.served, {})
        yield _hist("tgi_request_generated_tokens", "Generated tokens per request.", st.gen_tokens, {})
        yield _hist("tgi_request_input_length", "Input tokens per request.", st.prompt_hist, {})
        yield _hist("tgi_request_queue_duration", "Queue time per request.", st.queue, {})
        yield _hist("tgi_request_duration", "End-to-end request duration.", st.e2e, {})
        yield _hist("tgi_request_mean_time_per_token_duration", "Mean time per output token.", st.tpot, {})

        yield _counter("llm_sim_chunks", "Token-bearing chunks written.", st.chunks, {})
        yield _counter("llm_sim_aborted", "Streams whose client went away.", st.aborted, {})
        fam = CounterMetricFamily("llm_sim_faults", "Injected faults by kind.", labels=["kind"])
        for kind, count in sorted(st.faults.items()):
            fam.add_metric([kind], count)
        yield fam


def build_registry(sim: SimState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimCollector(sim))
    return registry


REGISTRY_KEY = web.AppKey("llm_sim_registry", CollectorRegistry)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
