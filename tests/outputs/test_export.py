"""outputs/export.py: ``--llm-export vllm-bench``'s values."""

from __future__ import annotations

from llm_users.outputs.export import vllm_bench
from tests.metrics.records import stats


def test_max_concurrency_is_the_most_users_that_ran_in_the_measured_window() -> None:
    """Issue 53 item 1: a run of `-u 8` that reached 5 users exported max_concurrency 8."""
    summary = {**stats().summary(), "window": {"measured_s": 3.6, "users": {"min": 3, "max": 5, "target": 8}}}
    rows = [{"users": 5, "output_tokens_per_s": 10}]
    assert vllm_bench(summary, None, rows, 8)["max_concurrency"] == 5
    older = {**summary, "window": {"measured_s": 3.6}}  # no window.users: the users asked, else the peak
    assert vllm_bench(older, None, rows, 8)["max_concurrency"] == 8
    assert vllm_bench(older, None, rows, None)["max_concurrency"] == 5
