"""bench/merge.py at a small scale: worker payloads through Locust's real rpc encoding into a
real master's Collector merge exactly, every record once in requests.jsonl, with the
machine's speed beside the figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_merge_bench_merges_exactly_and_says_the_machines_speed(tmp_path: Path) -> None:
    out = tmp_path / "merge.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "merge.py"), "--workers", "3", "--payloads", "2",
                        "--records-per-payload", "20", "--gaps", "300", "--rounds", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["records"] == 120 and got["check"]["records"] == 120
    assert got["check"]["percentiles_exact"] is True and got["check"]["records_file_lines"] == 120
    assert 15 <= got["check"]["itl_p50_ms"] <= 25 and got["check"]["ttft_p99_ms"] > got["check"]["itl_p50_ms"]
    assert len(got["reference_ms"]) == 2 and all(ms > 0 for ms in got["reference_ms"])
    best = min(got["rounds_cpu_s"])  # the rate is the best round's (rounded to 0.1 ms in the JSON)
    assert abs(got["records_per_s_per_core"] - 120 / best) <= 120 / best * 0.05 + 1
    assert "records_per_s_per_core" in r.stdout and "a fixed Python loop took" in r.stdout
