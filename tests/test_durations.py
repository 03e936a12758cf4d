"""durations.py: the one duration rule every ``--llm-*`` option uses (a number and its unit; a
bare number refused, with a hint)."""

from __future__ import annotations

import pytest

from llm_users.durations import parse_duration_ns, parse_duration_s
from llm_users.errors import ConfigError


@pytest.mark.parametrize(("text", "ns"), [
    ("250ns", 250), ("40us", 40_000), ("40µs", 40_000), ("500ms", 5e8), ("30s", 3e10),
    ("2m", 1.2e11), ("1h", 3.6e12), ("1.5s", 1.5e9), (".5s", 5e8), (" 10 ms ", 1e7),
])
def test_each_documented_duration_form(text: str, ns: float) -> None:
    assert parse_duration_ns(text, "--x") == pytest.approx(ns)


@pytest.mark.parametrize("text", ["30", "0.5", "", "ms", "5 parsecs", "-3s", "1h30m", "3d"])
def test_anything_else_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--llm-cooldown: cannot read .* as a duration"):
        parse_duration_ns(text, "--llm-cooldown")


def test_a_bare_number_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="bare number"):
        parse_duration_s("10", "--llm-cooldown")
