"""Scraped Prometheus text -> the run's per-second series columns. No I/O.

- GPU sidecar (exporters/nvml.py): per GPU ``gpu_<k>_utilization_ratio``,
  ``gpu_<k>_memory_used_ratio`` (used / total) and ``gpu_<k>_power_watts``, plus the energy
  counter kept aside for energy per token. ``<k>`` is the NVML index, or ``n<i>_<index>`` when
  several sidecars are pulled (``i`` = position in ``--llm-gpu-sidecar``).
- LLM server: vLLM (``vllm:*``), SGLang (``sglang:*``), TGI (``tgi_*``) or llama.cpp
  (``llamacpp:*``) names, the first present, mapped onto the same ``server_*`` columns: gauges
  as read (running, waiting, KV-cache usage); histogram means over each scrape interval from the
  ``_sum``/``_count`` deltas and p50/p99 from the bucket deltas (queue and prefill time,
  milliseconds, like the client columns); counter rates (prompt and generated tokens/s,
  preemptions/s).

A quantile read from buckets is only as fine as they are (vLLM's queue and prefill histograms
start at 0.3 s): ``<q>_lo_ms``/``<q>_hi_ms`` name the bucket it fell in, and ``<q>_ms`` holds a
value only where that bucket lies between two finite bounds (interpolated, as Prometheus's
histogram_quantile: approximate). In the first bucket it is only ``< hi`` (interpolating there
made up 150 ms for an empty queue), in the +Inf bucket only ``> lo``: no value, the bound alone.

The columns are documented in docs/prometheus.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]

# One table per server (its metric prefix): column -> candidate sample names (the first present
# wins); values summed over label sets except ratios, which take the largest. Names read in each
# server's source: vLLM v1 (vllm/v1/metrics/loggers.py), SGLang (srt/metrics/collector.py), TGI
# (router/src), llama.cpp's server (tools/server/server.cpp, /metrics needs ``--metrics``).
_GAUGES = {
    "vllm": {
        "server_num_requests_running": ("vllm:num_requests_running",),
        "server_num_requests_waiting": ("vllm:num_requests_waiting",),
        "server_kv_cache_usage_ratio": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    },
    "sglang": {
        "server_num_requests_running": ("sglang:num_running_reqs",),
        "server_num_requests_waiting": ("sglang:num_queue_reqs",),
        "server_kv_cache_usage_ratio": ("sglang:token_usage",),
    },
    "tgi": {
        "server_num_requests_running": ("tgi_batch_current_size",),
        "server_num_requests_waiting": ("tgi_queue_size",),
    },
    "llamacpp": {
        "server_num_requests_running": ("llamacpp:requests_processing",),
        "server_num_requests_waiting": ("llamacpp:requests_deferred",),
        "server_kv_cache_usage_ratio": ("llamacpp:kv_cache_usage_ratio",),  # older builds only
    },
}
# column -> histogram base name: mean over the interval, in ms.
_MEANS = {
    "vllm": {
        "server_ttft_mean_ms": "vllm:time_to_first_token_seconds",
        "server_itl_mean_ms": "vllm:inter_token_latency_seconds",
        "server_e2e_mean_ms": "vllm:e2e_request_latency_seconds",
        "server_queue_time_mean_ms": "vllm:request_queue_time_seconds",
    },
    "sglang": {
        "server_ttft_mean_ms": "sglang:time_to_first_token_seconds",
        "server_itl_mean_ms": "sglang:inter_token_latency_seconds",
        "server_e2e_mean_ms": "sglang:e2e_request_latency_seconds",
        "server_queue_time_mean_ms": "sglang:queue_time_seconds",
    },
    "tgi": {
        "server_tpot_mean_ms": "tgi_request_mean_time_per_token_duration",
        "server_e2e_mean_ms": "tgi_request_duration",
        "server_queue_time_mean_ms": "tgi_request_queue_duration",
    },
    "llamacpp": {},
}
# prefix of p50/p99 columns -> histogram base name: quantiles of the observations made in each
# scrape interval, from the bucket deltas, in ms: the bucket's bounds always, a value only where
# it lies between two finite bounds (:func:`quantile_columns`).
_QUANTILES = {
    "vllm": {
        "server_queue_time": "vllm:request_queue_time_seconds",
        "server_prefill_time": "vllm:request_prefill_time_seconds",
    },
    "sglang": {"server_queue_time": "sglang:queue_time_seconds"},
    "tgi": {"server_queue_time": "tgi_request_queue_duration"},
    "llamacpp": {},
}
# column -> counter-like sample names (the first present wins): per-second rate over the interval.
_RATES = {
    "vllm": {
        "server_generation_tokens_per_s": ("vllm:generation_tokens_total",),
        "server_prompt_tokens_per_s": ("vllm:prompt_tokens_total",),
        "server_preemptions_per_s": ("vllm:num_preemptions_total",),
    },
    "sglang": {
        "server_generation_tokens_per_s": ("sglang:generation_tokens_total",),
        "server_prompt_tokens_per_s": ("sglang:prompt_tokens_total",),
        "server_preemptions_per_s": ("sglang:num_retracted_requests_total",),
    },
    "tgi": {
        "server_generation_tokens_per_s": ("tgi_request_generated_tokens_sum",),
        "server_prompt_tokens_per_s": ("tgi_request_input_length_sum",),
    },
    "llamacpp": {
        "server_generation_tokens_per_s": ("llamacpp:tokens_predicted_total",),
        "server_prompt_tokens_per_s": ("llamacpp:prompt_tokens_total",),
    },
}
#: a rate needs at least this long since the previous pull (the last pull at the stop may come
#: a few ms after the one before: its counter rise then waits, and is not turned into a rate)
MIN_RATE_S = 0.2
#: the metric prefix that names each server, in the order they are tried
PREFIXES = (("vllm", "vllm:"), ("sglang", "sglang:"), ("tgi", "tgi_"), ("llamacpp", "llamacpp:"))


GPU_SAMPLES = frozenset(
    {
        "gpu_utilization_ratio",
        "gpu_memory_used_bytes",
        "gpu_memory_total_bytes",
        "gpu_power_watts",
        "gpu_energy_joules_total",
    }
)
SERVER_SAMPLES = frozenset(
    {n for table in _GAUGES.values() for names in table.values() for n in names}
    | {b + suffix for table in _MEANS.values() for b in table.values() for suffix in ("_sum", "_count")}
    | {b + "_bucket" for table in _QUANTILES.values() for b in table.values()}
    | {n for table in _RATES.values() for names in table.values() for n in names}
)


#: Sample lines parsed between two ``pause()`` calls. prometheus_client's text parser takes
#: 20-50 µs a line (50 on a slow 2-core VM), so a slice holds the loop 0.1-0.2 ms: 8 lines held it
#: 0.7 ms there, and those slices were the commonest cause of first-token stamps 1 ms late at 90
#: streams (the client-overhead bench's lag trace, issue 34 item 1).
PARSE_SLICE = 4
#: Lines passed over (comments, series nobody reads) between two ``pause()`` calls: about 1 µs a
#: line, and a vLLM page has a thousand.
SCAN_SLICE = 200


def parse(
    text: str, wanted: frozenset[str] | None = None, pause: Callable[[], None] | None = None
) -> Samples:
    """Prometheus text -> {sample name: [(labels, value), ...]} (raises ValueError if malformed).

    With ``wanted``, only those samples' lines are parsed (comments dropped, so they read as
    untyped samples under their own names): a vLLM /metrics page has a thousand lines, and
    parsing them all would hold the load generator's event loop for many milliseconds. With
    ``pause`` too (the scraper passes ``idle.serve_ready_io``), the loop serves its ready sockets
    first (the page's read just held it), then after every :data:`PARSE_SLICE` lines parsed and
    every :data:`SCAN_SLICE` lines passed over: the simulator's page, 69 wanted lines (its
    latency histograms' buckets), took the parser 2-2.5 ms in one piece, the streams' chunks
    waiting unstamped meanwhile (issue 34 items 1 and 5).
    """
    out: Samples = {}
    if wanted is None:
        _parse_into(out, text)
        return out
    if pause is not None:
        pause()
    step = PARSE_SLICE if pause is not None else 0  # 0: never a full slice, the page in one piece
    batch: list[str] = []
    scanned = 0
    for ln in text.splitlines():
        if ln[:1] not in ("#", "") and ln.split("{", 1)[0].split(" ", 1)[0] in wanted:
            batch.append(ln)
            if len(batch) == step:
                _parse_into(out, "\n".join(batch))
                batch, scanned = [], 0
                pause()  # type: ignore[misc]  # set: step is 0 without a pause
            continue
        scanned += 1
        if scanned >= SCAN_SLICE and pause is not None:
            scanned = 0
            pause()
    if batch:
        _parse_into(out, "\n".join(batch))
    return out


def _parse_into(out: Samples, text: str) -> None:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))


def _total(samples: Samples, name: str) -> float | None:
    values = samples.get(name)
    return None if not values else sum(v for _, v in values)


def gpu_series(
    samples: Samples, node: str | None = None
) -> tuple[dict[str, float], dict[str, float], dict[str, dict[str, Any]]]:
    """One sidecar scrape -> (columns, energy joules per GPU key, GPU info per key)."""
    per: dict[str, dict[str, float]] = {}
    info: dict[str, dict[str, Any]] = {}
    for name in sorted(GPU_SAMPLES):
        for labels, value in samples.get(name, []):
            key = labels.get("gpu", "")
            key = f"{node}_{key}" if node else key
            per.setdefault(key, {})[name] = value
            info.setdefault(key, {"uuid": labels.get("uuid"), "name": labels.get("name")})
    cols: dict[str, float] = {}
    energy: dict[str, float] = {}
    for key, v in per.items():
        if "gpu_utilization_ratio" in v:
            cols[f"gpu_{key}_utilization_ratio"] = v["gpu_utilization_ratio"]
        if v.get("gpu_memory_total_bytes") and "gpu_memory_used_bytes" in v:
            cols[f"gpu_{key}_memory_used_ratio"] = v["gpu_memory_used_bytes"] / v["gpu_memory_total_bytes"]
            info[key]["memory_total_bytes"] = v["gpu_memory_total_bytes"]
        if "gpu_power_watts" in v:
            cols[f"gpu_{key}_power_watts"] = v["gpu_power_watts"]
        if "gpu_energy_joules_total" in v:
            energy[key] = v["gpu_energy_joules_total"]
    return cols, energy, info


def dialect(samples: Samples) -> str | None:
    """The server whose names the page carries (vLLM first: the simulator serves vLLM and TGI names)."""
    for name, prefix in PREFIXES:
        if any(n.startswith(prefix) for n in samples):
            return name
    return None


def buckets(samples: Samples, base: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound, summed over its label sets."""
    out: dict[float, float] = {}
    for labels, value in samples.get(base + "_bucket", []):
        try:
            le = float(labels.get("le", "nan"))
        except ValueError:
            continue
        if le == le:
            out[le] = out.get(le, 0.0) + value
    return out


@dataclass(frozen=True)
class Quantile:
    """A quantile of histogram buckets: the bucket ``(lo, hi]`` it fell in and ``value``,
    interpolated inside it as Prometheus's histogram_quantile does (``lo`` in the +Inf bucket).
    ``first``: the first bucket (``lo`` 0): all that is known is ``< hi``."""

    value: float
    lo: float
    hi: float
    first: bool

    @property
    def kind(self) -> str:
        """``<`` (first bucket: below ``hi``), ``>`` (+Inf bucket: above ``lo``) or ``~``
        (between two finite bounds: ``value`` is an estimate)."""
        return "<" if self.first else ">" if self.hi == float("inf") else "~"


def bucket_range(q: float, cumulative: list[tuple[float, float]]) -> Quantile | None:
    """The q-quantile of cumulative ``(upper bound, count)`` pairs (sorted) with its bucket;
    None without observations."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for i, (bound, count) in enumerate(cumulative):
        if count >= rank:
            if bound == float("inf"):
                return Quantile(lo_bound, lo_bound, bound, False)  # only "> lo" (0 with no finite bound)
            if count == lo_count:
                return Quantile(bound, lo_bound, bound, i == 0)
            value = lo_bound + (bound - lo_bound) * (rank - lo_count) / (count - lo_count)
            return Quantile(value, lo_bound, bound, i == 0)
        lo_bound, lo_count = bound, count
    return Quantile(lo_bound, lo_bound, float("inf"), False)


def bucket_quantile(q: float, cumulative: list[tuple[float, float]]) -> float | None:
    """The q-quantile as Prometheus's histogram_quantile gives it: linear inside the bucket,
    the last finite bound in the +Inf bucket; None without observations. A number even where
    only a bound is known: :func:`bucket_range` says which."""
    r = bucket_range(q, cumulative)
    return None if r is None else r.value


def delta_quantiles(
    now: dict[float, float], prev: dict[float, float] | None
) -> tuple[Quantile, Quantile] | None:
    """(p50, p99) of the observations between two cumulative bucket snapshots; None when none
    (or on a counter reset)."""
    if prev is None or set(now) != set(prev):
        return None
    delta = [(le, now[le] - prev[le]) for le in sorted(now)]
    if any(d < 0 for _, d in delta) or not delta or delta[-1][1] <= 0:
        return None
    p50, p99 = bucket_range(0.50, delta), bucket_range(0.99, delta)
    return None if p50 is None or p99 is None else (p50, p99)


#: suffixes of a bucket quantile's columns: ``<q>_ms`` (an estimate, only between two finite
#: bounds), ``<q>_lo_ms`` and ``<q>_hi_ms`` (its bucket; no ``_hi_ms`` in the +Inf bucket)
VALUE, LO, HI = "_ms", "_lo_ms", "_hi_ms"


def quantile_columns(prefix: str, r: Quantile) -> dict[str, float]:
    """One quantile's columns, in ms (``prefix``: e.g. ``server_queue_time_p99``)."""
    cols = {prefix + LO: r.lo * 1000.0}
    if r.hi != float("inf"):
        cols[prefix + HI] = r.hi * 1000.0
    if r.kind == "~":
        cols[prefix + VALUE] = r.value * 1000.0
    return cols


class ServerSeries:
    """The LLM server's columns; keeps the previous scrape's cumulative values for deltas."""

    def __init__(self) -> None:
        self.dialect: str | None = None
        self._prev: dict[str, float] = {}
        self._prev_t: float | None = None
        self._prev_hists: dict[str, dict[float, float]] = {}

    def update(self, samples: Samples, t: float) -> dict[str, float]:
        d = dialect(samples)
        if d is None:
            return {}
        if d != self.dialect:  # first scrape, or the server changed: start the deltas afresh
            self.dialect, self._prev, self._prev_t, self._prev_hists = d, {}, None, {}
        cols: dict[str, float] = {}
        for col, names in _GAUGES[d].items():
            for n in names:
                values = [v for _, v in samples.get(n, [])]
                if values:
                    cols[col] = max(values) if col.endswith("_ratio") else sum(values)
                    break
        now: dict[str, float] = {}
        for col, base in _MEANS[d].items():
            s, c = _total(samples, base + "_sum"), _total(samples, base + "_count")
            if s is not None and c is not None:
                now[col + ":sum"], now[col + ":count"] = s, c
                ds, dc = self._delta(col + ":sum", s), self._delta(col + ":count", c)
                if ds is not None and dc:
                    cols[col] = ds / dc * 1000.0
        hists: dict[str, dict[float, float]] = {}
        for col, base in _QUANTILES[d].items():
            b = buckets(samples, base)
            if b:
                hists[col] = b
                pq = delta_quantiles(b, self._prev_hists.get(col))
                if pq is not None:
                    cols.update(quantile_columns(col + "_p50", pq[0]))
                    cols.update(quantile_columns(col + "_p99", pq[1]))
        dt = t - self._prev_t if self._prev_t is not None else 0.0
        short = self._prev_t is not None and dt < MIN_RATE_S  # e.g. the last pull at the stop
        for col, names in _RATES[d].items():
            v = next((x for x in (_total(samples, n) for n in names) if x is not None), None)
            if v is not None:
                if short and col in self._prev:  # a few tokens over a few ms is no rate: carry on
                    now[col] = self._prev[col]
                    continue
                now[col] = v
                dv = self._delta(col, v)
                if dv is not None and dt > 0:
                    cols[col] = dv / dt
        self._prev, self._prev_hists = now, hists
        if not short:
            self._prev_t = t
        return cols

    def _delta(self, key: str, value: float) -> float | None:
        """Increase since the last scrape; None on the first scrape or a counter reset."""
        prev = self._prev.get(key)
        if prev is None or value < prev:
            return None
        return value - prev


@dataclass
class SeriesStats:
    """Running mean and max of each column over the scrapes of one run; for a bucket quantile
    (``<q>_ms`` beside its ``<q>_lo_ms``), the scrapes where it was only a bound are counted apart:
    ``below_samples`` in the first bucket (``below_ms``: its upper bound), ``above_samples`` in
    the +Inf one (``above_ms``: the last finite bound), never averaged in as values; the bounds'
    own columns are left out of the summary (that entry says it)."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, values: dict[str, float]) -> None:
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + 1
            self.maxima[k] = max(self.maxima.get(k, v), v)
            if k.endswith(LO) and k[: -len(LO)] + VALUE not in values:  # a bound only
                q = k[: -len(LO)]
                side, bound = ("below", values[q + HI]) if q + HI in values else ("above", v)
                b = self.bounds.setdefault(q + VALUE, {})
                b[side + "_samples"] = b.get(side + "_samples", 0) + 1
                b[side + "_ms"] = max(b.get(side + "_ms", bound), bound)

    def summary(self, prefix: str) -> dict[str, dict[str, float | int]]:
        keys = sorted(
            k for k in {*self.sums, *self.bounds} if k.startswith(prefix) and not k.endswith((LO, HI))
        )
        return {
            k: {
                **({"mean": self.sums[k] / self.counts[k], "max": self.maxima[k]} if k in self.sums else {}),
                "samples": self.counts.get(k, 0),
                **self.bounds.get(k, {}),
            }
            for k in keys
        }


def energy_between(samples: list[tuple[float, float]], t0: float, t1: float) -> tuple[float, float]:
    """Joules a cumulative energy counter gained over [t0, t1], and the seconds of it covered.

    Linear between samples (the counter's rise is shared out by time overlap); a drop means
    the counter was reset (driver reload), and the new value is the rise since then.
    """
    joules = covered = 0.0
    for (ta, ea), (tb, eb) in zip(samples, samples[1:], strict=False):
        if tb <= ta:
            continue
        overlap = min(tb, t1) - max(ta, t0)
        if overlap <= 0:
            continue
        rise = eb - ea if eb >= ea else eb
        joules += rise * overlap / (tb - ta)
        covered += overlap
    return joules, covered
