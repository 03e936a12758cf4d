"""The soak's memory probe (bench/lib/allocator.py, bench/soak_probe_locustfile.py,
bench/soak_probe.py): the readers on this real process, whose allocations move the figure they
should, the slopes on known series, and the probe in a real Locust run."""

from __future__ import annotations

import json

import pytest

from bench.lib import allocator
from bench.soak_probe import breakdown
from tests.helpers import run_locust


def test_a_sample_of_this_process_adds_up() -> None:
    row = allocator.sample()
    rss = row["VmRSS"]
    assert rss > 10_000 and row["Threads"] >= 1
    assert row["RssAnon"] + row["RssFile"] + row["RssShmem"] == rss
    # smaps' Rss by kind covers the whole resident set (status and smaps are read a moment apart)
    assert sum(row["smaps"].values()) == pytest.approx(rss, rel=0.03)
    assert row["smaps"]["so"] > 1000 and row["smaps"]["[heap]"] > 0
    pym = row["pymalloc"]
    assert pym["arenas allocated current"] >= 1 and pym["bytes in allocated blocks"] > 1_000_000
    assert row["mallinfo2"] is not None and row["mallinfo2"]["uordblks"] > 0


def test_small_objects_are_pymallocs_and_large_ones_glibcs() -> None:
    before = allocator.components_mb(allocator.sample())
    small = [str(i) * 3 for i in range(200_000)]  # 200k objects of ~60 B: pymalloc's arenas
    large = [bytes(2048) + str(i).encode() for i in range(4_000)]  # 8 MB in 2 kB blocks: glibc's
    after = allocator.components_mb(allocator.sample())
    assert after["pymalloc live bytes"] - before["pymalloc live bytes"] > 9  # about 11 MB
    assert 7.5 < after["glibc in use"] - before["glibc in use"] < 12
    # (not VmRSS: a process that freed memory before, as pytest's has, reuses its pages)
    del small, large


def test_the_pymalloc_report_is_read_from_its_text() -> None:
    text = ("Small block threshold = 512, in 32 size classes.\n"
            "# arenas allocated total           =                1,218\n"
            "# arenas reclaimed                 =                1,190\n"
            "# arenas highwater mark            =                   29\n"
            "# arenas allocated current         =                   28\n"
            "28 arenas * 1048576 bytes/arena    =           29,360,128\n"
            "# bytes in allocated blocks        =           28,507,056\n"
            "# bytes in available blocks        =              422,112\n")
    assert allocator.pymalloc_stats(text) == {"arenas highwater mark": 29, "arenas allocated current": 28,
                                              "bytes in allocated blocks": 28_507_056,
                                              "bytes in available blocks": 422_112}


def _row(t: float, rss_mb: float, heap_mb: float) -> dict:
    return {"t": t, "VmRSS": rss_mb * 1024, "RssAnon": rss_mb * 1024, "RssFile": 0,
            "smaps": {"[heap]": heap_mb * 1024}, "pymalloc": {}, "mallinfo2": None}


def test_slopes_are_per_hour_after_the_warmup_and_before_the_end() -> None:
    # RSS jumps 30 MB during the warm-up, then grows 0.5 MB/h; the reports after the end peak
    rows = [_row(t, 40 + (30 if t >= 600 else 0) + 0.5 * t / 3600, 10 + t / 3600) for t in range(0, 7201, 120)]
    rows.append(_row(7300, 150, 10))
    figures = breakdown(rows, 900, 7200)
    assert figures["VmRSS"]["slope_mb_per_h"] == pytest.approx(0.5)
    assert figures["[heap] (glibc main arena)"]["slope_mb_per_h"] == pytest.approx(1.0)
    assert figures["VmRSS"]["first"] == pytest.approx(70 + 0.5 * 960 / 3600)
    assert "glibc in use" not in figures  # no mallinfo2 (musl, old glibc): not a zero line
    with pytest.raises(SystemExit, match="1 samples between 7100 s and 7200 s"):
        breakdown(rows, 7100, 7200)


@pytest.mark.slow
def test_the_probe_samples_a_real_run(sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "10", "--output-tokens", "10", "--seed", "1")
    report = tmp_path / "closed"
    proc = run_locust("../bench/soak_probe_locustfile.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s",
                      report=report, env={"SOAK_PROBE_EVERY": "0.5"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = list((tmp_path / "probe").glob("closed-*.jsonl"))
    assert len(files) == 1, files
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert len(rows) >= 5 and rows[0]["t"] == 0
    assert all(r["VmRSS"] > 20_000 and r["pymalloc"]["arenas allocated current"] >= 1 for r in rows)
    assert (report / "requests.jsonl").read_text().count("\n") >= 2
