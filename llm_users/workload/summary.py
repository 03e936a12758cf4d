"""The workload's part of the run summary, from the merged records (master or local runner):

- ``workload``: what the source was (dataset path and sha256, synthetic targets and how they
  were made exact) and, for synthetic prompts, the achieved input length (the server's count)
  against the target: error p50/p99/max in tokens and percent, share exact;
- ``by_turn``: one entry per session turn index (TTFT, E2E, input/output tokens);
- ``by_prefix``: TTFT split by shared prefix, and by prefix-cache hit where the server reports
  cached prompt tokens;
- ``images`` (requests that sent images): images per request, the bytes sent for them (base64, as
  on the wire), and the server's prompt tokens per request; TTFT by image count.
  The input-length error above leaves these requests out: their target is the text's, and the
  server counts the images' tokens on top.

Warm-up and cool-down records are left out, as everywhere.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from llm_users.metrics import Distribution, RequestRecord, Stats
from llm_users.metrics.tokens import nearest_rank

_CACHED_KEYS = ("cache_read_input_tokens", "cachedContentTokenCount", "cached_tokens", "cached_input_tokens")


def _cached(rec: RequestRecord) -> int | None:
    """Cached prompt tokens when the server said (None: it did not say)."""
    server = rec.server
    if not server:  # most records: the server said nothing of its own
        return None
    for key in _CACHED_KEYS:
        if isinstance(server.get(key), int | float):
            return int(server[key])
    return None


class WorkloadStats:
    def __init__(self) -> None:
        self.by_turn: dict[int, Stats] = {}
        # value -> requests: as many entries as distinct values (a fitted 512-token prompt: one or
        # two), not one a request (arrays of 24 bytes a request grew a master 82 MB/h at 950/s)
        self.errors: Counter[int] = Counter()  # achieved - target, tokens
        self.rel: Counter[float] = Counter()  # |achieved - target| / target
        self.achieved: Counter[int] = Counter()
        self.by_prefix: dict[int, Stats] = {}
        self.cache_hit: dict[bool, Stats] = {}
        self.by_images: dict[int, list[Any]] = {}  # image count -> [requests, TTFT of the successes] (0 included)
        self.image_bytes = 0
        self.image_prompt_tokens = 0  # the server's prompt tokens of requests with images, summed
        self.image_token_requests = 0  # ... and how many of them said

    def add(self, rec: RequestRecord) -> None:
        if rec.warmup or rec.cooldown:
            return
        if rec.turn is not None:
            st = self.by_turn.get(rec.turn)
            if st is None:
                st = self.by_turn[rec.turn] = Stats()
            st.add(rec)
        self._image(rec)
        if (rec.ok and rec.target_input_tokens and rec.input_tokens is not None and rec.turn in (None, 1)
                and not rec.image_count):
            d = rec.input_tokens - rec.target_input_tokens
            self.errors[d] += 1
            self.achieved[rec.input_tokens] += 1
            self.rel[abs(d) / rec.target_input_tokens] += 1
        if rec.prefix_id is not None:
            st = self.by_prefix.get(rec.prefix_id)
            if st is None:
                st = self.by_prefix[rec.prefix_id] = Stats()
            st.add(rec)
        cached = _cached(rec)
        if cached is not None:
            hit = cached > 0
            st = self.cache_hit.get(hit)
            if st is None:
                st = self.cache_hit[hit] = Stats()
            st.add(rec)

    def _image(self, rec: RequestRecord) -> None:
        entry = self.by_images.get(rec.image_count)
        if entry is None:
            entry = self.by_images[rec.image_count] = [0, Distribution()]
        entry[0] += 1
        if rec.ok and rec.ttft_ns is not None:
            entry[1].add(rec.ttft_ns)
        self.image_bytes += rec.image_bytes
        if rec.image_count and rec.ok and rec.input_tokens is not None:
            self.image_prompt_tokens += rec.input_tokens
            self.image_token_requests += 1

    def images(self) -> dict[str, Any] | None:
        """summary.json ``workload.images``: None when no request sent an image."""
        with_images = {k: v for k, v in self.by_images.items() if k}
        if not with_images:
            return None
        requests = sum(n for n, _ in with_images.values())
        images = sum(k * n for k, (n, _) in with_images.items())
        said = self.image_token_requests
        return {
            "requests": requests,
            "images": images,
            "images_per_request": images / requests,
            "bytes_sent": self.image_bytes,
            "bytes_per_request": self.image_bytes / requests,
            "bytes_per_image": self.image_bytes / images,
            "prompt_tokens_per_request": self.image_prompt_tokens / said if said else None,
            "by_count": [{"images": k, "requests": n, "ttft": ttft.summary_ms()}
                         for k, (n, ttft) in sorted(self.by_images.items())],
        }

    def input_error(self) -> dict[str, Any] | None:
        n = sum(self.errors.values())
        if not n:
            return None
        absd: Counter[int] = Counter()
        for e, k in self.errors.items():
            absd[abs(e)] += k
        rel = self.rel
        clipped: Counter[int] = Counter()
        for e, k in self.errors.items():
            clipped[max(-100, min(100, e))] += k
        return {
            "requests": n,
            "exact_share": self.errors.get(0, 0) / n,
            "abs_tokens": {"p50": nearest_rank(absd, 50), "p99": nearest_rank(absd, 99), "max": max(absd)},
            "pct": {"p50": 100 * (nearest_rank(rel, 50) or 0), "p99": 100 * (nearest_rank(rel, 99) or 0),
                    "max": 100 * max(rel)},
            "mean_signed_tokens": sum(e * k for e, k in self.errors.items()) / n,
            # achieved - target, tokens -> requests (clipped to +-100 so it stays small)
            "histogram": {str(k): v for k, v in sorted(clipped.items())},
            "achieved": {"p50": nearest_rank(self.achieved, 50), "p99": nearest_rank(self.achieved, 99),
                         "min": min(self.achieved), "max": max(self.achieved)},
        }

    def turns(self) -> list[dict[str, Any]]:
        out = []
        for turn in sorted(self.by_turn):
            s = self.by_turn[turn].summary()
            ok = s["successes"]
            out.append({
                "turn": turn,
                "requests": s["requests"],
                "failures": s["failures"],
                "ttft": s["ttft"],
                "e2e": s["e2e"],
                "tpot": s["tpot"],
                "input_tokens_mean": s["input_tokens"] / ok if ok else None,
                "output_tokens_mean": s["output_tokens"] / ok if ok else None,
            })
        return out

    def prefixes(self) -> dict[str, Any] | None:
        if not self.by_prefix and not self.cache_hit:
            return None
        out: dict[str, Any] = {}
        if self.by_prefix:
            out["by_prefix"] = [{"prefix": k, "requests": self.by_prefix[k].requests,
                                 "ttft": self.by_prefix[k].summary()["ttft"]} for k in sorted(self.by_prefix)]
        if self.cache_hit:
            out["by_cache_hit"] = {("hit" if k else "miss"): {"requests": v.requests, "ttft": v.summary()["ttft"]}
                                   for k, v in sorted(self.cache_hit.items())}
        return out


def attach(environment: Any, run: Any) -> WorkloadStats | None:
    """Master or local runner: watch the merged records and add the sections to the summary."""
    collector = getattr(run, "collector", None)
    if collector is None:
        return None
    stats = WorkloadStats()
    collector.observers.append(stats.add)

    def hook(summary: dict[str, Any]) -> None:
        from llm_users.workload.build import source_for

        block: dict[str, Any] = {}
        try:
            user_cls = next((u for u in environment.user_classes or [] if hasattr(u, "backend")), None)
            block["source"] = source_for(run.current_config.workload_for(user_cls)).describe()
        except Exception as e:  # noqa: BLE001 - the summary must still be written
            block["source"] = {"error": str(e)}
        err = stats.input_error()
        if err is not None:
            block["input_tokens_error"] = err
        pre = stats.prefixes()
        if pre is not None:
            block["prefixes"] = pre
        images = stats.images()
        if images is not None:
            block["images"] = images
        summary["workload"] = block
        summary["by_turn"] = stats.turns()

    run.summary_hooks.append(hook)
    return stats
