"""outputs/timeline.py: per-second rows from records."""

from __future__ import annotations

from typing import Any

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
    # the tokens and ITL gaps arrived in 100 (within 72 ms of the start), the requests ended in 101
    assert rows[0]["output_tokens_per_s"] == 12 and rows[1]["output_tokens_per_s"] == 0
    assert rows[0]["itl_p50_ms"] == 10.0 and rows[0]["itl_p99_ms"] == 12.0 and rows[1]["itl_p50_ms"] is None
    assert rows[1]["requests_finished"] == 4 and rows[1]["users"] == 8
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


def test_selected_percentiles_of_a_large_second_equal_the_sliced_ones(monkeypatch: Any) -> None:
    """Above SELECT_ABOVE values (a master's second) numpy selects the ranks: the same values as
    the slices find, ties and extremes included, and without numpy the slices still answer."""
    import math
    import random
    from array import array

    import pytest

    from llm_users.outputs import timeline

    pytest.importorskip("numpy")
    rng = random.Random(11)
    n = timeline.SELECT_ABOVE + 777
    values = array("q", (rng.choice((rng.randint(1, 900_000_000), 20_000_000)) for _ in range(n)))
    s = sorted(values)
    ps = (0.1, 50, 90, 99, 99.9, 100)
    want = [s[max(0, min(n - 1, math.ceil(p / 100 * n) - 1))] / 1e6 for p in ps]
    pauses: list[int] = []
    assert timeline.pcts_ms(values, ps, pause=lambda: pauses.append(1)) == want
    assert not pauses  # one piece
    assert timeline._select(values, [0, n - 1]) == [s[0], s[-1]]
    monkeypatch.setattr(timeline, "_select", lambda *_: None)  # numpy absent
    assert timeline.pcts_ms(values, ps) == want


MS = 1_000_000


def stream(start: float, n: int, gap_ms: float = 100, tokens: int | None = None, ttft_ms: float = 100) -> RequestRecord:
    """A request of ``n`` chunks ``gap_ms`` apart (``tokens``: the server's usage count)."""
    itl = [int(gap_ms * MS)] * (n - 1)
    return RequestRecord("r", "n", "b", "m", start_time=start, ttft_ns=int(ttft_ms * MS), itl_ns=itl,
                         e2e_ns=int(ttft_ms * MS) + sum(itl), output_tokens=n if tokens is None else tokens)


def test_tokens_and_gaps_count_in_the_seconds_they_arrived() -> None:
    t = Timeline()
    t.add(stream(200.05, 30))  # chunks at 200.15 .. 203.05, one token each (100 ms apart)
    t.add(stream(200.05, 30, tokens=60))  # the same chunks, two tokens each by the usage count
    rows = {r["time"]: r for r in t.rows()}
    tokens = [rows[s]["output_tokens_per_s"] for s in (200, 201, 202, 203)]
    assert sum(tokens) == 90  # exact
    assert tokens[1] == tokens[2] == 30  # 10 chunks a second in the middle: 10 + 20 tokens
    assert rows[203]["requests_finished"] == 2 and rows[200]["requests_finished"] == 0
    assert rows[201]["itl_p50_ms"] == 100.0 and rows[200]["itl_p50_ms"] == 100.0


def test_a_late_record_adds_to_closed_seconds() -> None:
    t = Timeline(settle_s=5)
    t.add(stream(300.5, 10))  # chunks 300.6 .. 301.5
    t.settle(now=320.0)  # 300 and 301 closed
    assert not t._open
    closed = {r["time"]: dict(r) for r in t.rows()}
    # a 20 s request started at 300.5 arrives now: one chunk every 100 ms from 300.6 to 320.5
    t.add(stream(300.5, 200))
    rows = {r["time"]: r for r in t.rows()}
    assert rows[300]["output_tokens_per_s"] == 2 * closed[300]["output_tokens_per_s"]  # the same chunks in 300
    assert rows[301]["output_tokens_per_s"] == closed[301]["output_tokens_per_s"] + 10
    assert rows[300]["requests_started"] == 2
    assert sum(r["output_tokens_per_s"] for r in rows.values()) == 210  # nothing dropped
    # the closed seconds' percentiles stay as they were; the new seconds have their own
    assert rows[301]["itl_p50_ms"] == closed[301]["itl_p50_ms"] == 100.0
    assert rows[310]["itl_p50_ms"] == 100.0 and rows[320]["requests_finished"] == 1


def test_an_hour_of_closed_seconds_costs_bytes_not_kilobytes() -> None:
    """What a run keeps for every second (closed rows, users, server columns) is what the
    report charts; kept as dicts it cost about 1.2 kB a second and a soak's master grew by it
    for hours (issue 33). Columns of floats: 8 bytes a value, about 140 bytes a second here."""
    import tracemalloc

    t = Timeline(settle_s=5)
    t0 = 1_700_000_000

    def second(s: int) -> None:
        t.add(RequestRecord(f"r{s}", "n", "b", "m", start_time=s + 0.2, ttft_ns=int(50e6), e2e_ns=int(3e8),
                            itl_ns=[10_000_000] * 20, output_tokens=21))
        t.users(s, 16)
        t.add_extra(s, {f"server_{i}": s * 0.25 + i for i in range(8)})
        t.settle(now=s)

    for s in range(t0, t0 + 600):
        second(s)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for s in range(t0 + 600, t0 + 3600):
        second(s)
    per_second = (tracemalloc.get_traced_memory()[0] - before) / 3000
    tracemalloc.stop()
    assert per_second < 250, per_second
    rows = t.rows()
    assert len(rows) == 3600 and rows[1000]["requests_started"] == 1 and rows[1000]["users"] == 16
    assert rows[1000]["itl_p50_ms"] == 10.0 and rows[1000]["server_7"] == (t0 + 1000) * 0.25 + 7


def test_users_between_reads_the_seconds_whose_count_was_taken() -> None:
    """window.users reads the users the run took each second (load/ramp.py, issue 53 item 1)."""
    tl = Timeline()
    for t, n in ((100.2, 1), (101.3, 2), (103.1, 4)):
        tl.users(t, n)
    assert tl.users_between(99, 103) == [(100, 1), (101, 2), (103, 4)]
    assert tl.users_between(101, 102) == [(101, 2)] and tl.users_between(104, 110) == []
