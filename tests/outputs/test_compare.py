"""outputs/compare.py: --fail-on rules and the bootstrap verdicts on known data."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llm_users.outputs.compare import CompareError, Run, parse_rules, verdicts


def _run(values: list[float]) -> Run:
    return Run(Path("x"), "x", {}, values={"ttft": values, "tpot": values, "e2e": values})


def test_rules() -> None:
    base = {"ttft.p50": 100.0, "output_tokens_per_s": 1000.0, "failures": 0}
    other = {"ttft.p50": 111.0, "output_tokens_per_s": 940.0, "failures": 2}
    got = {r.text: r.check(base, other)[0] for r in parse_rules(
        "ttft.p50>+10%, ttft.p50>+12%, ttft.p50>+10ms, ttft.p50>120, output_tokens_per_s<-5%, failures>0")}
    assert got == {"ttft.p50>+10%": True, "ttft.p50>+12%": False, "ttft.p50>+10ms": True, "ttft.p50>120": False,
                   "output_tokens_per_s<-5%": True, "failures>0": True}
    with pytest.raises(CompareError, match="cannot read"):
        parse_rules("ttft.p50 >> 3")
    with pytest.raises(CompareError, match="unknown metric"):
        parse_rules("nope.p50>1")[0].check(base, other)


def test_verdicts_on_known_samples() -> None:
    rng = random.Random(1)
    a = [rng.lognormvariate(4.6, 0.15) for _ in range(600)]
    same = [rng.lognormvariate(4.6, 0.15) for _ in range(600)]
    slower = [x * 1.2 for x in (rng.lognormvariate(4.6, 0.15) for _ in range(600))]
    for v in verdicts(_run(a), _run(same), 300, 0.02):
        assert v.verdict == "no significant difference", v
    by = {v.metric: v.verdict for v in verdicts(_run(a), _run(slower), 300, 0.02)}
    assert by["ttft.p50"] == by["e2e.p50"] == "regressed"
    few = verdicts(_run(a[:100]), _run(slower[:100]), 300, 0.02)
    assert {v.verdict for v in few if v.metric.endswith("p99")} == {"too few requests"}
