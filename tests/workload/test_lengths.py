"""workload/lengths.py: the three length forms and their errors."""

from __future__ import annotations

import random

import pytest

from llm_users.errors import ConfigError
from llm_users.workload.lengths import parse_lengths


def test_fixed_uniform_normal() -> None:
    rng = random.Random(1)
    assert {parse_lengths("512", "x").sample(rng) for _ in range(20)} == {512}
    u = [parse_lengths("128:2048", "x").sample(rng) for _ in range(2000)]
    assert min(u) >= 128 and max(u) <= 2048 and 1000 < sum(u) / len(u) < 1180
    n = [parse_lengths("normal:512,64", "x").sample(rng) for _ in range(4000)]
    mean = sum(n) / len(n)
    sd = (sum((x - mean) ** 2 for x in n) / len(n)) ** 0.5
    assert abs(mean - 512) < 5 and abs(sd - 64) < 4


@pytest.mark.parametrize("bad", ["0", "abc", "10:5", "normal:5", "normal:-1,2", "1:2:3"])
def test_errors_name_the_option(bad: str) -> None:
    with pytest.raises(ConfigError, match="--llm-input-tokens: cannot read"):
        parse_lengths(bad, "--llm-input-tokens")
