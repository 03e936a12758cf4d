"""metrics/by_arrival.py: a record's tokens and ITL gaps by the second they arrived."""

from __future__ import annotations

import random

from llm_users.metrics import RequestRecord
from llm_users.metrics.by_arrival import by_second, pack_pieces, record_by_second, unpack_pieces

MS = 1_000_000


def test_one_token_per_chunk_lands_in_the_arrival_seconds() -> None:
    # start 100.45, first chunk at 100.55, then 100 ms apart: chunks at 100.55 .. 101.45 (10)
    pieces = by_second(100.45, 100 * MS, [100 * MS] * 9, 10)
    # 5 chunks in 100, 5 in 101; the gap ending at 101.05 produced its token over
    # (100.95, 101.05]: half a token in 100 (floored: the cumulative count stays an integer)
    assert pieces == [(100, 5, 0, 4), (101, 5, 4, 9)]  # ITL: 4 gaps end in 100, 5 in 101


def test_exact_totals_with_usage_that_is_not_a_multiple_of_the_chunks() -> None:
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(1, 80)
        total = rng.randint(0, 700)
        start = 1000 + rng.random() * 3
        itl = [rng.randint(1, 400) * MS for _ in range(n - 1)]
        pieces = by_second(start, rng.randint(1, 900) * MS, itl, total)
        assert sum(p[1] for p in pieces) == total
        assert all(p[1] >= 0 for p in pieces)
        secs = [p[0] for p in pieces]
        assert secs == sorted(set(secs))
        # the ITL slices tile the gaps exactly, in order
        assert [i for p in pieces for i in range(p[2], p[3])] == list(range(n - 1))


def test_multi_token_chunk_is_spread_over_its_gap_across_a_boundary() -> None:
    # 2 chunks, 20 tokens: chunk 0 at 10.9 carries 10; chunk 1 at 11.4 carries 10 produced over
    # (10.9, 11.4]: 0.1 s of that half second lies in second 10 -> 2 tokens there, 8 in 11
    pieces = by_second(10.5, 400 * MS, [500 * MS], 20)
    assert pieces == [(10, 12, 0, 0), (11, 8, 0, 1)]


def test_a_gap_spanning_several_seconds_feeds_each_of_them() -> None:
    # chunk 0 at 4.5 (5 of 10 tokens), chunk 1 at 8.5 after a 4 s gap: its 5 tokens spread over
    # (4.5, 8.5], the cumulative count floored at 5.0, 6.0, 7.0 and 8.0 (5.625, 6.875, 8.125, 9.375)
    pieces = by_second(4.25, 250 * MS, [4000 * MS], 10)
    assert pieces == [(4, 5, 0, 0), (5, 1, 0, 0), (6, 2, 0, 0), (7, 1, 0, 0), (8, 1, 0, 1)]


def test_a_chunk_exactly_on_a_boundary_belongs_to_the_new_second() -> None:
    # chunks at 7.5 and 8.0: the ITL gap ends in 8; the token it brought was produced over
    # (7.5, 8.0], all in 7
    assert by_second(7.0, 500 * MS, [500 * MS], 2) == [(7, 2, 0, 0), (8, 0, 0, 1)]


def test_no_first_token_counts_at_the_end_and_nothing_without_tokens() -> None:
    assert by_second(3.2, None, [], 7, end_time=4.7) == [(4, 7, 0, 0)]
    assert by_second(3.2, None, [], None, end_time=4.7) == []
    assert by_second(3.2, 10 * MS, [], 0) == [(3, 0, 0, 0)]


def test_record_by_second_reads_the_record() -> None:
    r = RequestRecord("r", "n", "b", "m", start_time=50.95, ttft_ns=20 * MS, itl_ns=[20 * MS] * 4,
                      e2e_ns=130 * MS, output_tokens=5)
    assert record_by_second(r) == [(50, 2, 0, 1), (51, 3, 1, 4)]


def test_packed_pieces_read_back_the_same_and_a_torn_pack_is_an_error() -> None:
    import pytest

    pieces = by_second(1_800_000_000.9, 50_000_000, [20_000_000] * 120, 121)
    data = pack_pieces(pieces)
    assert len(data) == 4 * 8 * len(pieces) and list(unpack_pieces(data)) == pieces
    rec = RequestRecord(request_id="r", name="n", backend="vllm", model="m", start_time=1.0, pieces=data)
    assert list(record_by_second(rec)) == list(record_by_second(rec)) == pieces  # each reader its own iterator
    with pytest.raises(ValueError, match="not a whole number"):
        unpack_pieces(data[:24])
