"""Deterministic output text and token counts.

The simulator "generates" words from a fixed vocabulary: token ``i`` of the answer to a prompt
is a function of (seed, prompt, i) only, so the same prompt gets the same text every time, and
a shorter answer is a prefix of a longer one. Every token is one word with a leading space
(``" kalo"``), plain ASCII letters, so a client can count tokens and the JSON encoding of a
token needs no escaping.

Tests compute the expected answer with :func:`expected_text`; the canonical prompt of each
protocol (what the seed is mixed with) is built by :func:`join_prompt`: the text pieces of the
request (system prompt first, then every message) joined by a newline.
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from functools import cache
from typing import Any

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ei")
_CODAS = ("", "n", "r", "s")

_CACHE_SIZE = 1024


@cache
def vocabulary() -> tuple[str, ...]:
    """512 distinct pseudo-words, each with a leading space."""
    words = []
    for onset in _ONSETS:
        for vowel in _VOWELS:
            for coda in _CODAS:
                words.append(f" {onset}{vowel}{coda}")
    return tuple(words)


@cache
def vocabulary_bytes() -> tuple[bytes, ...]:
    return tuple(w.encode() for w in vocabulary())


class TokenSource:
    """Token index sequences per (seed, prompt), cached (LRU) since load tests repeat prompts."""

    def __init__(self, seed: int, cache_size: int = _CACHE_SIZE) -> None:
        self.seed = seed
        self._cache: OrderedDict[bytes, list[int]] = OrderedDict()
        self._size = cache_size

    def indices(self, prompt: str, n: int) -> list[int]:
        key = _prompt_key(self.seed, prompt)
        seq = self._cache.get(key)
        if seq is None or len(seq) < n:
            seq = _generate(key, max(n, 16))
            self._cache[key] = seq
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return seq if len(seq) == n else seq[:n]


def _prompt_key(seed: int, prompt: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{prompt}".encode(), digest_size=16).digest()


def _generate(key: bytes, n: int) -> list[int]:
    rng = random.Random(key)
    size = len(vocabulary())
    return [int(rng.random() * size) for _ in range(n)]


def expected_tokens(seed: int, prompt: str, n: int) -> list[str]:
    """The first ``n`` tokens the simulator started with ``--seed seed`` answers to ``prompt``."""
    words = vocabulary()
    return [words[i] for i in _generate(_prompt_key(seed, prompt), max(n, 16))[:n]]


def expected_text(seed: int, prompt: str, n: int) -> str:
    return "".join(expected_tokens(seed, prompt, n))


def count_input_tokens(prompt: str) -> int:
    """The simulator's prompt-length estimate: whitespace-separated words, at least 1."""
    return max(1, len(prompt.split()))


def content_text(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of parts with ``text`` (OpenAI,
    Anthropic, Gemini parts all use that key)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        text = content.get("text")
        return text if isinstance(text, str) else ""
    if isinstance(content, list):
        return "\n".join(t for t in (content_text(p) for p in content) if t)
    return str(content)


def join_prompt(pieces: list[str]) -> str:
    return "\n".join(p for p in pieces if p)
