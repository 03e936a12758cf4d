"""metrics/seconds.py: a float per second in one array; None where nothing was set."""

from __future__ import annotations

import tracemalloc

from llm_users.metrics.seconds import MAX_SPAN, SecondColumns, SecondSeries


def test_set_add_get_and_gaps() -> None:
    s = SecondSeries()
    assert s.get(100) is None and s.span() is None and list(s.items()) == []
    s.set(100, 2.5)
    s.add(103, 4)
    s.add(103, 1)
    assert (s.get(100), s.get(101), s.get(103)) == (2.5, None, 5.0)
    assert 103 in s and 102 not in s
    s.set(98, 7)  # an earlier second (a late record): the array grows at the front
    assert s.base == 98 and s.get(98) == 7.0 and s.get(100) == 2.5
    assert list(s.items()) == [(98, 7.0), (100, 2.5), (103, 5.0)] and s.span() == (98, 103)


def test_a_far_second_does_not_stretch_the_array() -> None:
    s = SecondSeries()
    s.set(1_700_000_000, 1)
    s.set(0, 3)  # a clock at zero: kept apart
    s.add(1_700_000_000 + MAX_SPAN + 5, 2)
    assert len(s.values) == 1
    assert list(s.items()) == [(0, 3.0), (1_700_000_000, 1.0), (1_700_000_000 + MAX_SPAN + 5, 2.0)]


def test_columns_answer_like_a_dict_of_rows() -> None:
    c = SecondColumns()
    assert not c and c.get(5) is None and c.get(5, {}) == {}
    c.update(10, {"server_queue": 3, "gpu_util": 50.0})
    c.update(12, {"server_queue": 1, "gpu_util": None})  # None: no value that second
    assert c and c.get(10) == {"server_queue": 3.0, "gpu_util": 50.0} and c.get(11) is None
    assert c.get(12) == {"server_queue": 1.0} and list(c.keys()) == [10, 12]
    assert c.recent_columns(2) == {"server_queue"} and c.recent_columns(3) == {"server_queue", "gpu_util"}


def test_a_second_costs_eight_bytes_per_column() -> None:
    """An hour of 8 columns: about 230 kB, where a dict of dicts took 3-4 MB."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    c = SecondColumns()
    for t in range(1_700_000_000, 1_700_003_600):
        c.update(t, {f"server_{i}": t * 0.5 + i for i in range(8)})
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 3600 * 8 * 8 * 1.3, grown
