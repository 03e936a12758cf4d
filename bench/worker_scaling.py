"""Worker scaling: does N load-generating processes give N times the capacity of one?

For each process count N (``--processes 1,2``: 1 is a plain local run, N > 1 is Locust's
``--processes N``), the harness runs our client (locustfiles/vllm.py) against the simulator at
a fixed per-stream pace (ITL 20 ms, TTFT 20 ms, 128 tokens: 50 chunks/s per stream), stepping
the streams per process up (``--streams``), and measures per step:

- chunks/s received in the measured window (from the run's requests.jsonl: every chunk's
  perf_counter_ns stamp is t0 + TTFT + the ITL gaps), in total and per process;
- the client's CPU (utime+stime of every process of the locust tree, from /proc, over the
  window) in % of one core, and milliseconds of CPU per 1,000 chunks; the simulator's the same
  way; how long each waited for a core while runnable (run delay of the main threads, from
  /proc/PID/schedstat, ms per second); the CPUs' busy time (/proc/stat, everything on them);
- the TTFT error of the first-token stamps in the window: each client stamp minus the
  simulator's write stamp of that chunk (``GET /_sim/trace``, the same CLOCK_MONOTONIC), p99 and
  p99.9, as bench/client_overhead.py reads it; and how late the simulator itself wrote first
  tokens (its write minus its target: arrival + TTFT, p99), which the error leaves out;
- under ``--processes``, the master's own CPU (the process the harness started; the workers
  are its children) in % of a core and in microseconds per record that ended in the window;
- TTFT p99 of the requests that started in the window (the simulator's TTFT is fixed: what it
  adds is both processes' delay and the loopback's);
- the client self-check's loop lag p99 (worst process, whole run), from summary.json.

A step is *sustained* when the client received at least 97 % of the offered chunks and its TTFT
error p99 stayed under 5 ms (``sustained_1ms``: under 1 ms), the bounds of
bench/client_overhead.py's ceiling. A process count's capacity is its highest sustained step;
scaling = capacity(N) / (N x capacity(1)), target >= 0.9. As root the simulator and a single
client process run SCHED_FIFO 1 (``--priority rt``), so other jobs on a shared machine get only the cores' idle time. N > 1
runs at normal priority: Locust's master and workers at one FIFO priority deadlock (a busy
worker never yields the core its master needs).

The simulator is pinned to ``--sim-cpus`` and the client to ``--client-cpus`` (taskset), so
the client never competes with the server it measures. On a 2-core machine that leaves one
core for the client: run N = 1 (the default there); with more cores give each process its own::

    .venv/bin/python bench/worker_scaling.py                                  # 2 cores: N = 1
    .venv/bin/python bench/worker_scaling.py --processes 1,2,4 --sim-cpus 0-1 --client-cpus 2-5

``--shared-cpus 0-1`` instead puts the simulator and the clients on the same CPUs, all at
normal priority: what ``--processes 2`` on a 2-core machine gives when the server under test
is on it too. The limit is then the cores themselves, so every step also reports the
simulator's CPU, the cores' busy time (/proc/stat, everything on them) and the chunks/s that
the cores could carry at that step's measured cost per chunk (client + simulator)::

    .venv/bin/python bench/worker_scaling.py --shared-cpus 0-1 --processes 1,2 --streams 80,120,160,200,240,280

Prints a table and writes bench/results/worker_scaling.json. Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from bench.lib.llm_imports import start_simulator  # noqa: E402
from bench.lib.priority import priority_prefix  # noqa: E402
from bench.lib.procfs import core_busy_ms, cpu_s, run_delay_ms, tree_by_children, tree_cpu_s  # noqa: E402
from bench.overhead.analysis import analyse, ours_stamps, pct  # noqa: E402
from bench.overhead.config import BOUNDS_MS  # noqa: E402
from bench.overhead.simulator import sim_call  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpus(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def prio(args: argparse.Namespace, n_proc: int) -> list[str]:
    """SCHED_FIFO for a single client process only. Under --processes the master and the workers
    share cores at one FIFO priority: a busy worker never yields and the run deadlocks (seen
    here: a worker spun at 93% of its core for minutes until killed)."""
    return priority_prefix(args.priority) if n_proc == 1 else []


def busy_ms(cpu_list: list[int]) -> float:
    """Busy milliseconds since boot of the CPUs, summed (steal not counted as busy)."""
    return sum(core_busy_ms(c)[0] for c in cpu_list)


def cpu_bound(cores: int, client_ms_per_1k: float | None, sim_ms_per_1k: float | None) -> float | None:
    """Chunks/s that ``cores`` cores could carry at a step's measured cost per chunk (client and
    simulator together): the most any process count can reach on them."""
    if not client_ms_per_1k or sim_ms_per_1k is None:
        return None
    return cores * 1000.0 / ((client_ms_per_1k + sim_ms_per_1k) / 1000.0)


def sustained(chunks_per_s: float, offered: float, ttft_err_p99_ms: float | None, bound_ms: float) -> bool:
    """A step holds when >= 97 % of the offered chunks arrived and the TTFT error p99 stayed
    under the bound (the ceiling's rule, bench/client_overhead.py)."""
    return chunks_per_s >= 0.97 * offered and ttft_err_p99_ms is not None and ttft_err_p99_ms < bound_ms


def sim_first_late_ms(trace: list[dict[str, Any]], ws: int, we: int) -> float | None:
    """p99 of how late the simulator wrote first tokens that fell in [ws, we): its write stamp
    minus the time it meant to write it (``ttft_target_ns``: arrival + TTFT), in ms; the
    client's TTFT error does not see it."""
    late = []
    for t in trace:
        times = [x for x, k in zip(t["times_ns"], t["tokens"], strict=True) if k > 0]
        if times and ws <= times[0] < we and t.get("ttft_target_ns") is not None:
            late.append(times[0] - t["ttft_target_ns"])
    return pct(late, 99)


def kill_tree(root: int) -> None:
    """SIGKILL a process and its descendants (ours: the locust run this harness started)."""
    for pid in tree_by_children(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_step(n_proc: int, streams: int, sim_url: str, sim_pid: int, args: argparse.Namespace,
             tmp: Path) -> dict[str, Any]:
    users = streams * n_proc
    report = tmp / f"n{n_proc}-s{streams}"
    run_s = args.ramp + args.warmup + args.duration + 1
    cmd = [*prio(args, n_proc), "taskset", "-c", args.client_cpus, str(VENV_BIN / "locust"), "-f", str(ROOT / "locustfiles" / "vllm.py"),
           "--host", sim_url, "--headless", "--only-summary", "-u", str(users), "-r", str(max(1, users / args.ramp)),
           "-t", f"{run_s:g}s", "--stop-timeout", "10", "--llm-report", str(report), "--llm-model", "sim-model",
           "--llm-max-tokens", str(args.output_tokens), "--llm-prometheus-port", "0", "--loglevel", "WARNING"]
    if n_proc > 1:  # a free master port: 5557 may be another run's
        port = str(free_port())  # the forked workers dial --master-port, not the bind port
        cmd += ["--processes", str(n_proc), "--master-bind-host", "127.0.0.1", "--master-bind-port", port,
                "--master-host", "127.0.0.1", "--master-port", port]
    sim_call(sim_url, "DELETE", "/_sim/trace")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    log = tmp / f"n{n_proc}-s{streams}.log"  # a file, not a pipe: nobody reads a pipe mid-run
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
    t_start = time.time()
    try:
        time.sleep(args.ramp + args.warmup + 0.5)
        w0, ws = time.time(), time.perf_counter_ns()
        c0, s0, b0 = tree_cpu_s(proc.pid), tree_cpu_s(sim_pid), busy_ms(args.all_cpus)
        m0 = cpu_s(proc.pid)  # under --processes the process we started is the master; the workers are its children
        d0, e0 = run_delay_ms(proc.pid), run_delay_ms(sim_pid)  # runnable, waiting for a core
        time.sleep(args.duration)
        w1, we = time.time(), time.perf_counter_ns()
        c1, s1, b1 = tree_cpu_s(proc.pid), tree_cpu_s(sim_pid), busy_ms(args.all_cpus)
        m1 = cpu_s(proc.pid)
        d1, e1 = run_delay_ms(proc.pid), run_delay_ms(sim_pid)
        proc.wait(timeout=run_s + 60)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
    err = log.read_text()
    if not (report / "requests.jsonl").is_file():
        raise RuntimeError(f"N={n_proc}, {streams} streams: no records (exit {proc.returncode}): {err[-1500:]}")
    with open(report / "requests.jsonl") as f:
        records = [json.loads(line) for line in f if line.strip()]
    trace = sim_call(sim_url, "GET", "/_sim/trace?compact=1") or []
    stamped = [(r, ours_stamps(r)) for r in records]
    stamps = analyse([st for _, st in stamped if st is not None], trace, ws, we, args.itl_ms)
    per_worker: dict[str, int] = {}
    chunks = 0
    ttfts = sorted(r["ttft_ns"] / 1e6 for r in records
                   if r.get("ttft_ns") is not None and w0 <= r["start_time"] < w1 and not r.get("warmup"))
    for r, st in stamped:  # chunks stamped in the window, on the clock of the TTFT error's window
        k = sum(1 for t in st[2] if ws <= t < we) if st is not None else 0
        chunks += k
        per_worker[r.get("worker") or "local"] = per_worker.get(r.get("worker") or "local", 0) + k
    window = w1 - w0
    ended = sum(1 for r in records if r.get("e2e_ns") is not None and w0 <= r["start_time"] + r["e2e_ns"] / 1e9 < w1)
    summary = json.loads((report / "summary.json").read_text())
    check = summary.get("self_check", {})
    lag99 = max((n["loop_lag_ms"]["p99"] or 0 for n in check.get("nodes", [])), default=None)
    offered = users * args.output_tokens / ((args.ttft_ms + (args.output_tokens - 1) * args.itl_ms) / 1000)
    res = {
        "processes": n_proc, "streams_per_process": streams, "streams": users, "offered_chunks_per_s": offered,
        "chunks_per_s": chunks / window, "chunks_per_s_per_process": chunks / window / n_proc,
        "per_worker_chunks_per_s": {w: c / window for w, c in per_worker.items()},
        "client_cpu_pct": 100 * (c1 - c0) / window,
        "cpu_ms_per_1k_chunks": 1000 * (c1 - c0) / (chunks / 1000) if chunks else None,
        "sim_cpu_pct": 100 * (s1 - s0) / window,
        "sim_cpu_ms_per_1k_chunks": 1000 * (s1 - s0) / (chunks / 1000) if chunks else None,
        "records_per_s": ended / window,
        # the master's own CPU (N > 1): what merging the workers' records costs it
        "master_cpu_pct": 100 * (m1 - m0) / window if n_proc > 1 else None,
        "master_us_per_record": 1e6 * (m1 - m0) / ended if n_proc > 1 and ended else None,
        # ms per second that the client's processes (summed) and the simulator waited for a core while runnable
        "client_wait_ms_per_s": (d1 - d0) / window, "sim_wait_ms_per_s": (e1 - e0) / window,
        "cpus": args.all_cpus, "cpus_busy_pct": (b1 - b0) / 10 / window,  # % of one core, summed over them
        "ttft_p99_ms": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else None,
        "ttft_err_p99_ms": stamps["ttft_err_p99_ms"],
        "ttft_err_p999_ms": stamps["ttft_err_p999_ms"],
        "ttft_err_n": stamps["ttft_err_n"],
        "unmatched": stamps["unmatched"],
        "sim_first_late_p99_ms": sim_first_late_ms(trace, ws, we),
        "lag_p99_ms": lag99, "self_check_saturated": bool(check.get("saturated")),
        "exit_code": proc.returncode, "started": t_start,
    }
    res["cpu_bound_chunks_per_s"] = cpu_bound(len(args.all_cpus), res["cpu_ms_per_1k_chunks"],
                                              res["sim_cpu_ms_per_1k_chunks"])
    loose, tight = BOUNDS_MS  # the ceiling's bounds, 5 and 1 ms
    res["sustained"] = sustained(res["chunks_per_s"], offered, res["ttft_err_p99_ms"], loose)
    res["sustained_1ms"] = sustained(res["chunks_per_s"], offered, res["ttft_err_p99_ms"], tight)
    if proc.returncode not in (0, 1):
        res["error"] = err[-500:]
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", default="1", help="process counts, comma-separated (default 1; e.g. 1,2,4)")
    ap.add_argument("--streams", default="80,160,240,320,400", help="streams per process, the steps")
    ap.add_argument("--sim-cpus", default="0", help="CPUs of the simulator (taskset list, default 0)")
    ap.add_argument("--client-cpus", default="1", help="CPUs of the client processes (default 1)")
    ap.add_argument("--shared-cpus", metavar="CPUS",
                    help="the simulator and the clients on these same CPUs, at normal priority (replaces "
                         "--sim-cpus and --client-cpus): --processes N on a machine that runs its server too")
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--ramp", type=float, default=3.0, help="seconds to start all users (default 3)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after the ramp before measuring")
    ap.add_argument("--duration", type=float, default=8.0, help="measured window per step, seconds")
    ap.add_argument("--priority", choices=("rt", "normal"), help="rt (SCHED_FIFO 1 for the simulator and N = 1; default as root) or normal")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "worker_scaling.json"))
    args = ap.parse_args(argv)
    procs = [int(x) for x in args.processes.split(",")]
    if args.shared_cpus:  # FIFO on shared cores would let the simulator starve the clients, or the reverse
        args.sim_cpus = args.client_cpus = args.shared_cpus
        if args.priority == "rt":
            print("worker_scaling: --shared-cpus runs at normal priority (--priority rt not taken)", file=sys.stderr)
        args.priority = "normal"
    if args.priority is None:
        args.priority = "rt" if os.geteuid() == 0 and shutil.which("chrt") else "normal"
    args.all_cpus = sorted(set(cpus(args.sim_cpus)) | set(cpus(args.client_cpus)))
    steps = [int(x) for x in args.streams.split(",")]
    if not shutil.which("taskset"):
        print("worker_scaling: taskset (util-linux) is needed", file=sys.stderr)
        return 2
    if not args.shared_cpus and set(cpus(args.sim_cpus)) & set(cpus(args.client_cpus)):
        print("worker_scaling: --sim-cpus and --client-cpus must not overlap (or share them all: --shared-cpus)",
              file=sys.stderr)
        return 2
    if not args.shared_cpus and max(procs) > len(cpus(args.client_cpus)):
        print(f"worker_scaling: note: {max(procs)} processes on {len(cpus(args.client_cpus))} client CPU(s) share "
              "cores; give each its own for a scaling figure", file=sys.stderr)
    sim = start_simulator(["--ttft-ms", f"{args.ttft_ms:g}", "--itl-ms", f"{args.itl_ms:g}", "--output-tokens",
                           str(args.output_tokens), "--max-batch", "100000", "--tokens-per-chunk", "1",
                           "--trace-limit", "1000000"])  # every request of a step (the default keeps 2,000)
    subprocess.run(["taskset", "-a", "-p", "-c", args.sim_cpus, str(sim.pid)], capture_output=True, check=False)
    if args.priority == "rt":
        subprocess.run(["chrt", "-a", "-f", "-p", "1", str(sim.pid)], capture_output=True, check=False)
    print(f"simulator {sim.url} on CPUs {args.sim_cpus}; clients on CPUs {args.client_cpus}; priority "
          f"{args.priority}; ITL {args.itl_ms:g} ms, "
          f"TTFT {args.ttft_ms:g} ms, {args.output_tokens} tokens: {1000 / args.itl_ms:.0f} chunks/s per stream",
          flush=True)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="worker_scaling-") as td:
            for n in procs:
                for s in steps:
                    r = run_step(n, s, sim.url, sim.pid, args, Path(td))
                    results.append(r)
                    print(f"  N={n} streams/process={s:4d}: {r['chunks_per_s']:7.0f} chunks/s of "
                          f"{r['offered_chunks_per_s']:.0f} offered, CPU {r['client_cpu_pct']:.0f}%, "
                          f"{r['cpu_ms_per_1k_chunks'] or 0:.1f} ms/1k, simulator {r['sim_cpu_pct']:.0f}%, CPUs "
                          f"{args.sim_cpus if args.shared_cpus else ','.join(map(str, args.all_cpus))} busy "
                          f"{r['cpus_busy_pct']:.0f}%, TTFT error p99 {r['ttft_err_p99_ms'] or 0:.2f} ms, "
                          f"simulator late p99 {r['sim_first_late_p99_ms'] or 0:.2f} ms, waits for a core (ms/s) client "
                          f"{r['client_wait_ms_per_s']:.1f} simulator {r['sim_wait_ms_per_s']:.1f}, "
                          f"TTFT p99 {r['ttft_p99_ms'] or 0:.1f} ms, "
                          f"lag p99 {r['lag_p99_ms'] or 0:.2f} ms"
                          + (f", master {r['master_cpu_pct']:.1f}% = {r['master_us_per_record'] or 0:.0f} us per record "
                             f"({r['records_per_s']:.0f} records/s)" if n > 1 else "")
                          + ("" if r["sustained"] else "  (not sustained)"), flush=True)
    finally:
        sim.stop()
    head = ("N", "streams/proc", "offered/s", "chunks/s", "per proc/s", "cpu%", "ms/1k", "sim%", "sim ms/1k",
            "busy%", "cpu bound/s", "wait ms/s", "sim wait", "err99 ms", "err999 ms", "sim late99", "ttft99 ms",
            "lag99 ms", "sustained")
    lines = [head] + [(str(r["processes"]), str(r["streams_per_process"]), f"{r['offered_chunks_per_s']:.0f}",
                       f"{r['chunks_per_s']:.0f}", f"{r['chunks_per_s_per_process']:.0f}",
                       f"{r['client_cpu_pct']:.0f}", f"{r['cpu_ms_per_1k_chunks'] or 0:.1f}",
                       f"{r['sim_cpu_pct']:.0f}", f"{r['sim_cpu_ms_per_1k_chunks'] or 0:.1f}",
                       f"{r['cpus_busy_pct']:.0f}", f"{r['cpu_bound_chunks_per_s'] or 0:.0f}",
                       f"{r['client_wait_ms_per_s']:.1f}", f"{r['sim_wait_ms_per_s']:.1f}",
                       f"{r['ttft_err_p99_ms'] or 0:.2f}", f"{r['ttft_err_p999_ms'] or 0:.2f}",
                       f"{r['sim_first_late_p99_ms'] or 0:.2f}",
                       f"{r['ttft_p99_ms'] or 0:.1f}", f"{r['lag_p99_ms'] or 0:.2f}",
                       "1 ms" if r["sustained_1ms"] else "5 ms" if r["sustained"] else "no") for r in results]
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    print()
    for i, row in enumerate(lines):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    capacity = {n: max((r["chunks_per_s"] for r in results if r["processes"] == n and r["sustained"]), default=None)
                for n in procs}
    capacity_1ms = {n: max((r["chunks_per_s"] for r in results if r["processes"] == n and r["sustained_1ms"]),
                           default=None) for n in procs}
    print("\ncapacity (highest sustained step, chunks/s): 5 ms:", ", ".join(f"N={n}: {c or 0:.0f}" for n, c in capacity.items()),
          "| 1 ms:", ", ".join(f"N={n}: {c or 0:.0f}" for n, c in capacity_1ms.items()))
    scaling = {}
    if capacity.get(1):
        for n, c in capacity.items():
            if n > 1 and c:
                scaling[n] = c / (n * capacity[1])
                print(f"  N={n}: {scaling[n]:.2f} x N x one process's ({'MET' if scaling[n] >= 0.9 else 'MISS'} >= 0.9)")
    knees = {}
    for n in procs:  # what stopped each process count: its first step not sustained
        rows = [r for r in results if r["processes"] == n]
        knee = next((r for r in rows if not r["sustained"]), None)
        if knee is not None:
            knees[n] = {k: knee[k] for k in ("streams_per_process", "chunks_per_s", "offered_chunks_per_s",
                                             "client_cpu_pct", "sim_cpu_pct", "cpus_busy_pct",
                                             "cpu_bound_chunks_per_s", "client_wait_ms_per_s", "sim_wait_ms_per_s",
                                             "ttft_err_p99_ms", "sim_first_late_p99_ms", "master_cpu_pct",
                                             "master_us_per_record",
                                             "ttft_p99_ms", "lag_p99_ms")}
            print(f"  N={n} missed the 5 ms bound at {knee['streams_per_process']} streams/process "
                  f"({knee['offered_chunks_per_s']:.0f} chunks/s offered, {knee['chunks_per_s']:.0f} received, "
                  f"TTFT error p99 {knee['ttft_err_p99_ms'] or 0:.2f} ms): clients {knee['client_cpu_pct']:.0f}% + simulator "
                  f"{knee['sim_cpu_pct']:.0f}% of a core, CPUs {','.join(map(str, args.all_cpus))} busy "
                  f"{knee['cpus_busy_pct']:.0f}% of {100 * len(args.all_cpus)}%, "
                  f"cost-per-chunk bound {knee['cpu_bound_chunks_per_s'] or 0:.0f} chunks/s; waits for a core: "
                  f"clients {knee['client_wait_ms_per_s']:.1f} ms/s, simulator {knee['sim_wait_ms_per_s']:.1f} ms/s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"schema": "locust-llm/bench/worker_scaling/1", "settings": vars(args),
                               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                           "loadavg": os.getloadavg()},
                               "results": results, "capacity": capacity, "capacity_1ms": capacity_1ms,
                               "scaling": scaling, "knees": knees},
                              indent=2))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
