"""outputs/compare_config.py: which runs llm-compare calls comparable."""

from __future__ import annotations

from tests.metrics.records import stats


def test_llm_compare_calls_runs_of_other_batch_sizes_not_comparable() -> None:
    from llm_users.outputs.compare_config import blocking, config_rows

    def summary(batch: str) -> dict:
        return {**stats().summary(), "config": {"llm_batch_size": batch, "llm_dataset": "short"}}

    assert blocking(config_rows([summary("4"), summary("8")]), 1) == ["workload"]
    assert blocking(config_rows([summary("4"), summary("4")]), 1) == []
