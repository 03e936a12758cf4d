"""What one finished record costs the per-second series: the timeline (timeseries.csv, the
report) and the live view (the web UI's LLM tab), issue 28.

    .venv/bin/python bench/series_cost.py [--chunks 256] [--records 5000]

Both count a record's tokens and ITL gaps in the second each chunk arrived
(``llm_users/metrics/by_arrival.py``); they run once per record where the run merges (the local
runner or the master), not per chunk. Builds ``--records`` finished records of ``--chunks``
chunks (TTFT 120 ms, ITL 15 ms +- 2 ms, one token a chunk, starts 10 ms apart) and prints the
best of 5 rounds of ``Timeline.add`` and ``LiveView.count`` in µs per record and per chunk, and
the apportionment alone (``by_second``). Run it on two checkouts to compare (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH: another checkout can be timed

from llm_users.metrics import RequestRecord  # noqa: E402
from llm_users.outputs.timeline import Timeline  # noqa: E402
from llm_users.webui.live import LiveView  # noqa: E402


def records(n: int, chunks: int) -> list[RequestRecord]:
    rng = random.Random(1)
    out = []
    for i in range(n):
        r = RequestRecord(request_id=str(i), backend="vllm", model="m", name="/v1/chat/completions",
                          start_time=1_000_000.0 + i * 0.01)
        r.ttft_ns = 120_000_000
        r.itl_ns = [15_000_000 + rng.randint(-2_000_000, 2_000_000) for _ in range(chunks - 1)]
        r.output_tokens = r.chunks = chunks
        r.e2e_ns = r.ttft_ns + sum(r.itl_ns)
        out.append(r)
    return out


def best_us(fn, recs: list[RequestRecord], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        sink = fn()
        t0 = time.perf_counter_ns()
        for r in recs:
            sink(r)
        best = min(best, (time.perf_counter_ns() - t0) / len(recs) / 1000)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--records", type=int, default=5000)
    a = ap.parse_args()
    recs = records(a.records, a.chunks)
    figures = {
        "timeline_add_us": best_us(lambda: Timeline(settle_s=1e9).add, recs),
        "live_count_us": best_us(lambda: LiveView().count, recs),
    }
    try:
        from llm_users.metrics.by_arrival import record_by_second
        figures["by_second_us"] = best_us(lambda: record_by_second, recs)
    except ImportError:  # a checkout from before issue 28
        pass
    for k, v in figures.items():
        print(f"{k:18s} {v:7.1f} µs/record  {v * 1000 / a.chunks:6.1f} ns/chunk")


if __name__ == "__main__":
    main()
