"""Issue 15: users started in phase. By default each new user waits a random part of its
spawn interval before its first request, so a batch of ``-r`` users does not stream in step;
``--llm-spawn-spread off`` restores Locust's behaviour (the whole batch at once)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import read_records, run_locust

pytestmark = pytest.mark.slow

USERS = 30


def first_starts(sim_url: str, report: Path, *extra: str) -> list[float]:
    """Each user's first request's start (wall clock), from a -u 30 -r 30 run."""
    proc = run_locust("vllm.py", "--host", sim_url, "-u", str(USERS), "-r", str(USERS), "-t", "3s",
                      "--stop-timeout", "5", *extra, report=report)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first: dict[int, float] = {}
    for r in read_records(report):
        first[r["user"]] = min(first.get(r["user"], r["start_time"]), r["start_time"])
    assert len(first) == USERS
    return sorted(first.values())


def test_a_batch_spreads_over_its_interval_and_off_keeps_the_burst(sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "10", "--seed", "15")
    spread = first_starts(sim.url, tmp_path / "on")
    burst = first_starts(sim.url, tmp_path / "off", "--llm-spawn-spread", "off")

    # on: 30 offsets uniform over ~1 s: wide, and no 100 ms slice holds a crowd
    assert 0.6 <= spread[-1] - spread[0] <= 1.3, spread
    per_slice = Counter(int((t - spread[0]) * 10) for t in spread)
    assert max(per_slice.values()) <= 9, per_slice
    # off: Locust starts the batch at once; the first requests go out together
    assert burst[-1] - burst[0] < 0.3, burst
