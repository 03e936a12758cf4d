"""sim/text.py: deterministic, prefix-stable text and the input token estimate."""

from __future__ import annotations

from llm_users.sim.text import TokenSource, count_input_tokens, expected_text, expected_tokens, vocabulary


def test_text_is_deterministic_and_prefix_stable():
    a = expected_text(1, "hello world", 50)
    assert a == expected_text(1, "hello world", 50)
    assert expected_text(1, "hello world", 10) == "".join(expected_tokens(1, "hello world", 50)[:10])
    assert a != expected_text(2, "hello world", 50) and a != expected_text(1, "hello there", 50)
    toks = expected_tokens(1, "hello world", 50)
    assert all(t.startswith(" ") and t[1:].isalpha() and t[1:].isascii() for t in toks)
    src = TokenSource(1)
    words = vocabulary()
    assert [words[i] for i in src.indices("hello world", 5)] == toks[:5]
    assert [words[i] for i in src.indices("hello world", 50)] == toks
    assert len(set(vocabulary())) == len(vocabulary())


def test_input_token_estimate():
    assert count_input_tokens("one two  three\nfour") == 4
    assert count_input_tokens("") == 1
