"""The master at scale: N real ``locust --worker`` processes feeding one real master over Locust's
zmq rpc, at the record rate of S concurrent streams (issue 34 item 3).

    .venv/bin/python bench/master_scale.py                            # 50 workers, 10,000 streams, 30 s
    .venv/bin/python bench/master_scale.py --workers 8 --streams 1600 --duration 10

The workers run bench/fabricated_locustfile.py: records of ``--gaps`` ITL gaps made without HTTP,
at the rate S streams of that shape end them (a stream ends a record every TTFT + gaps x ITL,
about 10.5 s for 512 gaps of 20 ms: 10,000 streams end about 950 records a second), fired as a
real user's record; everything after that is the product's path (the worker's Shipper, the rpc,
the master's ``Collector.receive``, requests.jsonl). Measured:

- the master's CPU over the steady window (from /proc: utime+stime of the master process, read
  every half second; the window starts 1 s after the first records reach requests.jsonl, one
  ship interval into the test, and ends half a second before the ``-t`` stop), in % of one
  core (target: under 25 % at 10,000 streams over 50 workers);
- records merged per second in that window, and the master's own figures from summary.json's
  ``workers.merge``: CPU per record in ``receive`` and the lag from a worker's send to the
  master's merge (p50, p99, max);
- exactness: the merged TTFT, ITL and E2E percentiles equal those of the union of the records
  in requests.jsonl.

Prints a line per figure and writes bench/results/master_scale.json. Needs memory for N + 1
Locust processes (about 80 MB each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")
sys.path.insert(0, str(ROOT))

from bench.lib.procfs import cpu_s  # noqa: E402
from llm_users.metrics import Distribution  # noqa: E402

LOCUSTFILE = ROOT / "bench" / "fabricated_locustfile.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exact(report: Path) -> dict[str, Any]:
    """The merged percentiles against the union of requests.jsonl's records."""
    records = [json.loads(line) for line in (report / "requests.jsonl").open("rb")]
    summary = json.loads((report / "summary.json").read_text())
    measured = [r for r in records if r["status"] == "ok" and not r["warmup"] and not r["cooldown"]]
    out: dict[str, Any] = {"records": len(records), "unique": len({r["request_id"] for r in records}),
                           "workers_seen": len({r["worker"] for r in records})}
    ok = True
    for metric in ("ttft", "itl", "e2e"):
        union = Distribution()
        for r in measured:
            union.add_many(r["itl_ns"] if metric == "itl" else [r[f"{metric}_ns"]])
        want, got = union.summary_ms(), summary["overall"][metric]
        ok = ok and all(want[k] == got[k] for k in ("count", "p50", "p90", "p99", "p99.9", "min", "max"))
    out["percentiles_exact"] = ok
    out["merge"] = summary.get("workers", {}).get("merge")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=50)
    ap.add_argument("--streams", type=int, default=10_000, help="concurrent streams whose records the workers make")
    ap.add_argument("--gaps", type=int, default=512)
    ap.add_argument("--itl-ms", type=float, default=20.3, help="mean ITL of the records (the pool's, stalls in)")
    ap.add_argument("--ttft-ms", type=float, default=190.0)
    ap.add_argument("--users-per-worker", type=int, default=4)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "master_scale.json"))
    a = ap.parse_args()

    record_s = (a.ttft_ms + a.gaps * a.itl_ms) / 1000
    rate = a.streams / record_s  # records/s over all workers
    users = a.workers * a.users_per_worker
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    env.update(FAB_RATE=f"{rate / users:.4f}", FAB_GAPS=str(a.gaps))
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="master-scale-") as tmp:
        report, logs = Path(tmp) / "r", Path(tmp)

        def start(args: list[str], log: str) -> subprocess.Popen:
            return subprocess.Popen([LOCUST, "-f", str(LOCUSTFILE), "--loglevel", "WARNING", *args], cwd=ROOT,
                                    env=env, stdout=(logs / log).open("w"), stderr=subprocess.STDOUT)

        master = start(["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                        "--expect-workers", str(a.workers), "--headless", "--only-summary", "-u", str(users),
                        "-r", str(users), "-t", f"{a.duration:g}s", "--stop-timeout", "5",
                        "--host", "http://127.0.0.1:9", "--llm-preflight", "off", "--llm-report", str(report)],
                       "master.log")
        workers = [start(["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], f"w{i}.log")
                   for i in range(a.workers)]
        samples: list[tuple[float, float, int]] = []  # (monotonic, master CPU s, requests.jsonl bytes)
        jsonl = report / "requests.jsonl"
        try:
            while master.poll() is None:
                try:
                    samples.append((time.monotonic(), cpu_s(master.pid), jsonl.stat().st_size if jsonl.exists() else 0))
                except OSError:
                    break
                time.sleep(0.5)
            rc = master.wait(60)
        finally:
            for p in [master, *workers]:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in [master, *workers]:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        if rc != 0:
            sys.exit(f"master exited {rc}:\n" + (logs / "master.log").read_text()[-3000:])
        check = exact(report)
        # the first payloads reach requests.jsonl one ship interval (2 s) after the test starts:
        # the window is from 1 s after them to 0.5 s before the -t stop (the stop's final payloads out)
        first = next((t for t, _, size in samples if size > 0), None)
        window = [s for s in samples if first is not None and first + 1.0 <= s[0] <= first - 2.5 + a.duration]
        if len(window) >= 2:
            (t0, c0, _), (t1, c1, _) = window[0], window[-1]
            core_pct = (c1 - c0) / (t1 - t0) * 100
            win_s = t1 - t0
        else:
            core_pct, win_s = None, 0.0
    merge = check.get("merge") or {}
    out = {
        "workers": a.workers, "streams": a.streams, "gaps": a.gaps, "offered_records_per_s": round(rate, 1),
        "users": users, "duration_s": a.duration, "window_s": round(win_s, 1),
        "master_core_pct": None if core_pct is None else round(core_pct, 1),
        "records_merged": check["records"], "records_per_s": round(check["records"] / a.duration, 1),
        "merge_cpu_us_per_record": merge.get("cpu_us_per_record"),
        "merge_lag_p50_s": merge.get("lag_p50_s"), "merge_lag_p99_s": merge.get("lag_p99_s"),
        "merge_lag_max_s": merge.get("lag_max_s"), "merge_payloads": merge.get("payloads"),
        "percentiles_exact": check["percentiles_exact"], "duplicates": check["records"] - check["unique"],
        "workers_seen": check["workers_seen"],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
    }
    for k, v in out.items():
        print(f"{k:26s} {v}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
