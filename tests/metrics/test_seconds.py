"""metrics/seconds.py: a float per second in one array; None where nothing was set."""

from __future__ import annotations

import tracemalloc

from llm_users.metrics.seconds import CHUNK, MAX_SPAN, SecondColumns, SecondSeries, Spill


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


T0 = 1_700_000_000


def test_older_chunks_go_to_disk_and_read_back_exactly(tmp_path) -> None:
    """Three hours a second: all but the last 1-2 chunks on disk; every value, sum and gap
    read back as set, a late add to a spilled second included."""
    spill = Spill(str(tmp_path))
    s = SecondSeries(spill)
    hours = 3 * 3600
    for i in range(hours):
        if i % 7:  # every 7th second never set: a gap
            s.set(T0 + i, i * 0.25)
    assert CHUNK <= len(s.values) < 2 * CHUNK
    s.add(T0 + 10, 1.5)  # a late record's count for a spilled second
    s.add(T0 + 14, 2.0)  # a spilled gap
    assert s.get(T0 + 10) == 10 * 0.25 + 1.5 and s.get(T0 + 14) == 2.0 and s.get(T0 + 7) is None
    assert s.get(T0 + hours - 1) == (hours - 1) * 0.25 and s.get(T0 + hours) is None
    want = {T0 + i: i * 0.25 for i in range(hours) if i % 7}
    want[T0 + 10] += 1.5
    want[T0 + 14] = 2.0
    assert dict(s.items()) == want and [t for t, _ in s.items()] == sorted(want)
    assert s.span() == (T0 + 1, T0 + hours - 1)
    spill.close()


def test_a_spill_that_cannot_be_written_keeps_every_value_in_memory(tmp_path) -> None:
    spill = Spill(str(tmp_path / "gone"))  # no such directory: the disk-full path
    s = SecondSeries(spill)
    for i in range(3 * CHUNK):
        s.set(T0 + i, float(i))
    assert spill.failed is not None
    assert [v for _, v in s.items()] == [float(i) for i in range(3 * CHUNK)] and s.get(T0 + 5) == 5.0


def test_a_forked_child_never_writes_its_parents_spill(tmp_path) -> None:
    spill = Spill(str(tmp_path))
    spill._pid = -1  # as in a ``--processes`` worker forked after the spill was made
    assert spill.write(b"x" * 8) is None and not list(tmp_path.iterdir())


def test_a_master_running_for_hours_keeps_its_columns_bounded() -> None:
    """Three hours of 4 columns (a master with a server's metrics scraped has 21): memory
    stays within two chunks a column (the process's own spill file holds the rest), not
    growing by 8 bytes a second a column (29 kB an hour)."""
    c = SecondColumns()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for t in range(T0, T0 + 3 * 3600):
        c.update(t, {f"server_{i}": t * 0.5 + i for i in range(4)})
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 4 * 2 * CHUNK * 8 * 1.3, grown  # 3 h in memory: 4 * 10,800 * 8 = 346 kB
    assert c.get(T0 + 5) == {f"server_{i}": (T0 + 5) * 0.5 + i for i in range(4)}
