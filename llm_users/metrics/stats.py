"""Statistics pooled from records: one Stats per request name and overall, merged across processes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from llm_users.metrics.checks import SAMPLING_HINTS, TOKEN_REASONS, slo_results
from llm_users.metrics.distribution import BucketCounts, Distribution, bucket_counts
from llm_users.metrics.reasoning import ReasoningStats
from llm_users.metrics.record import FIRST_TOKEN_METRICS, LATENCY_METRICS, RequestRecord
from llm_users.metrics.tokens import TokenCounts


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
        # and "connect": measured requests that opened their own connection, its connect_ns (before
        # t0, in no latency figure; the openai SDK opens one for every streamed request)
        # and "waiting_first_byte": requests in flight at the stop that had no first byte yet, how
        # long each had waited (t0 to the stop): a server that accepts and never answers
        self.dists = {m: Distribution() for m in (*LATENCY_METRICS, *FIRST_TOKEN_METRICS, "connect",
                                                  "waiting_first_byte")}
        self.reasoning = ReasoningStats()
        self.requests = 0
        self.failures = 0
        self.failures_by_category: Counter[str] = Counter()
        self.input_tokens = 0
        self.output_tokens = 0
        self.input_per_request = TokenCounts()  # successful requests' token counts, exact
        self.output_per_request = TokenCounts()
        self.token_reasons: Counter[str] = Counter()  # records with an estimated count, by reason
        self.tpot_basis: Counter[str] = Counter()  # records with a TPOT, by its basis ("all" | "answer")
        self.excluded = 0
        self.interrupted = 0
        self.cancelled = 0  # --llm-cancel-after: abandoned on purpose, counted, out of the statistics
        self.stale_reconnects = 0
        self.sampling: Counter[str] = Counter()
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.tool_calls = 0  # successful answers with a tool call (--llm-tools)
        self.structured: Counter[str] = Counter()  # --llm-response-format: "valid" / "invalid" answers
        self.inputs = 0  # successful requests' inputs (a chat request is one; a batch its size)
        self.kinds: Counter[str] = Counter()  # embed/rerank requests measured (chat is the rest)

    def add(self, rec: RequestRecord, itl: BucketCounts | None = None) -> None:
        """Count one record; ``itl``: its ITL gaps already bucketed (:class:`StatsByName`)."""
        if rec.reconnected:
            self.stale_reconnects += 1
        if rec.status == "interrupted":  # cut by the stop: counted, never a success or failure
            self.interrupted += 1
            if rec.ttfb_ns is None and rec.e2e_ns is not None:  # still waiting for the server's first byte
                self.dists["waiting_first_byte"].add(rec.e2e_ns)
            return
        if rec.status == "cancelled":  # abandoned by the client on purpose: counted, never a success or failure
            self.cancelled += 1
            return
        if rec.warmup:
            self.excluded += 1
            return
        if rec.cooldown:
            self.excluded_cooldown += 1
            return
        self.requests += 1
        self._window(rec.start_time, rec.end_time)
        if rec.connect_ns is not None:
            self.dists["connect"].add(rec.connect_ns)
        if rec.kind != "chat":
            self.kinds[rec.kind] += 1
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
        if rec.ttfo_ns is not None:
            d["ttfo"].add(rec.ttfo_ns)
        if rec.ttst_ns is not None:
            d["ttst"].add(rec.ttst_ns)
        if itl is None and rec.itl_ns:
            itl = bucket_counts(rec.itl_ns)
        if itl is not None:
            d["itl"].add_counts(itl)
        tpot, basis = rec.tpot_with_basis()
        if tpot is not None and basis is not None:
            d["tpot"].add(tpot)
            self.tpot_basis[basis] += 1
        if rec.e2e_ns is not None:
            d["e2e"].add(rec.e2e_ns)
        self.input_tokens += rec.input_tokens or 0
        self.output_tokens += rec.output_tokens or 0
        self.inputs += rec.inputs or 1
        self.input_per_request.add(rec.input_tokens or 0)
        self.output_per_request.add(rec.output_tokens or 0)
        self.reasoning.add(rec)
        if rec.sampling_issues:
            self.sampling.update(rec.sampling_issues)
        if rec.tool_call:
            self.tool_calls += 1
        if rec.structured_valid is not None:
            self.structured["valid" if rec.structured_valid else "invalid"] += 1
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
            "cancelled": self.cancelled,
            "stale_reconnects": self.stale_reconnects,
            "connections_opened": self.dists["connect"].count,
            "sampling_issues": {k: {"requests": n, "hint": SAMPLING_HINTS.get(k, "")}
                                for k, n in sorted(self.sampling.items())},
        }
        for m, dist in self.dists.items():
            out[m] = dist.summary_ms()
        out["tpot_basis"] = {"all": self.tpot_basis["all"], "answer": self.tpot_basis["answer"]}
        out["input_tokens"] = self.input_tokens
        out["output_tokens"] = self.output_tokens
        out["reasoning"] = self.reasoning.summary(self.output_tokens)
        out["estimated_token_requests"] = self.estimated_token_requests
        out["estimated_token_reasons"] = {k: {"requests": n, "hint": TOKEN_REASONS.get(k, "")}
                                          for k, n in sorted(self.token_reasons.items())}
        out["duration_s"] = dur
        out["output_tokens_per_s"] = self.output_tokens / dur if dur > 0 else None
        out["total_tokens_per_s"] = (self.input_tokens + self.output_tokens) / dur if dur > 0 else None
        out["input_tokens_per_request"] = self.input_per_request.summary()
        out["output_tokens_per_request"] = self.output_per_request.summary()
        out["requests_per_s"] = self.requests / dur if dur > 0 else None
        out["tool_calls"] = self.tool_calls
        out["structured_valid"] = self.structured["valid"]
        out["structured_invalid"] = self.structured["invalid"]
        # embeddings and rerank (a chat request is one input): docs/metrics.md "Embeddings and rerank"
        out["inputs"] = self.inputs
        out["inputs_per_s"] = self.inputs / dur if dur > 0 else None
        out["input_tokens_per_s"] = self.input_tokens / dur if dur > 0 else None
        out["request_kinds"] = dict(self.kinds)
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
            "input_per_request": self.input_per_request.to_wire(),
            "output_per_request": self.output_per_request.to_wire(),
            "token_reasons": dict(self.token_reasons),
            "tpot_basis": dict(self.tpot_basis),
            "excluded": self.excluded,
            "excluded_cooldown": self.excluded_cooldown,
            "interrupted": self.interrupted,
            "cancelled": self.cancelled,
            "stale_reconnects": self.stale_reconnects,
            "sampling": dict(self.sampling),
            "good": self.good,
            "slo_met": dict(self.slo_met),
            "reasoning": self.reasoning.to_wire(),
            "first_start": self.first_start,
            "last_end": self.last_end,
            "tool_calls": self.tool_calls,
            "structured": dict(self.structured),
            "inputs": self.inputs,
            "kinds": dict(self.kinds),
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        for m, dw in w["dists"].items():
            self.dists[m].merge_wire(dw)
        self.requests += w["requests"]
        self.failures += w["failures"]
        self.failures_by_category.update(w["failures_by_category"])
        self.input_tokens += w["input_tokens"]
        self.output_tokens += w["output_tokens"]
        self.input_per_request.merge_wire(w.get("input_per_request"))
        self.output_per_request.merge_wire(w.get("output_per_request"))
        self.token_reasons.update(w["token_reasons"])
        self.tpot_basis.update(w.get("tpot_basis", {}))
        self.excluded += w["excluded"]
        self.excluded_cooldown += w["excluded_cooldown"]
        self.interrupted += w.get("interrupted", 0)
        self.cancelled += w.get("cancelled", 0)
        self.stale_reconnects += w.get("stale_reconnects", 0)
        self.sampling.update(w.get("sampling", {}))
        self.good += w["good"]
        self.slo_met.update(w["slo_met"])
        self.reasoning.merge_wire(w.get("reasoning"))
        self._window(w["first_start"], w["last_end"])
        self.tool_calls += w.get("tool_calls", 0)
        self.structured.update(w.get("structured", {}))
        self.inputs += w.get("inputs", 0)
        self.kinds.update(w.get("kinds", {}))


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
        return not (t.requests or t.excluded or t.excluded_cooldown or t.interrupted or t.cancelled)

    def merge_wire(self, w: dict[str, Any]) -> None:
        self.total.merge_wire(w["total"])
        for name, sw in w["by_name"].items():
            stats = self.by_name.get(name)
            if stats is None:
                stats = self.by_name[name] = Stats(self.slos)
            stats.merge_wire(sw)
