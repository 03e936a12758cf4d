"""The master's merge: how many worker records one core of the master takes in per second.

    .venv/bin/python bench/merge.py                       # 50 workers, 512-gap records, ~4 s of CPU
    .venv/bin/python bench/merge.py --gaps 128 --records-per-payload 200
    .venv/bin/python bench/merge.py --profile             # and the cProfile of the master's side

Workers are simulated in this process, each with the real worker side
(:class:`llm_users.distributed.Shipper`): finished records of ``--gaps`` ITL gaps (TTFT
lognormal around 180 ms, ITL lognormal around 20 ms with a stall of 60-200 ms every 200 gaps
or so, as a vLLM stream under load gives; 1 % failures; usage counts) go in one by one,
and each payload (``Shipper.payload``: its statistics delta in HDR wire form and its records)
is serialised as Locust's zmq rpc sends it (``locust.rpc.protocol.Message``, msgpack). Building
them is not timed.

Timed: the master's side, payload after payload, as ``MasterRun.on_message`` runs it: the wire
decode (``Message.unserialize``), then ``Collector.receive`` with the pipeline a master has
(statistics merged in wire form, counts, timeline with its by-arrival series, the observers a
run attaches: workload summary and outages, then the records file: requests.jsonl in
a temporary directory), plus the timeline's settle of closed seconds and its rows (the
seconds still open closed as at the stop; the summary's percentiles, read once per run, are
timed apart: ``summary_ms``). CPU time (``time.process_time``): the figure holds on a busy
machine. Every round merges the same payloads into a fresh master; the best round is reported.

Checked (not timed): the merged TTFT, ITL and E2E percentiles equal those of one
:class:`~llm_users.metrics.StatsByName` that added every record directly (exact merge), and
requests.jsonl holds every record once.

Prints ``records_per_s_per_core`` (and µs per record, by part with ``--parts``) and writes
bench/results/merge.json. Target (issue 34): >= 20,000 records/s per core for 512-gap records.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import platform
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: another checkout can be timed (PYTHONPATH=/its/root)

from locust.rpc.protocol import Message  # noqa: E402

from bench.lib import reference  # noqa: E402
from llm_users.distributed import Collector, Shipper  # noqa: E402
from llm_users.metrics import RequestRecord, StatsByName, fold_in_this_process  # noqa: E402
from llm_users.metrics.outages import attach as attach_outages  # noqa: E402
from llm_users.outputs import RecordWriter  # noqa: E402
from llm_users.workload.summary import attach as attach_workload  # noqa: E402

TARGET = 20_000


def make_record(rng: random.Random, i: int, worker: str, gaps: int, start: float) -> RequestRecord:
    """One finished streaming request as a worker's client leaves it (vLLM dialect, usage)."""
    r = RequestRecord(request_id=f"{worker}-{i}", name="/v1/chat/completions", backend="vllm",
                      model="meta-llama/Llama-3.1-8B-Instruct", start_time=start)
    r.t0_ns = int(start * 1e9) % (1 << 40)
    r.ttft_ns = int(rng.lognormvariate(math.log(180e6), 0.35))
    r.ttfb_ns = r.ttft_ns - rng.randint(50_000, 400_000)
    itl = [int(rng.lognormvariate(math.log(20e6), 0.15)) for _ in range(gaps)]
    for k in range(0, gaps, 100):  # the odd stall: a batch refill, a preemption
        if rng.random() < 0.5:
            itl[k] = rng.randint(60_000_000, 200_000_000)
    r.itl_ns = itl
    r.e2e_ns = r.ttft_ns + sum(itl) + rng.randint(100_000, 900_000)
    r.chunks = gaps + 1
    r.output_chars = 4 * r.chunks
    r.input_tokens, r.output_tokens = rng.randint(200, 1200), gaps + 1
    r.tokens_source = r.input_tokens_source = "usage"
    r.finish_reason = "length"
    r.http_status = 200
    r.response_bytes = 180 * r.chunks
    r.user = i % 200
    r.target_output_tokens = gaps + 1
    if rng.random() < 0.01:  # the odd failure
        r.status, r.error_category, r.error_message = "error", "http_503", "503 Service Unavailable"
        r.ttft_ns = r.ttfb_ns = None
        r.itl_ns, r.chunks, r.output_tokens = [], 0, None
    return r


