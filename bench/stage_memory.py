"""What a merging process (a master, a local runner) keeps for each stage it finished.

    .venv/bin/python bench/stage_memory.py                  # 1,200 records of 100 gaps a stage
    .venv/bin/python bench/stage_memory.py --records 300 --gaps 512

A :class:`~llm_users.load.stages.StageBook` is fed stages of synthetic records (TTFT lognormal
around 100 ms, ITL around 40 ms with 4 ms of jitter, 100-300 prompt tokens, server timings,
open-loop schedule lag), as a study's master adds merged records; the Python heap
(``tracemalloc``) is read after ``--first`` and after ``--first + --more`` stages, and the
difference over ``--more`` is what each further finished stage keeps (the two stages still
live are in both readings, so they cancel). Prints ``kb_per_stage`` and the size of one stage's
frozen block (``StageRecord.frozen``); ``--json`` for the figures alone. Issue 33 item 7: a
master finishing 9 stages an hour kept them for the whole run.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_users.load.stages import StageBook  # noqa: E402
from llm_users.metrics import RequestRecord  # noqa: E402


def record(rng: random.Random, start: float, gaps: int) -> RequestRecord:
    ttft_ns = int(rng.lognormvariate(4.6, 0.3) * 1e6)
    itl = [int(rng.gauss(40e6, 4e6)) for _ in range(gaps)]
    r = RequestRecord(request_id=f"{start}", name="/v1/completions", backend="vllm", model="m",
                      start_time=start, t0_ns=int(start * 1e9), ttfb_ns=ttft_ns - 2_000_000, ttft_ns=ttft_ns,
                      e2e_ns=ttft_ns + sum(itl), output_tokens=gaps + 1, input_tokens=rng.randint(100, 300))
    r.itl_ns = itl
    r.scheduled_ns = r.t0_ns - rng.randint(10_000, 3_000_000)
    r.server_timings = {"queue_ns": rng.randint(0, 5_000_000), "prefill_ns": ttft_ns // 2,
                        "decode_ns": sum(itl), "server_total_ns": r.e2e_ns - 1_000_000}
    return r


def measure(first: int, more: int, records: int, gaps: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    book = StageBook({"ttft": 500e6})
    t = 0.0

    def stage() -> None:
        nonlocal t
        book.begin("rate", 4, t, 30.0)
        for k in range(records):
            book.add(record(rng, t + 30 + k * 270 / records, gaps))
        t += 300

    tracemalloc.start()
    for _ in range(first):
        stage()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(more):
        stage()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    frozen = [len(st.frozen) for st in book.stages if getattr(st, "frozen", None)]
    return {"records_per_stage": records, "gaps": gaps, "stages_measured": more,
            "kb_per_stage": round((after - before) / more / 1024, 2),
            "frozen_block_kb": round(sum(frozen) / len(frozen) / 1024, 2) if frozen else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1200, help="records a stage (default 1200)")
    ap.add_argument("--gaps", type=int, default=100, help="ITL gaps a record (default 100)")
    ap.add_argument("--first", type=int, default=5, help="stages before the first reading (default 5)")
    ap.add_argument("--more", type=int, default=15, help="stages between the readings (default 15)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    a = ap.parse_args(argv)
    out = measure(a.first, a.more, a.records, a.gaps)
    if a.json:
        print(json.dumps(out))
    else:
        print(f"each finished stage keeps {out['kb_per_stage']} kB ({a.records} records of {a.gaps} gaps; "
              f"frozen block {out['frozen_block_kb']} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
