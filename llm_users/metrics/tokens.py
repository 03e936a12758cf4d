"""Exact per-request token counts: how many requests had each input (or output) token count.

Token counts are small integers with few distinct values (a synthetic workload asks for one
length; a dataset's lengths spread over a few thousand values at most), so a counter of
``count -> requests`` is exact, small, and merges across processes by adding counters: the
p50 and mean of tokens per request are exact on a distributed run too (no histogram
bucketing). On the wire it is a list of ``[tokens, requests]`` pairs (JSON keeps no int keys).
"""

from __future__ import annotations

import math
from typing import Any


def nearest_rank(counts: dict[Any, int], p: float, n: int | None = None) -> Any:
    """The nearest-rank ``p`` percentile of the values ``counts`` holds (value -> how many
    times; ``n`` their total, summed when not given): the smallest value with at least ``p`` %
    of them at or below it (as HDR's ``get_value_at_percentile`` ranks); None when empty."""
    n = sum(counts.values()) if n is None else n
    if not n:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    seen = 0
    for v in sorted(counts):
        seen += counts[v]
        if seen >= rank:
            return v
    return max(counts)  # not reached: the counts add up to n


class TokenCounts:
    """Requests per token count, for the p50 and mean of tokens per request."""

    __slots__ = ("counts", "requests", "tokens")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.requests = 0
        self.tokens = 0

    def add(self, tokens: int) -> None:
        c = self.counts
        c[tokens] = c.get(tokens, 0) + 1
        self.requests += 1
        self.tokens += tokens

    def percentile(self, p: float) -> int | None:
        """The nearest-rank percentile: the smallest count with at least ``p`` % of the
        requests at or below it (as HDR's ``get_value_at_percentile`` ranks); None when empty."""
        return nearest_rank(self.counts, p, self.requests)

    def summary(self) -> dict[str, Any]:
        """``{"p50", "mean", "count"}``; p50 and mean None without requests."""
        return {"p50": self.percentile(50.0),
                "mean": self.tokens / self.requests if self.requests else None,
                "count": self.requests}

    def to_wire(self) -> list[list[int]]:
        return [[t, n] for t, n in self.counts.items()]

    def merge_wire(self, pairs: list[list[int]] | None) -> None:
        c = self.counts
        for t, n in pairs or ():
            t, n = int(t), int(n)
            c[t] = c.get(t, 0) + n
            self.requests += n
            self.tokens += t * n
