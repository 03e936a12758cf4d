"""outputs/compare_config.py: which runs llm-compare calls comparable."""

from __future__ import annotations

from tests.metrics.records import stats


def test_llm_compare_calls_runs_of_other_batch_sizes_not_comparable() -> None:
    from llm_users.outputs.compare_config import blocking, config_rows

    def summary(batch: str) -> dict:
        return {**stats().summary(), "config": {"llm_batch_size": batch, "llm_dataset": "short"}}

    assert blocking(config_rows([summary("4"), summary("8")]), 1) == ["workload"]
    assert blocking(config_rows([summary("4"), summary("4")]), 1) == []


def test_the_load_row_is_the_users_that_ran_in_the_measured_window() -> None:
    """Issue 53 item 1: two runs of `-u 8` with different ramps compared as the same load."""
    from llm_users.outputs.compare_config import blocking, config_rows, load_plan

    def summary(users: dict | None) -> dict:
        s = {**stats().summary(), "setup": {"load_plan": {"kind": "users", "users": 8, "text": "8 users"}}}
        if users is not None:
            s["window"] = {"users": {"target": 8, **users}}
        return s

    plateau, ramp = summary({"min": 8, "max": 8}), summary({"min": 2, "max": 8})
    assert load_plan(plateau) == "8 users" and load_plan(ramp) == "2-8 users (8 asked)"
    assert load_plan(summary({"min": 3, "max": 5})) == "3-5 users (8 asked)"
    assert load_plan(summary({"min": 5, "max": 5})) == "5 users (8 asked)"
    assert load_plan(summary(None)) == "8 users"  # an older summary: the users asked
    assert blocking(config_rows([plateau, ramp]), 1) == ["load"]
    assert blocking(config_rows([plateau, summary(None)]), 1) == []
