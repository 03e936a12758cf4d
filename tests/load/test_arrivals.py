"""Arrival laws: means, burstiness, the KS test (which must reject what is not exponential),
seeded schedules, and one-line errors for bad input."""

from __future__ import annotations

import math
import random

import pytest

from llm_users.errors import ConfigError
from llm_users.load.arrivals import ArrivalLaw, ks_critical, ks_exponential, parse_arrival, schedule_offsets


@pytest.mark.parametrize(("text", "law"), [("poisson", ArrivalLaw("poisson")), ("constant", ArrivalLaw("constant")),
                                           ("gamma:0.5", ArrivalLaw("gamma", 0.5)), (None, ArrivalLaw("poisson")),
                                           ("GAMMA:4", ArrivalLaw("gamma", 4.0))])
def test_parse(text, law) -> None:
    assert parse_arrival(text) == law


@pytest.mark.parametrize("text", ["uniform", "gamma:0", "gamma:-1", "gamma:x", "gamma:inf"])
def test_parse_rejects(text) -> None:
    with pytest.raises(ConfigError, match="--llm-arrival"):
        parse_arrival(text)


@pytest.mark.parametrize("law", [ArrivalLaw("constant"), ArrivalLaw("poisson"), ArrivalLaw("gamma", 0.25),
                                 ArrivalLaw("gamma", 4.0)])
def test_mean_gap_is_one_over_rate(law) -> None:
    rng = random.Random(1)
    gaps = [law.gap_s(50.0, rng) for _ in range(40000)]
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 50, rel=0.03)


@pytest.mark.parametrize("k", [0.25, 1.0, 4.0])
def test_gamma_burstiness_is_vllm_bench_definition(k) -> None:
    """Shape K, scale 1/(rate K): coefficient of variation 1/sqrt(K)."""
    rng = random.Random(2)
    gaps = [ArrivalLaw("gamma", k).gap_s(10.0, rng) for _ in range(40000)]
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert sd / mean == pytest.approx(1 / math.sqrt(k), rel=0.05)


def test_ks_accepts_poisson_and_rejects_other_laws() -> None:
    n = 3000
    crit = ks_critical(n)
    offs = schedule_offsets(ArrivalLaw("poisson"), 20.0, 5, n)
    gaps = [b - a for a, b in zip([0.0, *offs], offs, strict=False)]
    assert ks_exponential(gaps, 20.0) < crit
    assert ks_exponential(gaps, 30.0) > crit  # the wrong rate is caught
    for law in (ArrivalLaw("constant"), ArrivalLaw("gamma", 0.3), ArrivalLaw("gamma", 3.0)):
        rng = random.Random(3)
        assert ks_exponential([law.gap_s(20.0, rng) for _ in range(n)], 20.0) > crit, law


def test_same_seed_same_schedule() -> None:
    a = schedule_offsets(ArrivalLaw("gamma", 0.5), 10.0, 42, 500)
    assert a == schedule_offsets(ArrivalLaw("gamma", 0.5), 10.0, 42, 500)
    assert a != schedule_offsets(ArrivalLaw("gamma", 0.5), 10.0, 43, 500)
