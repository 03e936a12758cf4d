"""Per-request records and the exact, mergeable statistics built from them. No I/O.

A :class:`RequestRecord` holds everything measured for one LLM request, in integer
nanoseconds from ``time.perf_counter_ns()``. :class:`Stats` pools records into HDR histograms
(microsecond resolution, 3 significant digits) whose serialized form merges exactly across
processes, plus exact sums, minima and maxima. Metric definitions are in docs/metrics.md.
"""

from __future__ import annotations

import base64
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hdrh.histogram import HdrHistogram

#: Latency metrics kept as histograms, in the order reports show them.
LATENCY_METRICS = ("ttft", "ttfb", "itl", "tpot", "e2e")
#: Percentiles every report gives, and the keys they are written under.
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}

_HIGHEST_US = 3_600_000_000  # one hour, in microseconds
_SIG_FIGS = 3


@dataclass(slots=True)
class RequestRecord:
    """Everything measured for one request. Durations are integer nanoseconds."""

    request_id: str
    name: str
    backend: str
    model: str
    start_time: float = 0.0  # wall clock (Unix s) at t0: for timelines only, never for durations
    t0_ns: int = 0  # perf_counter_ns just before the request's first byte is written
    connect_ns: int | None = None  # TCP/TLS connect time when this request opened a connection
    ttfb_ns: int | None = None
    ttft_ns: int | None = None
    e2e_ns: int | None = None
    itl_ns: list[int] = field(default_factory=list)
    chunks: int = 0  # token-bearing chunks received
    output_chars: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_source: str = "none"  # "usage" (server count) | "estimated" (chunk count) | "none"
    tokens_reason: str | None = None  # why estimated: "no_usage" | "usage_implausible" (see check_usage)
    input_tokens_source: str = "none"  # "usage" | "estimated" (the server said 0 for a prompt) | "none"
    finish_reason: str | None = None
    status: str = "ok"  # "ok" | "error" | "interrupted" (in flight when the run stopped)
    error_category: str | None = None
    error_message: str | None = None
    http_status: int | None = None  # the status line the server sent (200 for in-stream failures)
    error_code: int | str | None = None  # an in-stream error payload's own code/kind
    partial_output_tokens: int | None = None  # a failed request's last running count before it failed
    reconnected: bool = False  # a stale idle keep-alive connection was replaced before sending
    server_model: str | None = None  # the model the server says answered
    sampling_issues: list[str] | None = None  # what the server did not honour (see sampling_issues())
    response_bytes: int = 0
    server: dict[str, Any] | None = None  # server-side figures (Ollama durations, vLLM metrics)
    worker: str | None = None
    user: int | None = None
    warmup: bool = False  # excluded from statistics: warm-up (kept in requests.jsonl)
    cooldown: bool = False  # excluded from statistics: cool-down
    client: str = "raw"
    backoff_s: float = 0.0  # how long the user waited after this request (backoff.py), 0 = none
    # the workload (llm_users/workload): what was asked for, beside what the server counted
    target_input_tokens: int | None = None  # synthetic prompts: the prompt-token target
    target_output_tokens: int | None = None  # the max output tokens sent
    session_id: str | None = None
    turn: int | None = None  # 1-based turn index within a session
    prefix_id: int | None = None  # which shared prefix the prompt started with
    reply: list[str] | None = None  # output text pieces, kept only when a session needs the reply; not written
    scheduled_ns: int | None = None  # open loop: perf_counter_ns the request was due (t0 - this = lag)
    inflight_wait_ns: int | None = None  # open loop: part of the lag spent waiting for the in-flight cap
    stage: int | None = None  # stage or sweep point the request started in (set where stats merge)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def tpot_ns(self) -> float | None:
        """(E2E - TTFT) / (output_tokens - 1): the decode time per token after the first."""
        if self.e2e_ns is None or self.ttft_ns is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e_ns - self.ttft_ns) / (self.output_tokens - 1)

    def token_chunk(self, now_ns: int, prev_ns: int, chars: int) -> None:
        """A token-bearing chunk arrived at ``now_ns``; ``prev_ns`` is when the previous one did.
        The first sets TTFT, every later one adds an ITL gap. ``chars``: output text length
        (0 for reasoning text)."""
        if self.ttft_ns is None:
            self.ttft_ns = now_ns - self.t0_ns
        else:
            self.itl_ns.append(now_ns - prev_ns)
        self.chunks += 1
        self.output_chars += chars

    def usage(self, input_tokens: int | None, output_tokens: int | None,
              reasoning_tokens: int | None = None, server: dict[str, Any] | None = None) -> None:
        """Token counts the server reported; later reports replace earlier ones field by field."""
        if input_tokens is not None:
            self.input_tokens = input_tokens
            self.input_tokens_source = "usage"
        if output_tokens is not None:
            self.output_tokens = output_tokens
            self.tokens_source = "usage"
        if reasoning_tokens is not None:
            self.reasoning_tokens = reasoning_tokens
        if server:
            self.server = server

    def settle_tokens(self) -> None:
        """At the end of a stream: without the server's count, estimate output tokens from chunks."""
        if self.output_tokens is None and self.chunks:
            self.output_tokens = self.chunks
            self.tokens_source = "estimated"
            self.tokens_reason = "no_usage"

    @property
    def end_time(self) -> float:
        return self.start_time + (self.e2e_ns or 0) / 1e9

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (lists shared, not copied: ``dataclasses.asdict`` deep-copies every
        ITL list, which showed up in the client's profile)."""
        d = {name: getattr(self, name) for name in _RECORD_ORDER}
        d["tpot_ns"] = self.tpot_ns
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        d = {k: v for k, v in d.items() if k in _RECORD_FIELDS}
        return cls(**d)


_RECORD_ORDER = tuple(f for f in RequestRecord.__dataclass_fields__ if f != "reply")

#: Why a record's token counts are estimates, with what a person needs to know (summary.json, console).
TOKEN_REASONS = {
    "no_usage": "the server reported no output token count: estimated from the chunks",
    "usage_implausible": "the server's usage could not be true (0 output tokens for streamed text, fewer tokens "
                         "than token-bearing chunks, or 0 input tokens for a prompt): estimated instead",
}


def check_usage(rec: RequestRecord, *, chunk_has_a_token: bool, prompt_tokens: Callable[[], int | None]) -> None:
    """Server counts that cannot be true are not believed (LiteLLM's Gemini bridge streams text
    with ``usageMetadata`` counts of 0). Output: 0 tokens although text was streamed, or, where
    every token-bearing chunk carries at least one counted token (``chunk_has_a_token``, the
    route's rule), fewer tokens than chunks; the chunk count is used instead. Input: 0 tokens for
    a non-empty prompt; ``prompt_tokens()`` (the workload's target, else a characters/4 guess) is
    used instead. Either marks the record ``usage_implausible``."""
    if rec.tokens_source == "usage" and rec.chunks:
        out = rec.output_tokens or 0
        if (out == 0 and rec.output_chars) or (chunk_has_a_token and out < rec.chunks):
            rec.output_tokens = rec.chunks
            rec.tokens_source = "estimated"
            rec.tokens_reason = "usage_implausible"
    if rec.input_tokens == 0:
        guess = prompt_tokens()
        if guess:
            rec.input_tokens = guess
            rec.input_tokens_source = "estimated"
            rec.tokens_reason = rec.tokens_reason or "usage_implausible"


def prompt_tokens_guess(messages: list[dict[str, Any]]) -> int | None:
    """About four characters a token: the guess for a prompt whose server count is not to be had."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return max(1, round(chars / 4)) if chars else None


#: Metrics an SLO can limit (``--llm-slo``, parsed in :mod:`.slo`).
SLO_METRICS = ("ttft", "tpot", "e2e", "itl")


def slo_results(rec: RequestRecord, slos: dict[str, float]) -> dict[str, bool]:
    """Which SLOs (metric -> limit in ns) this request met (all False for a failure)."""
    if not rec.ok:
        return {k: False for k in slos}
    values = {"ttft": rec.ttft_ns, "tpot": rec.tpot_ns, "e2e": rec.e2e_ns,
              "itl": max(rec.itl_ns) if rec.itl_ns else 0}
    return {k: values[k] is not None and values[k] <= limit for k, limit in slos.items()}
_RECORD_FIELDS = set(_RECORD_ORDER)


#: The sampling checks, each with the hint a person needs (summary.json and the console say it once).
SAMPLING_HINTS = {
    "over_max_tokens": "the server reported more output tokens than the requested maximum: it ignores the "
                       "max-token field this backend sends (llama.cpp ignores max_completion_tokens); use the "
                       "vLLM user (max_tokens) against a server that is not OpenAI's",
    "short_under_ignore_eos": "the server stopped before the requested maximum although ignore_eos was sent: it "
                              "does not honour ignore_eos, so output lengths vary between requests",
    "model_mismatch": "the server answered with another model than the one requested: check --llm-model",
}


def sampling_issues(rec: RequestRecord, max_tokens: int, ignore_eos_sent: bool) -> list[str] | None:
    """What a successful request shows the server did not honour: output tokens (the server's
    own count) above the requested maximum, short of it although ignore_eos was sent, or a
    model other than the one asked for (a dated or tagged variant, ``gpt-4o-mini-2024-07-18`` for
    ``gpt-4o-mini``, is the same model)."""
    issues = []
    out = rec.output_tokens if rec.tokens_source == "usage" else None
    if out is not None and out > max_tokens:
        issues.append("over_max_tokens")
    elif out is not None and ignore_eos_sent and out < max_tokens:
        issues.append("short_under_ignore_eos")
    asked = rec.model
    if rec.server_model and asked and asked != "default" and not rec.server_model.removeprefix("models/").startswith(
            asked.removeprefix("models/")):
        issues.append("model_mismatch")
    return issues or None


#: Values below 2**_UNIT_BITS µs have buckets one microsecond wide in a 3-significant-figure
#: histogram (2048 sub-buckets); above, each doubling of the value doubles the bucket width.
_UNIT_BITS = 11


def bucket_floor_us(us: int) -> int:
    """The lowest value of the histogram bucket ``us`` falls in (the same counts slot)."""
    b = us.bit_length() - _UNIT_BITS
    return us >> b << b if b > 0 else us


def acyclic(h: HdrHistogram) -> HdrHistogram:
    """``h`` with its reference cycle broken. hdrh's histogram and its encoder refer to each
    other, so a dropped histogram (and its 188 KB counts array) was freed only by a full gc
    pass, which a frozen, steady heap (gctune.py) makes rare: a worker dropped a dozen of
    them at every ship interval and its memory grew by megabytes a minute (issue 10). The
    encoder is only ever used through its histogram, so a weak proxy back to it suffices."""
    h.encoder.histogram = weakref.proxy(h)
    return h


def new_histogram() -> HdrHistogram:
    return acyclic(HdrHistogram(1, _HIGHEST_US, _SIG_FIGS))


class BucketCounts(NamedTuple):
    """Values bucketed as :class:`Distribution` keeps them, with their exact count, sum and range."""

    counts: dict[int, int]
    count: int
    sum_ns: int
    min_ns: int
    max_ns: int


def bucket_counts(values: list[int]) -> BucketCounts:
    """Bucket a non-empty list of integer ns values (one loop, no HDR call per value)."""
    counts: dict[int, int] = {}
    get = counts.get
    unit = _UNIT_BITS
    for ns in values:
        us = (ns + 500) // 1000
        b = us.bit_length() - unit
        if b > 0:
            us = us >> b << b
        counts[us] = get(us, 0) + 1
    lo, hi = min(values), max(values)
    if hi // 1000 > _HIGHEST_US or lo < 0:  # rare: clamp the odd value
        for us in [u for u in counts if u > _HIGHEST_US or u < 0]:
            n = counts.pop(us)
            c = min(max(us, 0), _HIGHEST_US)
            counts[c] = counts.get(c, 0) + n
    return BucketCounts(counts, len(values), sum(values), lo, hi)


class Distribution:
    """One latency metric: an HDR histogram in microseconds plus exact count/sum/min/max in ns.

    Adding is on the hot path (every ITL gap), and ``HdrHistogram.record_value`` costs about
    5 µs in Python, so values are first counted in a dict (a fraction of a microsecond) and
    recorded into the histogram in bulk whenever it is read. The dict is keyed by the lowest
    microsecond value of the histogram bucket a value falls in (:func:`bucket_floor_us`), not
    by the microsecond itself: the histogram counts exactly the same, and the dict holds at
    most one key per bucket in use (a few thousand), however long a run goes without reading
    it. Keyed per microsecond it grew with every new value of a long run's tails (issue 10).

    The histogram itself (184 KB of counts) is made only when it is first read or merged into:
    a fresh one costs 0.1-0.2 ms of page faults with the hub blocked, and the self-check made one
    every second for its lag window (a 0.44 ms first-token stamp at 60 streams, issue 14).
    """

    __slots__ = ("_hist", "_pending", "count", "sum_ns", "min_ns", "max_ns")

    def __init__(self) -> None:
        self._hist: HdrHistogram | None = None
        self._pending: dict[int, int] = {}
        self.count = 0
        self.sum_ns = 0.0
        self.min_ns: float | None = None
        self.max_ns: float | None = None

    @property
    def hist(self) -> HdrHistogram:
        """The histogram with every value added so far."""
        h = self._histogram()
        if self._pending:
            for us, n in self._pending.items():
                h.record_value(us, n)
            self._pending = {}
        return h

    def _histogram(self) -> HdrHistogram:
        """The histogram as it is (pending counts not recorded), made on first use."""
        h = self._hist
        if h is None:
            h = self._hist = new_histogram()
        return h

    def add(self, ns: float) -> None:
        us = bucket_floor_us(min(max(int(ns + 500) // 1000, 0), _HIGHEST_US))
        p = self._pending
        p[us] = p.get(us, 0) + 1
        self.count += 1
        self.sum_ns += ns
        if self.min_ns is None or ns < self.min_ns:
            self.min_ns = ns
        if self.max_ns is None or ns > self.max_ns:
            self.max_ns = ns

    def add_many(self, values: list[int]) -> None:
        """Add a list of integer ns values (a request's ITL gaps) at C speed where possible."""
        if values:
            self.add_counts(bucket_counts(values))

    def add_counts(self, b: BucketCounts) -> None:
        """Add values already bucketed by :func:`bucket_counts` (a request's ITL gaps go into
        the overall and the per-name distribution: bucketed once, issue 14)."""
        self._add_pending(b.counts)
        self._merge_exact(b.count, b.sum_ns, b.min_ns, b.max_ns)

    def _add_pending(self, counts: dict[int, int]) -> None:
        p = self._pending
        get = p.get
        for us, n in counts.items():
            p[us] = get(us, 0) + n

    def percentile_ms(self, p: float) -> float | None:
        """The histogram's value at ``p`` (its bucket's highest equivalent value), kept
        within the exact min and max so a bucket's width never shows past the real extremes."""
        if not self.count:
            return None
        us = self.hist.get_value_at_percentile(p)
        return min(max(us * 1000, self.min_ns or 0), self.max_ns or 0) / 1e6

    def summary_ms(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"count": self.count}
        for key, p in PERCENTILES.items():
            out[key] = self.percentile_ms(p)
        if self.count:
            out["mean"] = self.sum_ns / self.count / 1e6
            out["min"] = (self.min_ns or 0) / 1e6
            out["max"] = (self.max_ns or 0) / 1e6
        else:
            out["mean"] = out["min"] = out["max"] = None
        return out

    def merge(self, other: Distribution) -> None:
        """Add ``other`` in: its not-yet-recorded values as counts (a dict merge, no HDR call
        per value), whatever it had recorded histogram to histogram."""
        if other._hist is not None and other._hist.total_count:
            self._histogram().add(other._hist)
        self._add_pending(other._pending)
        self._merge_exact(other.count, other.sum_ns, other.min_ns, other.max_ns)

    def _merge_exact(self, count: int, sum_ns: float, mn: float | None, mx: float | None) -> None:
        self.count += count
        self.sum_ns += sum_ns
        if mn is not None and (self.min_ns is None or mn < self.min_ns):
            self.min_ns = mn
        if mx is not None and (self.max_ns is None or mx > self.max_ns):
            self.max_ns = mx

    def to_wire(self) -> dict[str, Any]:
        """A msgpack/JSON-safe form that :meth:`from_wire` restores exactly."""
        return {
            "hist": base64.b64encode(self.hist.encode()).decode() if self.count else None,
            "count": self.count,
            "sum_ns": self.sum_ns,
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
        }

    def merge_wire(self, wire: dict[str, Any]) -> None:
        if not wire["count"]:
            return
        h = self.hist
        h.add(acyclic(HdrHistogram.decode(base64.b64decode(wire["hist"]), h.b64_wrap)))  # decode_and_add, acyclic
        self._merge_exact(wire["count"], wire["sum_ns"], wire["min_ns"], wire["max_ns"])


class Stats:
    """Statistics of one request name (or of all of them): counts, tokens, distributions, SLOs.

    Warm-up and cool-down records are counted in ``excluded``/``excluded_cooldown`` and kept
    out of everything else. ``slos`` maps a metric to its limit in ns (see :mod:`.slo`).
    """

    def __init__(self, slos: dict[str, float] | None = None) -> None:
        self.slos = slos or {}
        self.good = 0
        self.slo_met: Counter[str] = Counter()
        self.excluded_cooldown = 0
        self.dists = {m: Distribution() for m in LATENCY_METRICS}
        self.requests = 0
        self.failures = 0
        self.failures_by_category: Counter[str] = Counter()
        self.input_tokens = 0
        self.output_tokens = 0
        self.token_reasons: Counter[str] = Counter()  # records with an estimated count, by reason
        self.excluded = 0
        self.interrupted = 0
        self.stale_reconnects = 0
        self.sampling: Counter[str] = Counter()
        self.first_start: float | None = None
        self.last_end: float | None = None

    def add(self, rec: RequestRecord, itl: BucketCounts | None = None) -> None:
        """Count one record; ``itl``: its ITL gaps already bucketed (:class:`StatsByName`)."""
        if rec.reconnected:
            self.stale_reconnects += 1
        if rec.status == "interrupted":  # cut by the stop: counted, never a success or failure
            self.interrupted += 1
            return
        if rec.warmup:
            self.excluded += 1
            return
        if rec.cooldown:
            self.excluded_cooldown += 1
            return
        self.requests += 1
        self._window(rec.start_time, rec.end_time)
        if self.slos:
            met = slo_results(rec, self.slos)
            for k, ok in met.items():
                if ok:
                    self.slo_met[k] += 1
            if all(met.values()):
                self.good += 1
        if not rec.ok:
            self.failures += 1
            self.failures_by_category[rec.error_category or "error"] += 1
            return
        d = self.dists
        if rec.ttfb_ns is not None:
            d["ttfb"].add(rec.ttfb_ns)
        if rec.ttft_ns is not None:
            d["ttft"].add(rec.ttft_ns)
        if itl is None and rec.itl_ns:
            itl = bucket_counts(rec.itl_ns)
        if itl is not None:
            d["itl"].add_counts(itl)
        tpot = rec.tpot_ns
        if tpot is not None:
            d["tpot"].add(tpot)
        if rec.e2e_ns is not None:
            d["e2e"].add(rec.e2e_ns)
        self.input_tokens += rec.input_tokens or 0
        self.output_tokens += rec.output_tokens or 0
        if rec.sampling_issues:
            self.sampling.update(rec.sampling_issues)
        if rec.tokens_reason is not None or rec.tokens_source == "estimated":  # output or input estimated
            self.token_reasons[rec.tokens_reason or "no_usage"] += 1

    @property
    def estimated_token_requests(self) -> int:
        """Records whose output or input count is an estimate (every reason together)."""
        return sum(self.token_reasons.values())

    def _window(self, start: float | None, end: float | None) -> None:
        if start is not None and (self.first_start is None or start < self.first_start):
            self.first_start = start
        if end is not None and (self.last_end is None or end > self.last_end):
            self.last_end = end

    @property
    def duration_s(self) -> float:
        if self.first_start is None or self.last_end is None:
            return 0.0
        return max(self.last_end - self.first_start, 0.0)

    def summary(self, duration_s: float | None = None) -> dict[str, Any]:
        """A JSON-ready summary; percentiles in milliseconds under ``ttft.p50`` and so on."""
        dur = self.duration_s if duration_s is None else duration_s
        out: dict[str, Any] = {
            "requests": self.requests,
            "successes": self.requests - self.failures,
            "failures": self.failures,
            "failures_by_category": dict(self.failures_by_category),
            "excluded_warmup": self.excluded,
            "excluded_cooldown": self.excluded_cooldown,
            "interrupted": self.interrupted,
            "stale_reconnects": self.stale_reconnects,
            "sampling_issues": {k: {"requests": n, "hint": SAMPLING_HINTS.get(k, "")}
                                for k, n in sorted(self.sampling.items())},
        }
        for m, dist in self.dists.items():
            out[m] = dist.summary_ms()
        out["input_tokens"] = self.input_tokens
        out["output_tokens"] = self.output_tokens
        out["estimated_token_requests"] = self.estimated_token_requests
        out["estimated_token_reasons"] = {k: {"requests": n, "hint": TOKEN_REASONS.get(k, "")}
                                          for k, n in sorted(self.token_reasons.items())}
        out["duration_s"] = dur
        out["output_tokens_per_s"] = self.output_tokens / dur if dur > 0 else None
        out["requests_per_s"] = self.requests / dur if dur > 0 else None
        if self.slos:
            out["slo"] = {
                "limits_ms": {k: v / 1e6 for k, v in self.slos.items()},
                "good_requests": self.good,
                "goodput_rps": self.good / dur if dur > 0 else None,
                "share_meeting": {k: (self.slo_met[k] / self.requests if self.requests else None) for k in self.slos},
                "share_meeting_all": self.good / self.requests if self.requests else None,
            }
        return out

    def merge(self, other: Stats) -> None:
        self.merge_wire(other.to_wire())

    def to_wire(self) -> dict[str, Any]:
        return {
            "dists": {m: d.to_wire() for m, d in self.dists.items()},
            "requests": self.requests,
            "failures": self.failures,
            "failures_by_category": dict(self.failures_by_category),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "token_reasons": dict(self.token_reasons),
            "excluded": self.excluded,
            "excluded_cooldown": self.excluded_cooldown,
            "interrupted": self.interrupted,
            "stale_reconnects": self.stale_reconnects,
            "sampling": dict(self.sampling),
            "good": self.good,
            "slo_met": dict(self.slo_met),
            "first_start": self.first_start,
            "last_end": self.last_end,
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        for m, dw in w["dists"].items():
            self.dists[m].merge_wire(dw)
        self.requests += w["requests"]
        self.failures += w["failures"]
        self.failures_by_category.update(w["failures_by_category"])
        self.input_tokens += w["input_tokens"]
        self.output_tokens += w["output_tokens"]
        self.token_reasons.update(w["token_reasons"])
        self.excluded += w["excluded"]
        self.excluded_cooldown += w["excluded_cooldown"]
        self.interrupted += w.get("interrupted", 0)
        self.stale_reconnects += w.get("stale_reconnects", 0)
        self.sampling.update(w.get("sampling", {}))
        self.good += w["good"]
        self.slo_met.update(w["slo_met"])
        self._window(w["first_start"], w["last_end"])


class StatsByName:
    """Stats per request name plus the overall total."""

    def __init__(self, slos: dict[str, float] | None = None) -> None:
        self.slos = slos or {}
        self.total = Stats(self.slos)
        self.by_name: dict[str, Stats] = {}

    def add(self, rec: RequestRecord) -> None:
        itl = bucket_counts(rec.itl_ns) if rec.itl_ns else None  # once for both distributions
        self.total.add(rec, itl)
        stats = self.by_name.get(rec.name)
        if stats is None:
            stats = self.by_name[rec.name] = Stats(self.slos)
        stats.add(rec, itl)

    def summary(self) -> dict[str, Any]:
        return {
            "overall": self.total.summary(),
            "by_name": {name: s.summary() for name, s in sorted(self.by_name.items())},
        }

    def to_wire(self) -> dict[str, Any]:
        return {"total": self.total.to_wire(), "by_name": {n: s.to_wire() for n, s in self.by_name.items()}}

    @property
    def empty(self) -> bool:
        t = self.total
        return not (t.requests or t.excluded or t.excluded_cooldown or t.interrupted)

    def merge_wire(self, w: dict[str, Any]) -> None:
        self.total.merge_wire(w["total"])
        for name, sw in w["by_name"].items():
            stats = self.by_name.get(name)
            if stats is None:
                stats = self.by_name[name] = Stats(self.slos)
            stats.merge_wire(sw)
