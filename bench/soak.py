"""Soak: many streams for a long time; are memory and file descriptors flat? (issue 10 items 5, 7)

Starts the simulator and a headless Locust run (``--processes N``: a master and N workers)
against it, and every ``--interval`` seconds samples the resident memory (VmRSS) and the open
file descriptors of the master, each worker and the simulator into a CSV; at the end it draws
them (matplotlib, the ``report`` extra) and prints, per process, the value after warm-up and
at the end. The pass line: flat after warm-up, within +-10 %.

    .venv/bin/python bench/soak.py                          # 30 minutes, 300 streams (the issue's soak)
    .venv/bin/python bench/soak.py --minutes 3 --users 200  # the short version

Writes bench/results/soak.csv and bench/results/soak.svg. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.procfs import children, open_fds, vmrss_kb  # noqa: E402

BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
FLAT = 0.10


def rss_mb(pid: int) -> float | None:
    kb = vmrss_kb(pid)
    return None if kb is None else kb / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--processes", type=int, default=2, help="Locust worker processes (default 2)")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds before the flatness baseline (default 60)")
    ap.add_argument("--sim-args", default="--ttft-ms 100 --itl-ms 20 --output-tokens 200 --max-batch 512")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    sim = subprocess.Popen([str(BIN / "llm-sim"), "--host", "127.0.0.1", "--port", "0", "--exit-with-parent",
                            *args.sim_args.split()], stdout=subprocess.PIPE, text=True)
    assert sim.stdout is not None
    url = next(w for w in sim.stdout.readline().split() if w.startswith("http://"))
    run_s = int(args.minutes * 60)
    locust = subprocess.Popen(
        [str(BIN / "locust"), "-f", str(ROOT / "locustfiles" / "vllm.py"), "--headless", "--only-summary",
         "--processes", str(args.processes), "-u", str(args.users), "-r", str(max(1, args.users // 10)),
         "-t", f"{run_s}s", "--stop-timeout", "30", "--host", url, "--llm-prometheus-port", "0",
         "--loglevel", "WARNING"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows: list[dict[str, float | int | str | None]] = []
    t0 = time.monotonic()
    while locust.poll() is None:
        t = time.monotonic() - t0
        procs = {"simulator": sim.pid, "master": locust.pid}
        procs |= {f"worker{i}": p for i, p in enumerate(sorted(children(locust.pid, all_threads=False)))}
        for name, pid in procs.items():
            rows.append({"t_s": round(t, 1), "process": name, "rss_mb": rss_mb(pid), "fds": open_fds(pid)})
        time.sleep(args.interval)
    out = locust.communicate()[0]
    sim.terminate()
    path = RESULTS / "soak.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t_s", "process", "rss_mb", "fds"])
        w.writeheader()
        w.writerows(rows)
    print(out[-1500:])
    ok = True
    print(f"soak: {args.users} users, {args.minutes:g} min, samples every {args.interval:g} s -> {path}")
    for name in sorted({str(r["process"]) for r in rows}):
        series = [r for r in rows if r["process"] == name and r["rss_mb"] is not None]
        after = [r for r in series if float(r["t_s"]) >= args.warmup] or series
        if not after:
            continue
        base, last = after[0], after[-1]
        rss = [float(r["rss_mb"]) for r in after]
        drift = (max(rss) - min(rss)) / float(base["rss_mb"])
        flat = drift <= 2 * FLAT  # the band is +-10 %: max - min within 20 % of the baseline
        ok &= flat
        print(f"  {name:10s} RSS {float(base['rss_mb']):7.1f} MB at {base['t_s']} s -> {float(last['rss_mb']):7.1f} MB "
              f"at {last['t_s']} s (min {min(rss):.1f}, max {max(rss):.1f}: {'flat' if flat else 'NOT flat'}); "
              f"fds {base['fds']} -> {last['fds']}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
        for name in sorted({str(r["process"]) for r in rows}):
            pts = [r for r in rows if r["process"] == name and r["rss_mb"] is not None]
            a.plot([r["t_s"] for r in pts], [r["rss_mb"] for r in pts], label=name)
            b.plot([r["t_s"] for r in pts], [r["fds"] for r in pts], label=name)
        a.set_ylabel("RSS (MB)")
        b.set_ylabel("open fds")
        b.set_xlabel("seconds")
        a.legend()
        fig.savefig(RESULTS / "soak.svg")
        print(f"plot: {RESULTS / 'soak.svg'}")
    except ImportError:
        print("plot skipped (matplotlib is the 'report' extra)")
    print("PASS: flat after warm-up" if ok else "FAIL: not flat after warm-up")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
