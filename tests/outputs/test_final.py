"""outputs/final.py: what every output is handed at the stop (FinalData, the Output protocol),
and the summary hooks, each of which may fail alone."""

from __future__ import annotations

from llm_users.metrics import StatsByName
from llm_users.outputs import FinalData
from tests.outputs.test_registry import ToyOutput


def test_final_data_is_what_every_output_gets() -> None:
    final = FinalData({"overall": {"requests": 0}}, [], StatsByName())
    toy = ToyOutput()
    toy.write(final, None)
    assert toy.calls == [(0, None)]


def test_a_failing_summary_hook_is_one_line_and_the_rest_goes_on(caplog) -> None:
    from llm_users.outputs.final import apply_summary_hooks

    def broken(s):
        raise TypeError("boom")

    s: dict = {}
    apply_summary_hooks([broken, lambda s: s.update(ok=True)], s)
    assert s == {"ok": True}
    assert any("a summary part failed" in r.message for r in caplog.records)


def test_summary_hooks_run_in_order_on_one_summary_and_the_final_data_is_frozen() -> None:
    import dataclasses

    import pytest

    from llm_users.outputs.final import apply_summary_hooks

    s: dict = {"overall": {"requests": 2}}
    apply_summary_hooks([lambda s: s.update(first=s["overall"]["requests"]), lambda s: s.update(second=s["first"] + 1)], s)
    assert s == {"overall": {"requests": 2}, "first": 2, "second": 3}
    final = FinalData(s, [], StatsByName())
    with pytest.raises(dataclasses.FrozenInstanceError):
        final.summary = {}  # type: ignore[misc]
