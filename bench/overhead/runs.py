"""Running the clients: the command line of each, one measured run (retried when other jobs
disturbed it), clients streaming together (calm pairs), and our client under py-spy. Each run
reads the processes' CPU, memory and run delay from /proc around its window and hands the
records to ``analysis``."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.lib.priority import priority_prefix
from bench.lib.procfs import core_busy_ms, cpu_ms, preemptions, rss_kb, run_delay_ms
from bench.overhead.analysis import analyse, lag_figures, load_client_records
from bench.overhead.config import BENCH, ROOT, VENV_BIN, offered_rate, start_s, window_s
from bench.overhead.report import collapse_report
from bench.overhead.simulator import Simulator

READY = "BENCH-READY"


def client_command(kind: str, n: int, url: str, stream_s: float, args: argparse.Namespace,
                   workdir: Path, start: str = "even") -> tuple[list[str], dict[str, str], Path]:
    """The command line, environment and per-request output file of one client run."""
    env = dict(os.environ)
    spread = args.spread if start == "even" else 0.0
    env.update({
        "BENCH_STREAMS": str(n), "BENCH_SPREAD_S": f"{spread:g}", "BENCH_HOLD_S": f"{args.hold:g}",
        "BENCH_MAX_TOKENS": str(args.output_tokens), "PYTHONUNBUFFERED": "1",
    })
    pin = [*priority_prefix(args.priority), "taskset", "-c", str(args.client_cpu)]
    if kind in ("floor", "uvfloor"):  # the gevent floor, the uvloop floor: the same command line
        out = workdir / f"{kind}.jsonl"
        script = args.floor_script if kind == "floor" else str(BENCH / "floor_uvloop.py")
        cmd = [*pin, sys.executable, script, "--url", url, "--streams", str(n),
               "--duration", f"{stream_s:g}", "--out", str(out), "--hold", f"{args.hold:g}",
               "--spread", f"{args.spread:g}", "--max-tokens", str(args.output_tokens), "--drain", f"{args.drain:g}"]
        return cmd, env, out
    locust = [*pin, str(VENV_BIN / "locust")]
    rate = str(n) if start == "even" else f"{args.spawn_rate:g}"
    common = ["--host", url, "--headless", "-u", str(n), "-r", rate, "-t", f"{max(1, round(stream_s))}s",
              "--stop-timeout", f"{args.drain:g}", "--loglevel", "WARNING"]
    if kind == "fasthttp":
        out = workdir / "fasthttp.jsonl"
        env["BENCH_OUT"] = str(out)
        return [*locust, "-f", str(BENCH / "fasthttp_locustfile.py"), *common], env, out
    report = workdir / "ours"
    if args.lag_trace != "off":  # the self-check's raw lag trace (probes, gc passes, our spans)
        env["LOCUST_LLM_LAG_TRACE"] = str(workdir / "lagtrace.json")
        if args.lag_trace == "greenlets":
            env["LOCUST_LLM_LAG_TRACE_GREENLETS"] = "1"
    cmd = [*locust, "-f", str(args.ours_locustfile), *common, "--llm-report", str(report),
           "--llm-max-tokens", str(args.output_tokens),
           "--llm-spawn-spread", "on" if start == "locust" else "off"]
    return cmd, env, report / "requests.jsonl"


def wait_quiet(args: argparse.Namespace) -> float | None:
    """Wait (up to --quiet-wait s) until other jobs leave both cores alone; returns the
    busiest core's load (%) in the last one-second sample."""
    if args.quiet_wait <= 0:
        return None
    deadline = time.monotonic() + args.quiet_wait
    while True:
        a = [core_busy_ms(c)[0] for c in (args.sim_cpu, args.client_cpu)]
        time.sleep(1.0)
        b = [core_busy_ms(c)[0] for c in (args.sim_cpu, args.client_cpu)]
        load = max((y - x) / 10.0 for x, y in zip(a, b, strict=True))
        if load < args.quiet_pct or time.monotonic() > deadline:
            return load


def run_measured(kind: str, n: int, sim: Simulator, args: argparse.Namespace, tmp: Path, tag: str,
                 start: str = "even") -> dict[str, Any]:
    """One run, repeated (up to --retries times) while the client waited for its core (other
    jobs, the hypervisor) more than --disturbed-pct of its window; keeps the least disturbed."""
    tries = []
    for attempt in range(args.retries + 1):
        load = wait_quiet(args)
        r = run_one(kind, n, sim, args, tmp / f"{tag}-try{attempt}", start)
        r["load_before_pct"] = load
        r["attempt"] = attempt
        tries.append(r)
        if r["client_wait_pct"] <= args.disturbed_pct and not r.get("error"):
            break
        print(f"  {kind:9s} N={n:4d}: the client waited {r['client_wait_pct']:.1f}% of the window for its core"
              f"{' (' + r['error'][:80] + ')' if r.get('error') else ''}; "
              f"{'again' if attempt < args.retries else 'keeping the least disturbed try'}", flush=True)
    best = min(tries, key=lambda t: (bool(t.get("error")), t["client_wait_pct"]))
    best["disturbed"] = best["client_wait_pct"] > args.disturbed_pct
    return best


