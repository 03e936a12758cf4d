"""protocols/sampling.py: the sampling settings every protocol shares: the project's fixed
defaults (the same work per request) and the values refused at once."""

from __future__ import annotations

import dataclasses

import pytest

from llm_users.protocols.sampling import Sampling


def test_the_defaults_make_every_request_do_the_same_work() -> None:
    s = Sampling()
    assert (s.max_tokens, s.temperature, s.top_p, s.ignore_eos) == (512, 0.0, 1.0, True)
    assert (s.min_tokens, s.seed, s.stop) == (None, None, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_tokens = 3  # type: ignore[misc]


@pytest.mark.parametrize(("kw", "says"), [
    ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
    ({"temperature": -0.1}, "temperature must be >= 0, got -0.1"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
])
def test_a_value_out_of_range_is_refused_naming_it(kw: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Sampling(**kw)


def test_the_edges_are_accepted() -> None:
    s = Sampling(max_tokens=1, temperature=0.0, top_p=1.0, stop=("\n",), seed=7, min_tokens=1)
    assert (s.max_tokens, s.top_p, s.stop, s.seed) == (1, 1.0, ("\n",), 7)
    assert Sampling(top_p=1e-9).top_p == 1e-9
