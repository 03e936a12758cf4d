"""metrics/checks.py: the usage counts a server reports, believed when they can be true."""

from __future__ import annotations

from tests.metrics.records import streamed as _streamed


def test_check_usage_believes_counts_that_can_be_true() -> None:
    from llm_users.metrics import check_usage

    rec = _streamed(4)
    rec.usage(10, 4)
    check_usage(rec, chunk_has_a_token=True, prompt_tokens=lambda: 99)
    assert (rec.output_tokens, rec.tokens_source, rec.tokens_reason) == (4, "usage", None)
    assert (rec.input_tokens, rec.input_tokens_source) == (10, "usage")
    multi = _streamed(4)
    multi.usage(10, 3)  # fewer tokens than chunks: possible where a chunk may carry none (Gemini thoughts)
    check_usage(multi, chunk_has_a_token=False, prompt_tokens=lambda: 99)
    assert (multi.output_tokens, multi.tokens_source) == (3, "usage")


def test_check_usage_replaces_counts_that_cannot_be_true() -> None:
    from llm_users.metrics import check_usage, prompt_tokens_guess

    zero = _streamed(5)
    zero.usage(0, 0)
    check_usage(zero, chunk_has_a_token=False, prompt_tokens=lambda: 42)
    assert (zero.output_tokens, zero.tokens_source, zero.tokens_reason) == (5, "estimated", "usage_implausible")
    assert (zero.input_tokens, zero.input_tokens_source) == (42, "estimated")
    short = _streamed(5)
    short.usage(7, 3)  # one token a chunk at least: 3 < 5 cannot be
    check_usage(short, chunk_has_a_token=True, prompt_tokens=lambda: 42)
    assert (short.output_tokens, short.tokens_reason, short.input_tokens) == (5, "usage_implausible", 7)
    reasoning_only = _streamed(3, text="")  # reasoning chunks (no visible text) with 0 output tokens
    reasoning_only.usage(7, 0, reasoning_tokens=3)
    check_usage(reasoning_only, chunk_has_a_token=False, prompt_tokens=lambda: 1)
    assert reasoning_only.tokens_source == "usage"
    assert prompt_tokens_guess([{"role": "user", "content": "x" * 40}]) == 10
    assert prompt_tokens_guess([{"role": "user", "content": ""}]) is None
