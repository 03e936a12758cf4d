"""outputs/timeline.py: per-second rows from records."""

from __future__ import annotations

from llm_users.metrics import RequestRecord
from llm_users.outputs.timeline import COLUMNS, Timeline


def test_rows_per_second() -> None:
    t = Timeline()
    for i in range(4):
        t.add(RequestRecord(f"r{i}", "n", "b", "m", start_time=100.1 + i * 0.1, ttft_ns=int(50e6),
                            e2e_ns=int(1.5e9), itl_ns=[10_000_000, 12_000_000], output_tokens=3))
    t.add(RequestRecord("w", "n", "b", "m", start_time=100.0, warmup=True, e2e_ns=1))
    t.add(RequestRecord("f", "n", "b", "m", start_time=102.5, status="error", e2e_ns=1000))
    t.users(101.5, 8)
    rows = t.rows()
    assert [r["time"] for r in rows] == [100, 101, 102]
    assert list(rows[0])[: len(COLUMNS)] == COLUMNS
    assert rows[0]["requests_started"] == 4 and rows[0]["ttft_p50_ms"] == 50.0
    assert rows[1]["requests_finished"] == 4 and rows[1]["output_tokens_per_s"] == 12
    assert rows[1]["itl_p50_ms"] == 10.0 and rows[1]["itl_p99_ms"] == 12.0 and rows[1]["users"] == 8
    assert rows[2]["failures"] == 1


def test_settle_bounds_memory() -> None:
    t = Timeline(settle_s=5)
    t.add(RequestRecord("a", "n", "b", "m", start_time=10.0, ttft_ns=1, e2e_ns=1, itl_ns=[1]))
    t.settle(now=100.0)
    assert not t._open and t.rows()[0]["requests_finished"] == 1


def test_sliced_percentiles_equal_a_full_sort_and_pause_between_slices() -> None:
    import math
    import random
    from array import array

    from llm_users.outputs import timeline

    rng = random.Random(7)
    for n in (1, 5, timeline.SLICE, timeline.SLICE + 1, 14_000):
        values = array("q", (rng.randint(19_000_000, 60_000_000) for _ in range(n)))
        s = sorted(values)
        pauses: list[int] = []
        got = timeline.pcts_ms(values, (50, 99, 100), pause=lambda p=pauses: p.append(1))
        want = [s[max(0, min(n - 1, math.ceil(p / 100 * n) - 1))] / 1e6 for p in (50, 99, 100)]
        assert got == want, n
        assert len(pauses) == (0 if n <= timeline.SLICE else math.ceil(n / timeline.SLICE) + 2)
    assert timeline.pcts_ms(array("q"), (50,)) == [None]