def run_one(kind: str, n: int, sim: Simulator, args: argparse.Namespace, workdir: Path,
            start: str = "even") -> dict[str, Any]:
    return run_together((kind,), n, sim, args, workdir, start)[0]


def run_together(kinds: tuple[str, ...], n: int, sim: Simulator, args: argparse.Namespace, workdir: Path,
                 start: str = "even", window: float | None = None) -> list[dict[str, Any]]:
    """One measured window with these clients streaming at once, N streams each, all pinned to
    the client core (one client: a step's run; ours and the floor together: a calm pair). Per
    client: its own CPU, memory, run delay and stamps against the simulator's trace."""
    workdir.mkdir(parents=True, exist_ok=True)
    starting = start_s(n, start, args)
    window = window or window_s(n, args)
    stream_s = starting + args.warmup + window + 0.5
    sim.clear()
    procs: list[tuple[str, subprocess.Popen, Path, Path]] = []  # kind, process, records file, its folder
    per: list[dict[str, Any]] = []
    try:
        for kind in kinds:
            d = workdir / (kind if len(kinds) > 1 else "")  # together: a folder per client
            d.mkdir(parents=True, exist_ok=True)
            cmd, env, out = client_command(kind, n, sim.url, stream_s, args, d, start)
            with open(d / "client.log", "w") as log:
                procs.append((kind, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT),
                              out, d))
        t_ready = max(_wait_ready(proc, d / "client.log", 60) for _, proc, _, d in procs)
        time.sleep(args.hold * 0.6)
        per = [{"rss_base": rss_kb(proc.pid)} for _, proc, _, _ in procs]
        _sleep_until(t_ready + args.hold + starting + args.warmup)
        for m, (_, proc, _, _) in zip(per, procs, strict=True):
            m.update(rss_open=rss_kb(proc.pid), x0=preemptions(proc.pid), d0=run_delay_ms(proc.pid))
        k0, sd0, st0 = core_busy_ms(args.client_cpu), run_delay_ms(sim.pid), sim.stats()
        c0 = [cpu_ms(proc.pid) for _, proc, _, _ in procs]
        s0, ws = cpu_ms(sim.pid), time.perf_counter_ns()
        time.sleep(window)
        c1 = [cpu_ms(proc.pid) for _, proc, _, _ in procs]
        s1, we = cpu_ms(sim.pid), time.perf_counter_ns()
        st1, k1, sd1 = sim.stats(), core_busy_ms(args.client_cpu), run_delay_ms(sim.pid)
        for m, (_, proc, _, _), a, b in zip(per, procs, c0, c1, strict=True):
            m.update(cpu=b - a, x1=preemptions(proc.pid), d1=run_delay_ms(proc.pid), rss_end=rss_kb(proc.pid))
        for _, proc, _, _ in procs:
            try:
                proc.wait(args.drain + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        for _, proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    trace = sim.trace()
    win_s = (we - ws) / 1e9
    results = []
    for m, (kind, proc, out, d) in zip(per, procs, strict=True):
        records = load_client_records(kind, out)
        if args.keep:
            keep = Path(args.keep) / d.relative_to(workdir.parent)
            keep.mkdir(parents=True, exist_ok=True)
            (keep / "trace.json").write_bytes(orjson.dumps(trace))
            (keep / "client.json").write_bytes(orjson.dumps({"window": [ws, we], "records": records}))
            shutil.copy(d / "client.log", keep / "client.log")
            if (d / "lagtrace.json").exists():
                shutil.copy(d / "lagtrace.json", keep / "lagtrace.json")
        res = analyse(records, trace, ws, we, args.itl_ms)
        res.update(lag_figures(d / "lagtrace.json", records, trace, ws, we, res.get("ttft_err_p99_ms"),
                               args.late_bound_ms))
        cpu = m["cpu"]
        res.update({
            "client": kind,
            "start": start,
            "streams": n,
            "offered_chunks_per_s": offered_rate(n, args),
            "window_s": win_s,
            "client_cpu_pct": 100.0 * cpu / 1000.0 / win_s,
            "cpu_ms_per_1k_chunks": cpu / (res["chunks"] / 1000.0) if res["chunks"] else None,
            "rss_base_kb": m["rss_base"],
            "rss_open_kb": m["rss_open"],
            "rss_end_kb": m["rss_end"],
            "rss_per_stream_kb": (m["rss_open"] - m["rss_base"]) / n,
            # what the process kept as the window went on (records, histories): not per stream
            "rss_growth_kb_per_1k_requests": (m["rss_end"] - m["rss_open"]) / (res["requests_in_window"] / 1000.0)
            if res["requests_in_window"] else None,
            "sim_cpu_pct": 100.0 * (s1 - s0) / 1000.0 / win_s,
            "sim_stats_chunks_per_s": (st1.get("chunks", 0) - st0.get("chunks", 0)) / win_s,
            # what other jobs on the machine (with clients together: the other client too) took
            # of the client's core (their CPU there, and the hypervisor's steal), and how often the
            # client was made to wait for its core
            "client_core_foreign_pct": max(0.0, 100.0 * (k1[0] - k0[0] - cpu) / 1000.0 / win_s),
            "client_core_steal_pct": 100.0 * (k1[1] - k0[1]) / 1000.0 / win_s,
            "client_preemptions": m["x1"] - m["x0"],
            # time the client (and the simulator) were ready to run but waited for their core
            "client_run_delay_pct": 100.0 * (m["d1"] - m["d0"]) / 1000.0 / win_s,
            "sim_run_delay_pct": 100.0 * (sd1 - sd0) / 1000.0 / win_s,
            "client_wait_pct": 100.0 * ((m["d1"] - m["d0"]) + (k1[1] - k0[1])) / 1000.0 / win_s,
            "exit_code": proc.returncode,
        })
        res["sim_short"] = res["sim_chunks_per_s"] < 0.95 * res["offered_chunks_per_s"]
        res["sim_saturated"] = res["sim_cpu_pct"] > 85.0
        if not records:
            res["error"] = "no records; client log: " + (d / "client.log").read_text(errors="replace")[-600:]
        results.append(res)
    return results


def calm_pair(n: int, sim: Simulator, args: argparse.Namespace, tmp: Path, rnd: int) -> dict[str, Any]:
    """Ours and the floor streaming at once on the client core, N streams each, for
    --calm-pair-s: each client's CPU per 1,000 chunks in the same window. Windows run one
    after another are read at different moments of the host's speed (its other tenants, the
    virtual CPU's idle periods): a client's CPU per chunk moved 20-40 % from one window to
    the next, the floor's as much as ours, and that, not either client, set the ratio of
    sequential rounds. Together, both see the same moments: ours' excess over the floor (ms per
    1k chunks) stays steady from pair to pair, and the CPU target reads it (``targets``). Who
    starts first alternates."""
    order = ("ours", "floor") if rnd % 2 == 0 else ("floor", "ours")
    rows = {r["client"]: r for r in run_together(order, n, sim, args, tmp / f"pair-{n}-r{rnd}",
                                                 window=args.calm_pair_s)}
    o, f = rows["ours"]["cpu_ms_per_1k_chunks"], rows["floor"]["cpu_ms_per_1k_chunks"]
    keep = ("cpu_ms_per_1k_chunks", "chunks_per_s", "client_cpu_pct", "ttft_err_p99_ms", "client_run_delay_pct",
            "error")
    return {"round": rnd, "streams": n, "order": list(order), "window_s": rows["ours"]["window_s"],
            "sim_cpu_pct": rows["ours"]["sim_cpu_pct"],
            "ours": {k: rows["ours"].get(k) for k in keep}, "floor": {k: rows["floor"].get(k) for k in keep},
            "excess_ms_per_1k": o - f if o and f else None, "ratio": o / f if o and f else None}


def profile_client(kind: str, sim: Simulator, args: argparse.Namespace, tmp: Path, path: Path) -> str:
    """Run a client at a high rate under py-spy (sampling, non-blocking, on the other core)
    and keep the top functions by own time and by inclusive time."""
    pyspy = shutil.which("py-spy", path=str(VENV_BIN)) or shutil.which("py-spy")
    if not pyspy:
        return "py-spy not installed (.venv/bin/pip install py-spy): no profile"
    n = args.profile_streams
    workdir = tmp / f"profile-{kind}-{n}"
    workdir.mkdir(parents=True, exist_ok=True)
    stream_s = args.spread + args.warmup + args.profile_s + 0.5
    cmd, env, _ = client_command(kind, n, sim.url, stream_s, args, workdir)
    sim.clear()
    wait_quiet(args)
    log_path = workdir / "client.log"
    raw = workdir / "pyspy.txt"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        t_ready = _wait_ready(proc, log_path, 60)
        _sleep_until(t_ready + args.hold + args.spread + args.warmup)
        c0 = cpu_ms(proc.pid)
        spy = subprocess.run(
            ["taskset", "-c", str(args.sim_cpu), pyspy, "record", "--pid", str(proc.pid), "--nonblocking",
             "--rate", "500", "--duration", str(max(1, int(args.profile_s))), "--format", "raw", "--threads",
             "--output", str(raw)],
            capture_output=True, text=True, timeout=args.profile_s + 60,
        )
        cpu_pct = (cpu_ms(proc.pid) - c0) / 10.0 / args.profile_s
        proc.wait(args.drain + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if spy.returncode != 0 or not raw.exists():
        return f"py-spy failed ({spy.returncode}): {spy.stderr[-500:]}"
    title = (f"py-spy profile of the {kind} client, {n} streams (~{offered_rate(n, args):.0f} chunks/s offered), "
             f"client CPU {cpu_pct:.0f}% of its core")
    text = collapse_report(raw.read_text(), title)
    path.write_text(text)
    return text


def _wait_ready(proc: subprocess.Popen, log_path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if READY in log_path.read_text(errors="replace"):
            return time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"client exited at start: {log_path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.02)
    raise RuntimeError(f"client never became ready: {log_path.read_text(errors='replace')[-2000:]}")


def _sleep_until(t: float) -> None:
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)
