"""The master exporter: the run's merged statistics as Prometheus text, computed at scrape time.

:class:`LLMCollector` is a prometheus_client custom collector. Every ``collect()`` reads the
merged :class:`~llm_users.distributed.Collector` (on the master, or the local runner) and
builds the families afresh, so nothing is kept twice and nothing happens at import. Histogram
buckets are derived exactly from the HDR histograms (a bucket ``le=b`` counts the values whose
recorded HDR value is <= b, the same convention as the reported percentiles), and the
quantile summaries give the HDR percentiles themselves, equal to summary.json's.

:class:`Exporter` serves a registry on a gevent WSGI server (Locust processes are gevent
processes). Every metric is documented in docs/prometheus.md.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from llm_users.metrics import Distribution, Stats

log = logging.getLogger("exporters.prometheus")

#: Inter-token gaps and time per output token: 0.5 ms .. 1 s.
ITL_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
               0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0)
#: Time to first token and request duration: 10 ms .. 120 s.
LATENCY_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
                   5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)
QUANTILES = (0.5, 0.9, 0.99)
LAG_QUANTILES = (0.5, 0.99)
LABELS = ["backend", "model", "name"]

# Stats distribution key -> (family name, buckets, help).
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...], str]] = {
    "ttft": ("llm_time_to_first_token_seconds", LATENCY_BUCKETS,
             "Time to first token: first token-bearing chunk minus t0 (request written), successful measured requests."),
    "ttfo": ("llm_time_to_first_output_token_seconds", LATENCY_BUCKETS,
             "Time to first output token: first answer chunk (reasoning excluded) minus t0; equals TTFT without "
             "reasoning. Successful measured requests."),
    "ttst": ("llm_time_to_second_token_seconds", LATENCY_BUCKETS,
             "Time to second token: second token-bearing chunk (reasoning or answer) minus t0, successful measured "
             "requests of two chunks or more."),
    "itl": ("llm_inter_token_latency_seconds", ITL_BUCKETS,
            "Gaps between consecutive token-bearing chunks, pooled over successful measured requests."),
    "tpot": ("llm_time_per_output_token_seconds", ITL_BUCKETS,
             "Per request (E2E - TTFT) / (output tokens - 1), successful measured requests."),
    "e2e": ("llm_request_duration_seconds", LATENCY_BUCKETS,
            "End of stream minus t0, successful measured requests."),
}


class Cumulative:
    """A Distribution's HDR counts, accumulated once, for bucket counts and percentiles."""

    def __init__(self, dist: Distribution) -> None:
        h = self.hist = dist.hist
        self.count = dist.count
        self.sum_s = dist.sum_ns / 1e9
        self.min_ns, self.max_ns = dist.min_ns or 0, dist.max_ns or 0
        self.total = h.get_total_count()
        end = h.get_counts_array_index(h.get_max_value()) + 1 if self.total else 0
        self.cum = list(itertools.accumulate(h.counts[:end]))  # up to the highest recorded value
        if self.cum and self.cum[-1] != self.total:  # never expected; then take the whole array
            self.cum = list(itertools.accumulate(h.counts[: h.counts_len]))

    def count_le(self, bound_us: float) -> int:
        """Values whose recorded value (highest equivalent of their HDR sub-bucket) is <= bound_us."""
        if not self.cum:
            return 0
        h = self.hist
        b = round(bound_us)
        if b >= h.get_highest_equivalent_value(h.get_value_from_index(len(self.cum) - 1)):
            return self.total
        index = h.get_counts_array_index(b)
        if h.get_highest_equivalent_value(b) > b:
            index -= 1  # the sub-bucket holding b also holds values above b
        return self.cum[index] if index >= 0 else 0

    def value_at(self, quantile: float) -> float | None:
        """The HDR value at this quantile, in µs: the same as ``HdrHistogram.get_value_at_percentile``."""
        if not self.cum:
            return None
        target = self.hist.get_target_count_at_percentile(quantile * 100)
        index = bisect.bisect_left(self.cum, target)
        return self.hist.get_highest_equivalent_value(self.hist.get_value_from_index(index))

    def seconds_at(self, quantile: float) -> float | None:
        """:meth:`value_at` in seconds, kept within the exact min and max as the report's percentiles are."""
        us = self.value_at(quantile)
        return None if us is None else min(max(us * 1000, self.min_ns), self.max_ns) / 1e9


