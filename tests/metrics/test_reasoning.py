"""metrics/reasoning.py: the reasoning block (reasoning and answer apart) and its exact merge
(issue 30 item 3)."""

from __future__ import annotations

from llm_users.metrics import Stats, StatsByName
from tests.metrics.records import MS
from tests.metrics.records import reasoning_records as _records


def test_reasoning_block_splits_itl_and_counts() -> None:
    s = Stats()
    for r in _records(40, 1):
        s.add(r)
    recs = _records(40, 1)
    reasoned = [r for r in recs if r.reasoning_chunks]
    out = s.summary()
    block = out["reasoning"]
    assert block["requests"] == len(reasoned) > 0
    assert block["reasoning_tokens"] == sum(r.reasoning_tokens or 0 for r in recs)
    assert block["answer_tokens"] == out["output_tokens"] - block["reasoning_tokens"]
    assert block["reasoning_tokens_estimated_requests"] == sum(r.reasoning_tokens_source == "estimated" for r in recs)
    assert block["reasoning_chunks"] == sum(r.reasoning_chunks for r in recs)
    assert block["answer_chunks"] == sum(r.chunks - r.reasoning_chunks for r in reasoned)
    assert block["itl_reasoning"]["count"] == sum(r.reasoning_chunks - 1 for r in reasoned)
    assert block["itl_answer"]["count"] == sum(r.chunks - r.reasoning_chunks - 1 for r in reasoned)
    assert out["ttfo"]["count"] == len(recs) and out["ttst"]["count"] == sum(r.chunks > 1 for r in recs)
    assert out["ttfo"]["max"] == max(r.ttfo_ns or 0 for r in recs) / MS


def test_merge_in_wire_form_is_exact() -> None:
    recs = _records(60, 2)
    whole, a, b = StatsByName(), StatsByName(), StatsByName()
    for i, r in enumerate(recs):
        whole.add(r)
        (a if i % 2 else b).add(r)
    merged = StatsByName()
    merged.merge_wire(a.to_wire())
    merged.merge_wire(b.to_wire())
    got, want = merged.summary()["overall"], whole.summary()["overall"]
    for key in ("ttfo", "ttst", "reasoning"):
        assert got[key] == want[key], key