def build_payloads(workers: int, per_payload: int, payloads_each: int, gaps: int,
                   seed: int = 1) -> tuple[list[bytes], list[RequestRecord]]:
    """Each worker's payloads in the wire form, interleaved as they reach the master, and every record."""
    rng = random.Random(seed)
    shippers = [Shipper(f"worker-{w}") for w in range(workers)]
    t0 = 1_800_000_000.0
    wire: list[bytes] = []
    every: list[RequestRecord] = []
    for p in range(payloads_each):
        for w, sh in enumerate(shippers):
            for i in range(per_payload):
                start = t0 + p * 2.0 + i * 2.0 / per_payload + w * 0.001
                rec = make_record(rng, p * per_payload + i, sh.worker_id, gaps, start)
                sh.add(rec)
                every.append(rec)
            msg = Message("llm_data", sh.payload(final=p == payloads_each - 1), sh.worker_id)
            wire.append(msg.serialize())
    return wire, every


class _Run:
    """What the observers' attach functions take from a run: its collector and summary hooks."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.summary_hooks: list[Any] = []


class _Events:
    class _Hook:
        def add_listener(self, _fn: Any) -> None:
            pass

    test_start = _Hook()


class _Env:
    events = _Events()
    user_classes: list[Any] = []


def master(directory: str) -> tuple[Collector, RecordWriter]:
    """A master's Collector with its records file and the observers every run attaches."""
    writer = RecordWriter(directory)
    c = Collector({}, writer)
    run, env = _Run(c), _Env()
    attach_workload(env, run)
    attach_outages(env, run)
    return c, writer


def _timed(fn: Any, parts: dict[str, float], name: str) -> Any:
    def sink(rec: Any) -> None:
        t = time.process_time()
        fn(rec)
        parts[name] = parts.get(name, 0.0) + time.process_time() - t
    return sink


def merge_all(wire: list[bytes], directory: str, parts: dict[str, float] | None = None) -> tuple[float, Collector]:
    """Merge every payload into a fresh master as ``MasterRun`` does: its CPU seconds and the
    collector. ``parts``: CPU seconds by part (decode, each pipeline stage, the rest of
    ``receive``: the statistics' wire merge and the records' decode), at the price of a clock
    read around each sink."""
    c, writer = master(directory)
    if parts is not None:
        for name, sinks in c.pipeline._stages.items():
            sinks[:] = [_timed(s, parts, name) for s in sinks]
    cpu0 = time.process_time()
    for data in wire:
        t = time.process_time()
        msg = Message.unserialize(data)
        t1 = time.process_time()
        c.receive(msg.data)
        last_end = msg.data["stats"]["total"]["last_end"]
        if last_end is not None:  # the master's loop settles every second: closed seconds drop their values
            c.timeline.settle(last_end)
        if parts is not None:
            parts["decode"] = parts.get("decode", 0.0) + t1 - t
            parts["receive"] = parts.get("receive", 0.0) + time.process_time() - t1
    c.timeline.rows()  # the seconds still open closed, as at the stop
    cpu = time.process_time() - cpu0
    writer.close()
    return cpu, c


def summary_cpu_s(c: Collector) -> float:
    """The merged statistics' summary (every percentile, once at the stop): a cost per run, not
    per record, so timed apart."""
    cpu0 = time.process_time()
    c.stats.summary()
    return time.process_time() - cpu0


def _same(want: dict[str, Any], got: dict[str, Any]) -> bool:
    """Every figure equal; the mean (a sum of floats, added in another order when merged) to
    the last bits (1e-12 relative)."""
    return want.keys() == got.keys() and all(
        math.isclose(w, g, rel_tol=1e-12) if k == "mean" and w is not None and g is not None else w == g
        for k, w, g in ((k, want[k], got[k]) for k in want))


