"""sim/stats.py: the simulator's counters: a fixed-bucket histogram (a value on a bound counts in
that bound's bucket, cumulative counts for Prometheus), the per-route counts, the chunk rate over
the last samples, and /_sim/stats' dict."""

from __future__ import annotations

import pytest

from llm_users.sim import stats as stats_module
from llm_users.sim.stats import E2E_BUCKETS, TTFT_BUCKETS, Hist, Stats


def test_a_histogram_counts_each_value_in_its_bucket_and_sums_them() -> None:
    h = Hist((0.1, 0.5, 1.0))
    for v in (0.05, 0.1, 0.3, 1.0, 7.0):
        h.observe(v)
    assert h.counts == [2, 1, 1, 1]  # 0.1 is <= 0.1: the first bucket; 7.0: +Inf
    assert h.cumulative() == [("0.1", 2), ("0.5", 3), ("1.0", 4), ("+Inf", 5)]
    assert h.count == 5 and h.sum == pytest.approx(8.45)
    assert Hist((1, 2)).cumulative() == [("1.0", 0), ("2.0", 0), ("+Inf", 0)]  # integer bounds: float labels


def test_vllms_bounds() -> None:
    assert TTFT_BUCKETS[0] == 0.001 and TTFT_BUCKETS[-1] == 2560.0 and list(TTFT_BUCKETS) == sorted(TTFT_BUCKETS)
    assert E2E_BUCKETS[-1] == 7680.0


def test_routes_are_counted_apart_and_reported_with_the_totals() -> None:
    s = Stats()
    s.route("/v1/chat/completions").served += 2
    s.route("/v1/chat/completions").errors += 1
    s.route("/generate").aborted += 1
    s.faults["reset"] = 3
    s.served, s.chunks = 2, 12
    d = s.as_dict(running=1, queued=4)
    assert d["by_route"] == {"/v1/chat/completions": {"started": 0, "served": 2, "aborted": 0, "errors": 1},
                             "/generate": {"started": 0, "served": 0, "aborted": 1, "errors": 0}}
    assert (d["served"], d["running"], d["queued"], d["chunks"], d["faults"]) == (2, 1, 4, 12, {"reset": 3})
    assert {"active", "rejected", "prompt_tokens", "generation_tokens", "images", "image_tokens", "cache_resets",
            "tokenize_calls", "uptime_s", "chunks_per_s"} <= set(d)
    d["faults"]["reset"] = 0
    assert s.faults == {"reset": 3}  # a copy


def test_the_chunk_rate_is_over_the_kept_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    now = {"t": 100.0}
    monkeypatch.setattr(stats_module.time, "monotonic", lambda: now["t"])
    s = Stats()
    now["t"] = 102.0
    s.chunks = 50
    assert s.chunks_per_s() == 25.0  # no sample yet: since start
    for i in range(8):  # one a second; six are kept
        s.chunks = 100 * i
        s.sample()
        now["t"] += 1.0
    s.chunks = 800
    # kept: (104, 200) .. (109, 700); now 110: (800 - 200) / (110 - 104)
    assert s.chunks_per_s() == 100.0
    assert s.as_dict(0, 0)["chunks_per_s"] == 100.0
