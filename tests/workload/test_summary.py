"""workload/summary.py: the prompt-length error and per-request figures, kept as counts of values."""

from __future__ import annotations

import tracemalloc

from llm_users.metrics import RequestRecord
from llm_users.workload.summary import WorkloadStats


def rec(i: int, achieved: int) -> RequestRecord:
    return RequestRecord(f"r{i}", "n", "b", "m", start_time=1.0, ttft_ns=1, e2e_ns=2, output_tokens=3,
                         input_tokens=achieved, target_input_tokens=512)


def test_input_error_figures() -> None:
    w = WorkloadStats()
    for i, achieved in enumerate([512, 512, 510, 530]):
        w.add(rec(i, achieved))
    e = w.input_error()
    assert e is not None
    assert (e["requests"], e["exact_share"], e["abs_tokens"]["max"], e["mean_signed_tokens"]) == (4, 0.5, 18, 4.0)
    assert e["histogram"] == {"-2": 1, "0": 2, "18": 1}
    assert e["achieved"] == {"p50": 512, "p99": 530, "min": 510, "max": 530}


def test_memory_grows_with_distinct_values_not_with_requests() -> None:
    """Value -> requests counts: once every length has been seen, more requests cost nothing
    (arrays took 24 bytes a request for the whole run, lists ~70; issue 33's soak, issue 34's
    master at 950 records/s)."""
    w = WorkloadStats()
    for i in range(1000):
        w.add(rec(i, 500 + i % 300))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(20_000):
        w.add(rec(i, 500 + i % 300))
    per_request = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    tracemalloc.stop()
    assert per_request < 1, per_request


def test_counted_percentiles_are_the_nearest_rank_ones_of_every_value() -> None:
    import math
    import random

    def _pct(sorted_values: list[float], p: float) -> float:  # nearest rank of a sorted list: the reference
        return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))]

    rng = random.Random(5)
    values = [rng.choice([512, 512, 512, 511, 515, 480, 600]) for _ in range(997)]
    w = WorkloadStats()
    for i, v in enumerate(values):
        w.add(rec(i, v))
    e = w.input_error()
    absd = sorted(abs(v - 512) for v in values)
    rel = sorted(abs(v - 512) / 512 for v in values)
    assert e["abs_tokens"] == {"p50": _pct(absd, 50), "p99": _pct(absd, 99), "max": absd[-1]}
    assert e["pct"]["p99"] == 100 * _pct(rel, 99) and e["pct"]["max"] == 100 * rel[-1]
    assert e["achieved"] == {"p50": _pct(sorted(values), 50), "p99": _pct(sorted(values), 99), "min": 480, "max": 600}
    assert e["mean_signed_tokens"] == sum(v - 512 for v in values) / 997 and e["requests"] == 997
