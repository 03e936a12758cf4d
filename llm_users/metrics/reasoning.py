"""Reasoning and answer apart: tokens, chunks and inter-token gaps of the requests that reasoned.

A reasoning model streams its thinking first (OpenAI-compatible ``delta.reasoning_content``,
Anthropic ``thinking_delta``, Gemini parts with ``thought: true``, Ollama ``message.thinking``)
and then the answer. The record counts the reasoning chunks (``reasoning_chunks``) and takes
``reasoning_tokens`` from the server's usage, or, where the server gives none, from the reasoning
chunks (``reasoning_tokens_source: "estimated"``). :class:`ReasoningStats` pools them for one
:class:`~llm_users.metrics.stats.Stats`: summary.json's ``reasoning`` block. Its two ITL
distributions split a request's gaps as every server streams (reasoning before the answer):
with ``r`` reasoning chunks, gaps ``[:r-1]`` end at a reasoning chunk, gaps ``[r:]`` at an answer
chunk after the first; the gap from the last reasoning chunk to the first answer chunk is in
neither (it is TTFO minus the last reasoning stamp), only in the overall ITL. Definitions in
docs/metrics.md.
"""

from __future__ import annotations

from typing import Any

from llm_users.metrics.distribution import Distribution
from llm_users.metrics.record import RequestRecord


class ReasoningStats:
    """Reasoning vs answer for the successful measured records of one Stats."""

    __slots__ = ("requests", "reasoning_tokens", "estimated", "reasoning_chunks", "answer_chunks",
                 "itl_reasoning", "itl_answer")

    def __init__(self) -> None:
        self.requests = 0  # successful records with at least one reasoning chunk
        self.reasoning_tokens = 0  # summed over every successful record (0 where none)
        self.estimated = 0  # records whose reasoning count is estimated from reasoning chunks
        self.reasoning_chunks = 0
        self.answer_chunks = 0  # chunks of the requests that reasoned, that were answer
        self.itl_reasoning = Distribution()
        self.itl_answer = Distribution()

    def add(self, rec: RequestRecord) -> None:
        """One successful measured record (the caller filters)."""
        self.reasoning_tokens += rec.reasoning_tokens or 0
        r = rec.reasoning_chunks
        if not r:
            return
        self.requests += 1
        if rec.reasoning_tokens_source == "estimated":
            self.estimated += 1
        self.reasoning_chunks += r
        self.answer_chunks += rec.chunks - r
        itl = rec.itl_ns
        if r > 1:
            self.itl_reasoning.add_many(itl[: r - 1])
        if len(itl) > r:
            self.itl_answer.add_many(itl[r:])

    def summary(self, output_tokens: int) -> dict[str, Any]:
        """summary.json's ``reasoning`` block; ``output_tokens``: the Stats' output total."""
        return {
            "requests": self.requests,
            "reasoning_tokens": self.reasoning_tokens,
            "answer_tokens": max(output_tokens - self.reasoning_tokens, 0),
            "reasoning_tokens_estimated_requests": self.estimated,
            "reasoning_chunks": self.reasoning_chunks,
            "answer_chunks": self.answer_chunks,
            "itl_reasoning": self.itl_reasoning.summary_ms(),
            "itl_answer": self.itl_answer.summary_ms(),
        }

    def to_wire(self) -> dict[str, Any]:
        return {"requests": self.requests, "reasoning_tokens": self.reasoning_tokens, "estimated": self.estimated,
                "reasoning_chunks": self.reasoning_chunks, "answer_chunks": self.answer_chunks,
                "itl_reasoning": self.itl_reasoning.to_wire(), "itl_answer": self.itl_answer.to_wire()}

    def merge_wire(self, w: dict[str, Any] | None) -> None:
        if not w:
            return
        self.requests += w["requests"]
        self.reasoning_tokens += w["reasoning_tokens"]
        self.estimated += w["estimated"]
        self.reasoning_chunks += w["reasoning_chunks"]
        self.answer_chunks += w["answer_chunks"]
        self.itl_reasoning.merge_wire(w["itl_reasoning"])
        self.itl_answer.merge_wire(w["itl_answer"])
