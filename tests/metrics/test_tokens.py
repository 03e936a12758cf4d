"""metrics/tokens.py: requests per token count, exact percentiles and mean, merged exactly through
the wire."""

from __future__ import annotations

import json

from llm_users.metrics.tokens import TokenCounts


def test_token_counts_percentile_and_mean_are_exact() -> None:
    t = TokenCounts()
    for v in (10, 10, 20, 30, 1000):
        t.add(v)
    assert t.percentile(50) == 20 and t.percentile(100) == 1000 and t.percentile(1) == 10
    assert t.summary() == {"p50": 20, "mean": 214.0, "count": 5}
    assert TokenCounts().summary() == {"p50": None, "mean": None, "count": 0}


def test_token_counts_merge_exactly_through_the_wire() -> None:
    a, b, both = TokenCounts(), TokenCounts(), TokenCounts()
    for i in range(101):
        (a if i % 2 else b).add(i * 7)
        both.add(i * 7)
    merged = TokenCounts()
    for part in (a, b):
        merged.merge_wire(json.loads(json.dumps(part.to_wire())))  # the wire is JSON: no int keys
    assert merged.summary() == both.summary() == {"p50": 350, "mean": 350.0, "count": 101}