def buckets(c: Cumulative, bounds_s: Iterable[float]) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs from the HDR histogram, ending with ``+Inf`` = count."""
    out = [(floatToGoString(b), float(c.count_le(b * 1e6))) for b in bounds_s]
    out.append(("+Inf", float(c.count)))
    return out


def _add_summary(fam: Metric, labels: dict[str, str], c: Cumulative, quantiles: Iterable[float]) -> None:
    for q in quantiles:
        v = c.seconds_at(q)
        if v is not None:
            fam.add_sample(fam.name, {**labels, "quantile": floatToGoString(q)}, v)
    fam.add_sample(fam.name + "_sum", labels, c.sum_s)
    fam.add_sample(fam.name + "_count", labels, float(c.count))


class LLMCollector(Collector):
    """Builds the ``llm_*`` families from the merged statistics at every scrape.

    ``merged`` is the run's Collector (``stats``, ``health``); ``labels`` maps a request name
    to its (backend, model); ``users`` returns the current user count; ``scrape_errors`` the
    per-target error counts of the /metrics scraper, if one runs.
    """

    def __init__(self, merged: Any, labels: Mapping[str, tuple[str, str]],
                 users: Callable[[], int] = lambda: 0,
                 scrape_errors: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.merged = merged
        self.labels = labels
        self.users = users
        self.scrape_errors = scrape_errors

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families are built at scrape time; no name checks needed

    def _series(self) -> list[tuple[list[str], Stats]]:
        out = []
        for name, stats in sorted(self.merged.stats.by_name.items()):
            backend, model = self.labels.get(name, ("", ""))
            out.append(([backend, model, name], stats))
        return out

    def collect(self) -> Iterator[Metric]:
        series = self._series()
        requests = CounterMetricFamily(
            "llm_requests", "Measured LLM requests (warm-up and cool-down excluded) by outcome: "
            "status is ok or the error category.", labels=[*LABELS, "status"])
        excluded = CounterMetricFamily(
            "llm_excluded_requests", "Requests kept out of every statistic: reason is warmup, cooldown or "
            "cancelled (--llm-cancel-after).",
            labels=[*LABELS, "reason"])
        out_tok = CounterMetricFamily("llm_output_tokens", "Output tokens of successful measured requests.",
                                      labels=LABELS)
        in_tok = CounterMetricFamily("llm_input_tokens", "Input (prompt) tokens of successful measured requests.",
                                     labels=LABELS)
        reason_tok = CounterMetricFamily("llm_reasoning_tokens", "Reasoning tokens (part of the output tokens) of "
                                         "successful measured requests: the server's count, else reasoning chunks.",
                                         labels=LABELS)
        inputs = CounterMetricFamily("llm_inputs", "Inputs of successful measured requests: embeddings texts and "
                                     "rerank documents (a chat request is one); rate() is inputs/s.", labels=LABELS)
        for labels, s in series:
            inputs.add_metric(labels, s.inputs)
            requests.add_metric([*labels, "ok"], s.requests - s.failures)
            for category, n in sorted(s.failures_by_category.items()):
                requests.add_metric([*labels, category], n)
            excluded.add_metric([*labels, "warmup"], s.excluded)
            excluded.add_metric([*labels, "cooldown"], s.excluded_cooldown)
            excluded.add_metric([*labels, "cancelled"], s.cancelled)
            out_tok.add_metric(labels, s.output_tokens)
            in_tok.add_metric(labels, s.input_tokens)
            reason_tok.add_metric(labels, s.reasoning.reasoning_tokens)
        yield from (requests, excluded, out_tok, in_tok, reason_tok, inputs)
        for key, (name, bounds, doc) in HISTOGRAMS.items():
            hist = HistogramMetricFamily(name, doc + " Seconds.", labels=LABELS)
            summ = Metric(name + "_quantile", doc + " Exact HDR quantiles over the run so far, seconds.", "summary")
            for labels, s in series:
                c = Cumulative(s.dists[key])
                hist.add_metric(labels, buckets(c, bounds), c.sum_s)
                _add_summary(summ, dict(zip(LABELS, labels, strict=True)), c, QUANTILES)
            yield hist
            yield summ
        users = GaugeMetricFamily("llm_users", "Simulated users running now (all workers).")
        users.add_metric([], float(self.users()))
        yield users
        lag = Metric("llm_client_loop_lag_seconds", "Load generator's own event-loop lag (callback "
                     "queueing delay) per node, over the run so far, seconds.", "summary")
        for node, health in sorted(self.merged.health.items()):
            _add_summary(lag, {"node": node}, Cumulative(health.live), LAG_QUANTILES)  # live: the whole run
        yield lag
        if self.scrape_errors is not None:
            errors = CounterMetricFamily("llm_scrape_errors", "Failed pulls of a GPU sidecar's or the "
                                         "LLM server's /metrics, per target URL.", labels=["target"])
            for target, n in sorted(self.scrape_errors().items()):
                errors.add_metric([target], n)
            yield errors


def build_registry(collector: LLMCollector) -> CollectorRegistry:
    """A private registry (never the global REGISTRY) holding only ``collector``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class Exporter:
    """Serves a registry on http://host:port/metrics from a gevent WSGI server."""

    def __init__(self, registry: CollectorRegistry, host: str = "0.0.0.0", port: int = 9646) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.server: Any = None

    def start(self) -> bool:
        """Listen; on failure (port in use...) log one line and return False: the run goes on."""
        from gevent.pywsgi import WSGIServer

        server = WSGIServer((self.host, self.port), make_wsgi_app(self.registry), log=None)
        try:
            server.start()
        except OSError as e:
            log.warning("Prometheus exporter not started: cannot listen on %s:%s (%s); "
                        "the run goes on without it (--llm-prometheus-port 0 turns it off)",
                        self.host, self.port, e.strerror or e)
            return False
        self.server = server
        self.port = server.server_port
        log.info("Prometheus metrics on http://%s:%s/metrics", self.host, self.port)
        return True

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None