def check_exact(c: Collector, every: list[RequestRecord], path: Path) -> dict[str, Any]:
    """The merged statistics against one StatsByName of every record; requests.jsonl's lines."""
    direct = StatsByName({})
    for rec in every:
        direct.add(rec)
    want, got = direct.summary()["overall"], c.stats.summary()["overall"]
    keys = ("ttft", "itl", "e2e", "tpot", "ttfb")
    exact = all(_same(want[m], got[m]) for m in keys) and want["requests"] == got["requests"]
    lines = sum(1 for _ in path.open("rb"))
    return {"percentiles_exact": exact, "records_file_lines": lines, "records": len(every),
            "itl_p50_ms": got["itl"]["p50"], "itl_p99_ms": got["itl"]["p99"], "ttft_p99_ms": got["ttft"]["p99"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--records-per-payload", type=int, default=40,
                    help="records in one worker payload (default 40: 200 streams of 512 x 20 ms gaps per worker, 2 s apart)")
    ap.add_argument("--payloads", type=int, default=4, help="payloads per worker")
    ap.add_argument("--gaps", type=int, default=512, help="ITL gaps per record")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", action="store_true", help="CPU by part (decode, stages, the rest), one more round")
    ap.add_argument("--profile", action="store_true", help="print the cProfile of one more round")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "merge.json"))
    a = ap.parse_args()

    fold_in_this_process()  # as a master does (run.py MasterRun.install)
    wire, every = build_payloads(a.workers, a.records_per_payload, a.payloads, a.gaps)
    n = len(every)
    cpus: list[float] = []
    refs: list[float] = []
    check: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="merge-bench-") as d:
        for _ in range(a.rounds):
            refs.append(reference.loop_ms())  # the machine's speed just before the round
            cpu, c = merge_all(wire, d)
            cpus.append(cpu)
            summary_s = summary_cpu_s(c)
            check = check_exact(c, every, Path(d) / "requests.jsonl")
        parts: dict[str, float] = {}
        if a.parts:
            merge_all(wire, d, parts)
        if a.profile:
            prof = cProfile.Profile()
            prof.enable()
            merge_all(wire, d)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    best = min(cpus)
    rate = n / best
    out = {
        "records_per_s_per_core": round(rate),
        "us_per_record": round(best / n * 1e6, 2),
        "target_records_per_s_per_core": TARGET,
        "meets_target": rate >= TARGET,
        "rounds_cpu_s": [round(x, 4) for x in cpus],
        "reference_ms": refs,  # bench/lib/reference.py before each round: this VM's speed moves by up to half
        "reference_ms_of_best": refs[cpus.index(best)],
        "workers": a.workers, "records_per_payload": a.records_per_payload, "payloads_per_worker": a.payloads,
        "gaps": a.gaps, "records": n, "payload_bytes_mean": round(sum(map(len, wire)) / len(wire)),
        "summary_ms": round(summary_s * 1000, 1),
        "check": check,
        "parts_us_per_record": {k: round(v / n * 1e6, 2) for k, v in parts.items()},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
    }
    print(f"{n} records of {a.gaps} gaps from {a.workers} workers ({a.records_per_payload} a payload, "
          f"{out['payload_bytes_mean']} bytes): best of {a.rounds} rounds {best:.3f} s CPU")
    print(f"records_per_s_per_core {out['records_per_s_per_core']}  ({out['us_per_record']} µs per record; "
          f"target {TARGET}: {'met' if out['meets_target'] else 'NOT met'})")
    print(f"the machine's speed: a fixed Python loop took {min(refs)}-{max(refs)} ms before the rounds "
          f"({out['reference_ms_of_best']} before the best; bench/lib/reference.py)")
    print(f"the final summary (once per run, not in the rate): {out['summary_ms']} ms CPU")
    if parts:
        print("by part, µs per record: " + ", ".join(f"{k} {v}" for k, v in out["parts_us_per_record"].items()))
    print(f"merged percentiles exact: {check['percentiles_exact']}; requests.jsonl lines {check['records_file_lines']} "
          f"of {n}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
