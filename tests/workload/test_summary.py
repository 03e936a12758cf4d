"""workload/summary.py: the prompt-length error and per-request figures, kept in arrays."""

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


def test_a_request_costs_bytes_not_a_list_of_objects() -> None:
    """Three values a request for the whole run: 24 bytes in arrays (lists took ~70 with their
    float and int objects), so a soak's master does not grow by them (issue 33)."""
    w = WorkloadStats()
    for i in range(1000):
        w.add(rec(i, 500 + i % 300))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(20_000):
        w.add(rec(i, 500 + i % 300))
    per_request = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    tracemalloc.stop()
    assert per_request < 40, per_request
