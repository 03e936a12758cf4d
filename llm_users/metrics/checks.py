"""What a finished record shows the server did: implausible usage, SLOs met, sampling not honoured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_users.metrics.record import RequestRecord

#: Why a record's token counts are estimates, with what a person needs to know (summary.json, console).
TOKEN_REASONS = {
    "no_usage": "the server reported no output token count: estimated from the chunks",
    "usage_implausible": "the server's usage could not be true (0 output tokens for streamed text, fewer tokens "
                         "than token-bearing chunks, or 0 input tokens for a prompt): estimated instead",
}


def check_usage(rec: RequestRecord, *, chunk_has_a_token: bool, prompt_tokens: Callable[[], int | None]) -> None:
    """Server counts that cannot be true are not believed (LiteLLM's Gemini bridge streams text
    with ``usageMetadata`` counts of 0). Output: 0 tokens although text was streamed, or, where
    every token-bearing chunk carries at least one counted token (``chunk_has_a_token``, the
    route's rule), fewer tokens than chunks; the chunk count is used instead. Input: 0 tokens for
    a non-empty prompt; ``prompt_tokens()`` (the workload's target, else a characters/4 guess) is
    used instead. Either marks the record ``usage_implausible``."""
    if rec.tokens_source == "usage" and rec.chunks:
        out = rec.output_tokens or 0
        if (out == 0 and rec.output_chars) or (chunk_has_a_token and out < rec.chunks):
            rec.output_tokens = rec.chunks
            rec.tokens_source = "estimated"
            rec.tokens_reason = "usage_implausible"
    if rec.input_tokens == 0:
        guess = prompt_tokens()
        if guess:
            rec.input_tokens = guess
            rec.input_tokens_source = "estimated"
            rec.tokens_reason = rec.tokens_reason or "usage_implausible"


def prompt_tokens_guess(messages: list[dict[str, Any]]) -> int | None:
    """About four characters a token: the guess for a prompt whose server count is not to be had."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return max(1, round(chars / 4)) if chars else None


#: Metrics an SLO can limit (``--llm-slo``, parsed in :mod:`.slo`).
SLO_METRICS = ("ttft", "tpot", "e2e", "itl")


def slo_results(rec: RequestRecord, slos: dict[str, float]) -> dict[str, bool]:
    """Which SLOs (metric -> limit in ns) this request met (all False for a failure)."""
    if not rec.ok:
        return {k: False for k in slos}
    values = {"ttft": rec.ttft_ns, "tpot": rec.tpot_ns, "e2e": rec.e2e_ns,
              "itl": max(rec.itl_ns) if rec.itl_ns else 0}
    return {k: values[k] is not None and values[k] <= limit for k, limit in slos.items()}

#: The sampling checks, each with the hint a person needs (summary.json and the console say it once).
SAMPLING_HINTS = {
    "over_max_tokens": "the server reported more output tokens than the requested maximum: it ignores the "
                       "max-token field this backend sends (llama.cpp ignores max_completion_tokens); use the "
                       "vLLM user (max_tokens) against a server that is not OpenAI's",
    "short_under_ignore_eos": "the server stopped before the requested maximum although ignore_eos was sent: it "
                              "does not honour ignore_eos, so output lengths vary between requests",
    "model_mismatch": "the server answered with another model than the one requested: check --llm-model",
}


def sampling_issues(rec: RequestRecord, max_tokens: int, ignore_eos_sent: bool) -> list[str] | None:
    """What a successful request shows the server did not honour: output tokens (the server's
    own count) above the requested maximum, short of it although ignore_eos was sent, or a
    model other than the one asked for (a dated or tagged variant, ``gpt-4o-mini-2024-07-18`` for
    ``gpt-4o-mini``, is the same model)."""
    issues = []
    out = rec.output_tokens if rec.tokens_source == "usage" else None
    if out is not None and out > max_tokens:
        issues.append("over_max_tokens")
    elif out is not None and ignore_eos_sent and out < max_tokens:
        issues.append("short_under_ignore_eos")
    asked = rec.model
    if rec.server_model and asked and asked != "default" and not rec.server_model.removeprefix("models/").startswith(
            asked.removeprefix("models/")):
        issues.append("model_mismatch")
    return issues or None


#: Values below 2**_UNIT_BITS µs have buckets one microsecond wide in a 3-significant-figure
