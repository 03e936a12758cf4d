"""How much does the load generator cost, and how true are its stamps? Three clients, same streams.

The simulator runs pinned to one core (``taskset -c 0``), each client in turn pinned to the
other (``taskset -c 1``). For every step of N concurrent streams (fixed ITL, one token per
chunk, closed loop: a stream sends its next request when the last one ends; first requests
spread evenly over one request's length) the three clients run one after another against the
same simulator:

- ``ours``: a headless Locust process with our VLLMUser (bench/ours_locustfile.py: the
  locustfiles/vllm.py user plus the benchmark's start-up pause and start spread), with
  ``--llm-report``;
- ``fasthttp``: Locust's stock FastHttpUser reading ``resp._response.readline()``
  (bench/fasthttp_locustfile.py);
- ``floor``: a bare gevent client (bench/floor_client.py).

Per client and step: token chunks/s received in the measured window; client CPU milliseconds
per 1,000 chunks (utime+stime from /proc of the client process and its children, window
only); RSS per open stream (VmRSS with the streams open minus VmRSS before any opened, over
N); and the error of the client's stamps against the simulator's ground truth
(``GET /_sim/trace``: the perf_counter_ns taken just before each chunk was written; the same
CLOCK_MONOTONIC as the client's): TTFT error per request (client first-token stamp minus the
simulator's write stamp of that chunk) and ITL error per gap (client gap minus simulator gap),
p50 and p99, in ms. Then each client's sustained capacity: the highest chunks/s whose TTFT
error p99 stays under 5 ms (and under 1 ms).

The CPU comparison with the floor is read at the calm step (the step nearest ``--calm-rate``,
3,000 chunks/s) from ``--calm-pairs`` rounds in which ours and the floor stream at once, N
streams each, on the client core (``calm_pair``): both are read in the same window, so the
host's changes of speed between windows (20-40 % on this project's VMs, the floor's as much
as ours) fall on both alike. The target's ratio is the floor's best sequential round plus
ours' median excess over the floor in the pairs, over that round; the pairs' own ratios and
the sequential rounds' are shown beside it.

The simulator's own chunks/s, pacing and CPU are checked every run; a run where it fell more
than 5 % short of the offered rate is flagged, with the culprit (simulator or client). Run as
root, the simulator and the clients get SCHED_FIFO priority (``--priority``), so other jobs on a
shared machine only get the cores' idle time; a run where the client still waited for its core
(run delay from /proc/PID/schedstat, plus hypervisor steal) more than 2 % of the window is
retried, then flagged.

    .venv/bin/python bench/client_overhead.py            # about 25 minutes (more when runs are retried)
    .venv/bin/python bench/client_overhead.py --quick    # about 2 minutes
    .venv/bin/python bench/client_overhead.py --steps 60,320 --duration 8 --clients ours,floor
    .venv/bin/python bench/client_overhead.py --steps 280 --clients ours --start even,locust,locust-off

``--start`` chooses how the streams start (issue 15): ``even`` (the default above: first requests
spread evenly over one request's length; ``ours`` runs with ``--llm-spawn-spread off`` so that
spread is the only one), ``locust`` (Locust's way: ``-r --spawn-rate`` users at once every
second, with our default ``--llm-spawn-spread on``) and ``locust-off`` (Locust's bursts as they
are: ``--llm-spawn-spread off``). The ``locust`` modes run ``ours`` and ``fasthttp`` (which has
no spread: its first requests go out with each batch); ``floor`` starts evenly only.

Writes bench/results/client_overhead.json and, unless --no-profile, a py-spy profile of our
client at a high rate (bench/results/profile_ours.txt). docs/benchmarks.md explains it all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
VENV_BIN = Path(sys.executable).parent
CLIENTS = ("ours", "fasthttp", "floor")
READY = "BENCH-READY"
BOUNDS_MS = (5.0, 1.0)
sys.path.insert(0, str(ROOT))

from bench.lib.priority import priority_prefix  # noqa: E402
from bench.lib.procfs import core_busy_ms, cpu_ms, preemptions, rss_kb, run_delay_ms  # noqa: E402


# simulator -----------------------------------------------------------------------------------
class Simulator:
    """llm-sim pinned to one core, started through its command line."""

    def __init__(self, args: argparse.Namespace, max_streams: int) -> None:
        self.cmd = [
            *priority_prefix(args.priority), "taskset", "-c", str(args.sim_cpu), str(VENV_BIN / "llm-sim"), "--host", "127.0.0.1", "--port", "0",
            "--ttft-ms", f"{args.ttft_ms:g}", "--itl-ms", f"{args.itl_ms:g}",
            "--output-tokens", str(args.output_tokens), "--seed", "1", "--tokens-per-chunk", "1",
            "--max-batch", str(max(2 * max_streams, 256)), "--exit-with-parent",
            "--trace-limit", "1000000",  # it reads every trace of a window (the default is a small ring)
        ]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url = ""
        assert self.proc.stdout is not None
        got = threading.Event()
        lines: list[str] = []

        def reader() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if not got.is_set():
                    lines.append(line)
                    if "serving on" in line:
                        got.set()

        threading.Thread(target=reader, daemon=True).start()
        got.wait(30)
        for line in lines:
            if "serving on" in line:
                self.url = line.split("serving on", 1)[1].split()[0]
        if not self.url:
            self.stop()
            raise RuntimeError(f"llm-sim did not start ({' '.join(self.cmd)}): {''.join(lines)[-1000:]}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _call(self, method: str, path: str) -> Any:
        req = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
        return orjson.loads(body) if body else None

    def trace(self) -> list[dict[str, Any]]:
        return self._call("GET", "/_sim/trace?compact=1") or []

    def clear(self) -> None:
        self._call("DELETE", "/_sim/trace")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_sim/stats") or {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sim_loop() -> str:
    """The simulator's event loop: uvloop when installed (about twice the chunks/s of asyncio's
    own; the 'fast' extra, part of `make install`), else asyncio's."""
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio (pip install uvloop: the simulator is slower)"


# clients -------------------------------------------------------------------------------------
START_MODES = ("even", "locust", "locust-off")


def start_s(n: int, start: str, args: argparse.Namespace) -> float:
    """How long the streams take to start: the even spread, or Locust's batches (one each
    second, the last one's users then spread over up to 1 s)."""
    return args.spread if start == "even" else math.ceil(n / args.spawn_rate) + 1.0


def label(r: dict[str, Any]) -> str:
    """A result's row name: the client, and its start mode unless even."""
    start = r.get("start", "even")
    return r["client"] if start == "even" else f"{r['client']}/{start}"


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
    if kind == "floor":
        out = workdir / "floor.jsonl"
        cmd = [*pin, sys.executable, str(args.floor_script), "--url", url, "--streams", str(n),
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


def load_client_records(kind: str, path: Path) -> list[tuple[str, int, list[int]]]:
    """(request id, t0_ns, absolute stamps of the token-bearing chunks) per request."""
    out: list[tuple[str, int, list[int]]] = []
    if not path.exists():
        return out
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            d = orjson.loads(line)
            if kind != "ours":
                out.append((d["id"], d["t0"], d["chunks"]))
                continue
            if d.get("ttft_ns") is None:
                continue
            t = d["t0_ns"] + d["ttft_ns"]
            stamps = [t]
            for gap in d["itl_ns"]:
                t += gap
                stamps.append(t)
            out.append((d["request_id"], d["t0_ns"], stamps))
    return out


# statistics ----------------------------------------------------------------------------------
def pct(values: list[int], p: float) -> float | None:
    """Nearest-rank percentile in ms of values in ns."""
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k] / 1e6


def analyse(records: list[tuple[str, int, list[int]]], trace: list[dict[str, Any]], ws: int, we: int,
            itl_ms: float) -> dict[str, Any]:
    """Client stamps against the simulator's, for chunks stamped inside the window [ws, we)."""
    truth: dict[str, list[int]] = {}
    sim_chunks = 0
    sim_gaps: list[int] = []
    for t in trace:
        if "times_ns" in t:  # GET /_sim/trace?compact=1
            times = [x for x, k in zip(t["times_ns"], t["tokens"], strict=True) if k > 0]
        else:
            times = [c[0] for c in t.get("chunks") or () if c[1] > 0]
        truth[t["request_id"]] = times
        for i, x in enumerate(times):
            if ws <= x < we:
                sim_chunks += 1
                if i:
                    sim_gaps.append(x - times[i - 1])
    ttft_err: list[int] = []
    itl_err: list[int] = []
    lag: list[int] = []
    chunks = unmatched = count_mismatch = 0
    requests_in_window = 0
    for rid, t0, c in records:
        chunks += sum(1 for x in c if ws <= x < we)
        requests_in_window += ws <= t0 < we
        s = truth.get(rid)
        if s is None:
            unmatched += 1
            continue
        if len(s) != len(c):
            count_mismatch += 1
        m = min(len(s), len(c))
        if m and ws <= c[0] < we:
            ttft_err.append(c[0] - s[0])
        for k in range(m):
            if ws <= c[k] < we:
                lag.append(c[k] - s[k])
                if k:
                    itl_err.append((c[k] - c[k - 1]) - (s[k] - s[k - 1]))
    win_s = (we - ws) / 1e9
    return {
        "requests": len(records),
        "requests_in_window": requests_in_window,
        "unmatched": unmatched,
        "chunk_count_mismatch": count_mismatch,
        "chunks": chunks,
        "chunks_per_s": chunks / win_s,
        "sim_chunks_per_s": sim_chunks / win_s,
        "sim_gap_p50_ms": pct(sim_gaps, 50),
        "sim_gap_p99_ms": pct(sim_gaps, 99),
        "sim_late": (pct(sim_gaps, 50) or itl_ms) > 1.05 * itl_ms,
        "ttft_err_n": len(ttft_err),
        "ttft_err_p50_ms": pct(ttft_err, 50),
        "ttft_err_p99_ms": pct(ttft_err, 99),
        "ttft_err_p999_ms": pct(ttft_err, 99.9),
        "ttft_err_max_ms": max(ttft_err) / 1e6 if ttft_err else None,
        "itl_err_n": len(itl_err),
        "itl_err_p50_ms": pct(itl_err, 50),
        "itl_err_p99_ms": pct(itl_err, 99),
        "itl_err_p999_ms": pct(itl_err, 99.9),
        "chunk_delay_p50_ms": pct(lag, 50),
        "chunk_delay_p99_ms": pct(lag, 99),
        "chunk_delay_max_ms": max(lag) / 1e6 if lag else None,
    }


def lag_figures(path: Path, records: list[tuple[str, int, list[int]]], trace: list[dict[str, Any]], ws: int,
                we: int, ttft_p99_ms: float | None, late_bound_ms: float = 1.0) -> dict[str, Any]:
    """Our client's loop-lag trace (the self-check's probes, gc passes, our periodic work; see
    llm_users/lagtrace.py) over the window, and the late first-token stamps lined up with it:
    each stamp in the TTFT error tail (at or above the run's p99, at least 1 ms late) is put to
    the event that overlaps [simulator write, client stamp] most (``late_bound_ms`` lowers the
    1 ms floor, to name sub-millisecond tails); when none does, to whether
    the loop was seen blocked then (a late probe) or not (the stamp queued behind other
    ready work: CPU)."""
    out: dict[str, Any] = {"loop_lag_p99_ms": None, "loop_lag_p999_ms": None, "loop_lag_max_ms": None}
    if not path.exists():
        return out
    from bench.lib.llm_imports import OFF_CPU, LagTrace

    lt = LagTrace.from_dict(orjson.loads(path.read_bytes()))
    lags = [lag for due, lag in zip(lt.probe_due, lt.probe_lag, strict=True) if ws <= due < we]
    out.update({"loop_lag_p99_ms": pct(lags, 99), "loop_lag_p999_ms": pct(lags, 99.9),
                "loop_lag_max_ms": max(lags) / 1e6 if lags else None, "loop_probes": len(lags)})
    gcs: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for st, en, g in zip(lt.gc_start, lt.gc_end, lt.gc_gen, strict=True):
        if ws <= st < we:
            t = gcs[f"gen{g}"]
            t[0] += 1
            t[1] += (en - st) / 1e6
            t[2] = max(t[2], (en - st) / 1e6)
    out["gc_passes_over_0_1ms"] = {k: {"count": v[0], "total_ms": round(v[1], 3), "max_ms": round(v[2], 3)}
                                   for k, v in sorted(gcs.items())}
    spans: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for i, st, en in zip(lt.span_id, lt.span_start, lt.span_end, strict=True):
        if ws <= st < we:
            t = spans[lt.names[i]]
            t[0] += 1
            t[1] += (en - st) / 1e6
            t[2] = max(t[2], (en - st) / 1e6)
    out["tasks_over_0_1ms"] = {k: {"count": v[0], "total_ms": round(v[1], 3), "max_ms": round(v[2], 3)}
                               for k, v in sorted(spans.items(), key=lambda kv: -kv[1][1])[:12]}
    truth: dict[str, int] = {}
    for t in trace:
        times = t.get("times_ns") or [c[0] for c in t.get("chunks") or ()]
        toks = t.get("tokens") or [c[1] for c in t.get("chunks") or ()]
        first = next((x for x, k in zip(times, toks, strict=True) if k > 0), None)
        if first is not None:
            truth[t["request_id"]] = first
    bound = max(int(late_bound_ms * 1e6), int((ttft_p99_ms or 0) * 1e6))
    causes: dict[str, int] = defaultdict(int)
    late_probes = [(d, d + g, i) for i, (d, g) in enumerate(zip(lt.probe_due, lt.probe_lag, strict=True))
                   if g >= lt.late_ns]
    for rid, _t0, stamps in records:
        s0 = truth.get(rid)
        if s0 is None or not stamps or not ws <= stamps[0] < we or stamps[0] - s0 < bound:
            continue
        cause = lt.cause(s0, stamps[0])
        if cause == "unattributed":
            blocked = [i for a, b, i in late_probes if a < stamps[0] and b > s0]
            if not blocked:
                cause = "no loop stall (queued behind ready work)"
            elif any(lt.probe_cause(i) == OFF_CPU for i in blocked):
                cause = OFF_CPU
            else:
                cause = "loop blocked, cause unknown"
        causes[cause] += 1
    out["late_ttft_bound_ms"] = bound / 1e6
    out["late_ttft_causes"] = dict(sorted(causes.items(), key=lambda kv: -kv[1]))
    return out


# one run -------------------------------------------------------------------------------------
def request_s(args: argparse.Namespace) -> float:
    return (args.ttft_ms + (args.output_tokens - 1) * args.itl_ms) / 1000.0


def window_s(n: int, args: argparse.Namespace) -> float:
    """A step's measured window: --duration, or longer where that would hold fewer than
    --min-first-tokens first tokens (N streams start N / request_s of them a second): a
    "p99.9" of fewer than 1,000 values is the largest or second largest of them, not a
    99.9th percentile."""
    return max(args.duration, args.min_first_tokens * request_s(args) / n) if n else args.duration


def offered_rate(n: int, args: argparse.Namespace) -> float:
    """Chunks/s that N closed-loop streams get from an on-time server: T chunks per TTFT + (T-1) ITL."""
    return n * args.output_tokens / request_s(args)


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


# capacity, targets, table --------------------------------------------------------------------
def capacity(rows: list[dict[str, Any]], bound_ms: float) -> dict[str, Any] | None:
    """The highest chunks/s of a run whose TTFT error p99 stayed under the bound."""
    ok = [r for r in rows if r.get("ttft_err_p99_ms") is not None and r["ttft_err_p99_ms"] < bound_ms
          and not r.get("error")]
    if not ok:
        return None
    best = max(ok, key=lambda r: r["chunks_per_s"])
    top = max(rows, key=lambda r: r["streams"])
    return {
        "streams": best["streams"],
        "chunks_per_s": best["chunks_per_s"],
        "ttft_err_p99_ms": best["ttft_err_p99_ms"],
        # the largest step passed: the client's real capacity may be higher than the steps went
        "at_top_step": best["streams"] == top["streams"],
        "limited_by_sim": bool(best["streams"] == top["streams"] and (best["sim_saturated"] or best["sim_late"])),
    }


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def _label_order(name: str) -> tuple[int, int]:
    """Sort key of a row name (``ours``, ``ours/locust``): start mode, then client."""
    client, _, start = name.partition("/")
    return (START_MODES.index(start or "even"), CLIENTS.index(client))


def step_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per client and step over its repeats: medians, the spread of the TTFT error p99
    (min, max), p99.9, the largest loop lag; capacity is decided on these."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(label(r), r["streams"])].append(r)
    out = []
    for (kind, n), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], _label_order(kv[0][0]))):
        good = [r for r in rows if not r.get("error")] or rows
        p99s = [r["ttft_err_p99_ms"] for r in good if r.get("ttft_err_p99_ms") is not None]
        lags = [r.get("loop_lag_max_ms") for r in good if r.get("loop_lag_max_ms") is not None]
        causes: dict[str, int] = defaultdict(int)
        for r in good:
            for c, k in (r.get("late_ttft_causes") or {}).items():
                causes[c] += k
        out.append({
            "client": kind, "streams": n, "runs": len(rows), "repeats": sorted(r.get("repeat", 0) for r in rows),
            "offered_chunks_per_s": rows[0]["offered_chunks_per_s"],
            "chunks_per_s": _median([r["chunks_per_s"] for r in good]),
            "ttft_err_p99_ms": _median(p99s),  # what capacity is decided on
            "ttft_err_p99_ms_median": _median(p99s),
            "ttft_err_p99_ms_min": min(p99s) if p99s else None,
            "ttft_err_p99_ms_max": max(p99s) if p99s else None,
            "ttft_err_p99_ms_all": p99s,
            "ttft_err_p999_ms": _median([r.get("ttft_err_p999_ms") for r in good]),
            "ttft_err_p999_ms_max": max((r["ttft_err_p999_ms"] for r in good if r.get("ttft_err_p999_ms") is not None),
                                        default=None),
            "client_cpu_pct": _median([r["client_cpu_pct"] for r in good]),
            "loop_lag_p99_ms": _median([r.get("loop_lag_p99_ms") for r in good]),
            "loop_lag_max_ms": max(lags) if lags else None,
            "sim_cpu_pct_max": max(r["sim_cpu_pct"] for r in good),
            "sim_saturated": any(r["sim_saturated"] for r in good),
            "sim_late": any(r["sim_late"] for r in good),
            "sim_short": any(r["sim_short"] for r in good),
            "disturbed_runs": sum(1 for r in good if r.get("disturbed")),
            "late_ttft_causes": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
            "error": rows[0].get("error") if all(r.get("error") for r in rows) else None,
        })
    return out


def summarise(results: list[dict[str, Any]], args: argparse.Namespace,
              pairs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    by_client: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_client[label(r)].append(r)
    steps = step_rows(results)
    steps_by_client: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for st in steps:
        steps_by_client[st["client"]].append(st)
    calm_n = min(args.steps, key=lambda n: abs(offered_rate(n, args) - args.calm_rate))
    clients: dict[str, Any] = {}
    for kind, rows in by_client.items():
        calm = [r for r in rows if r["streams"] == calm_n and r.get("cpu_ms_per_1k_chunks")]
        best_calm = min(calm, key=lambda r: r["cpu_ms_per_1k_chunks"]) if calm else None
        top_n = max(r["streams"] for r in rows)
        top_rss = [r["rss_per_stream_kb"] for r in rows if r["streams"] == top_n]
        clients[kind] = {
            "lowest_step_chunks_per_s": min(rows, key=lambda r: r["streams"])["chunks_per_s"],
            "capacity_5ms": capacity(steps_by_client[kind], 5.0),
            "capacity_1ms": capacity(steps_by_client[kind], 1.0),
            "calm_streams": calm_n,
            "calm_cpu_ms_per_1k_chunks": best_calm["cpu_ms_per_1k_chunks"] if best_calm else None,
            "calm_cpu_ms_per_1k_chunks_all": [r["cpu_ms_per_1k_chunks"] for r in calm],
            "calm_cpu_by_repeat": {r["repeat"]: r["cpu_ms_per_1k_chunks"] for r in calm},
            "calm_chunks_per_s": best_calm["chunks_per_s"] if best_calm else None,
            "rss_per_stream_kb": min(top_rss),
            "rss_streams": top_n,
        }
    return {"clients": clients, "steps": steps, "targets": targets(clients, steps, pairs),
            "by_round": by_round(results, args)}


def by_round(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Each round on its own (a round = every step of every client once): capacity under 5 ms
    and 1 ms per client and the issue-14 comparisons with the floor, so "3 of 3 runs" reads
    off directly."""
    out: dict[str, Any] = {}
    for rep in range(args.repeats):
        rows = [r for r in results if r.get("repeat") == rep]
        if not rows:
            continue
        steps = step_rows(rows)
        caps: dict[str, Any] = {}
        for kind in sorted({label(r) for r in rows}, key=_label_order):
            mine = [st for st in steps if st["client"] == kind]
            caps[kind] = {"capacity_5ms": capacity(mine, 5.0), "capacity_1ms": capacity(mine, 1.0)}
        t = targets(caps, steps)
        keep = ("capacity_at_least_floor", "capacity_1ms_at_least_floor", "p999_within_1.5x_floor")
        out[str(rep)] = {"capacity": {k: {b: (c[b]["streams"] if c[b] else None) for b in c} for k, c in caps.items()},
                         "targets": {k: v for k, v in t.items() if k in keep}}
    return out


def targets(clients: dict[str, Any], steps: list[dict[str, Any]] | None = None,
            pairs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    o, f, h = clients.get("ours"), clients.get("floor"), clients.get("fasthttp")
    out: dict[str, Any] = {}
    steps = steps or []

    def cap(s: dict[str, Any], key: str = "capacity_5ms") -> tuple[int, float]:
        c = s.get(key)
        return (c["streams"], c["chunks_per_s"]) if c else (0, 0.0)

    if o and f:
        (on, oc), (fn, fc) = cap(o), cap(f)
        calm_o, calm_f = o.get("calm_cpu_by_repeat") or {}, f.get("calm_cpu_by_repeat") or {}
        out["capacity_at_least_floor"] = {
            "ours_chunks_per_s": oc, "floor_chunks_per_s": fc, "ours_streams": on, "floor_streams": fn,
            # the same step passed (the achieved rates of one step differ by noise only)
            "met": on >= fn and on > 0,
        }
        (on1, oc1), (fn1, fc1) = cap(o, "capacity_1ms"), cap(f, "capacity_1ms")
        out["capacity_1ms_at_least_floor"] = {"ours_chunks_per_s": oc1, "floor_chunks_per_s": fc1,
                                              "ours_streams": on1, "floor_streams": fn1, "met": on1 >= fn1 and on1 > 0}
        # issue 14: ours' TTFT error p99.9 within 1.5x the floor's at every step up to the
        # floor's 5 ms capacity (medians over the repeats)
        p999 = {(st["client"], st["streams"]): st["ttft_err_p999_ms"] for st in steps}
        ratios = {}
        for n in sorted({st["streams"] for st in steps if st["client"] == "floor"}):
            if n > fn or p999.get(("ours", n)) is None or not p999.get(("floor", n)):
                continue
            ratios[n] = p999[("ours", n)] / p999[("floor", n)]
        if ratios:
            out["p999_within_1.5x_floor"] = {"ratios_by_step": {str(k): round(v, 2) for k, v in ratios.items()},
                                             "met": all(v <= 1.5 for v in ratios.values())}
        oc1, fc1 = o.get("calm_cpu_ms_per_1k_chunks"), f.get("calm_cpu_ms_per_1k_chunks")
        # Sequential rounds: the two clients' runs of the same round (back to back), median
        # over the rounds; ours_ms / floor_ms are each client's best round.
        rounds = sorted(set(calm_o) & set(calm_f))
        seq = sorted(calm_o[k] / calm_f[k] for k in rounds)
        # Calm pairs (both at once, the same window) decide when there are any. What they
        # measure steadily is ours' excess over the floor in ms per 1k chunks; their own level
        # is the shared core's (two clients on it cost each more per chunk), and a cost both
        # pay alike pulls their ratio towards 1. So the ratio decided on is the floor's best
        # sequential round plus that excess, over the floor's best round (the smallest
        # denominator: the strictest reading); the pairs' own ratios are shown beside it.
        # (from the pairs' CPU figures themselves, so results files written before calm_pair
        # kept its excess read the same)
        both = [p for p in pairs or () if p.get("ratio")]
        excess = sorted(p["ours"]["cpu_ms_per_1k_chunks"] - p["floor"]["cpu_ms_per_1k_chunks"] for p in both)
        if excess or seq:
            t = out["calm_cpu_within_1.2x_floor"] = {"ours_ms": oc1, "floor_ms": fc1}
            if excess:
                ex = _median(excess)
                t.update({"decided_on": "ours' excess over the floor in calm pairs (both at once), over the floor's "
                          "best sequential round",
                          "ratio": (fc1 + ex) / fc1 if fc1 else _median([p["ratio"] for p in both]),
                          "excess_ms_per_1k": round(ex, 3), "pair_excess_ms_per_1k": [round(x, 3) for x in excess],
                          "pair_ratios": sorted(round(p["ratio"], 3) for p in both),
                          "sequential_ratio": _median(seq) if seq else None})
            else:
                t.update({"decided_on": "sequential rounds", "ratio": _median(seq)})
            t.update({"round_ratios": seq, "best_ratio": round(oc1 / fc1, 2) if oc1 and fc1 else None,
                      "met": t["ratio"] <= 1.2})
    if o and h and "lowest_step_chunks_per_s" in h:
        (on, oc), (_, hc) = cap(o), cap(h)
        t = out["capacity_2x_fasthttp"] = {"ours_chunks_per_s": oc, "fasthttp_chunks_per_s": hc,
                                           "ratio": oc / hc if hc else None, "met": oc > 0 and oc >= 2 * hc}
        if not hc:  # FastHttpUser passed no step: its capacity is under the lowest step's rate
            t["met"] = oc >= 2 * h["lowest_step_chunks_per_s"]
            t["note"] = "fasthttp passed no step; compared with the lowest step's rate"
    if o and "rss_per_stream_kb" in o:
        out["rss_per_stream_at_most_32kb"] = {"kb": o["rss_per_stream_kb"], "streams": o["rss_streams"],
                                              "met": o["rss_per_stream_kb"] <= 32.0}
    below = [st for st in steps if st["offered_chunks_per_s"] < 30000]
    if below:
        bad = [f"{st['client']} N={st['streams']}" for st in below if st["sim_saturated"] or st["sim_late"]]
        out["sim_not_bottleneck_below_30k"] = {"sim_cpu_pct_max": max(st["sim_cpu_pct_max"] for st in below),
                                               "bottleneck_at": bad, "met": not bad}
    return out


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _fl(v: Any) -> str:
    return "[" + ", ".join(_f(x) for x in v) + "]" if isinstance(v, list) else str(v)


def table(results: list[dict[str, Any]]) -> str:
    head = ("client", "N", "r", "offered/s", "chunks/s", "sim/s", "cpu%", "ms/1k", "KB/strm", "ttft50", "ttft99",
            "ttft999", "itl50", "itl99", "lagmax", "simcpu%", "wait%")
    rows = [head]
    notes = []
    for r in sorted(results, key=lambda r: (r["streams"], START_MODES.index(r.get("start", "even")),
                                            CLIENTS.index(r["client"]), r.get("repeat", 0))):
        mark = "*" if r.get("disturbed") else ""
        rows.append((
            label(r) + mark, str(r["streams"]), str(r.get("repeat", 0)), _f(r["offered_chunks_per_s"], "{:.0f}"),
            _f(r["chunks_per_s"], "{:.0f}"), _f(r["sim_chunks_per_s"], "{:.0f}"), _f(r["client_cpu_pct"], "{:.0f}"),
            _f(r["cpu_ms_per_1k_chunks"], "{:.1f}"), _f(r["rss_per_stream_kb"], "{:.1f}"),
            _f(r["ttft_err_p50_ms"], "{:.3f}"), _f(r["ttft_err_p99_ms"], "{:.3f}"), _f(r.get("ttft_err_p999_ms"), "{:.2f}"),
            _f(r["itl_err_p50_ms"], "{:.3f}"), _f(r["itl_err_p99_ms"], "{:.3f}"), _f(r.get("loop_lag_max_ms"), "{:.1f}"),
            _f(r["sim_cpu_pct"], "{:.0f}"),
            _f(r["client_wait_pct"], "{:.1f}"),
        ))
        if r["sim_short"] or r["sim_saturated"]:
            why = [f"the simulator wrote {r['sim_chunks_per_s']:.0f} chunks/s, "
                   f"{100 * (1 - r['sim_chunks_per_s'] / r['offered_chunks_per_s']):.0f}% short of the offered "
                   f"{r['offered_chunks_per_s']:.0f}"]
            if r["sim_saturated"] or r["sim_late"]:
                verdict = (f"THE SIMULATOR IS THE BOTTLENECK: its core at {r['sim_cpu_pct']:.0f}%, chunk gap p50 "
                           f"{_f(r['sim_gap_p50_ms'])} ms")
            else:
                verdict = ("the simulator kept its pace (chunk gap p50 "
                           f"{_f(r['sim_gap_p50_ms'])} ms, core at {r['sim_cpu_pct']:.0f}%): the client was late "
                           "to read or to send its next request")
            notes.append(f"WARNING {r['client']} N={r['streams']}: {why[0]}; {verdict}")
        if r.get("unmatched") or r.get("chunk_count_mismatch"):
            notes.append(f"note {r['client']} N={r['streams']}: {r['unmatched']} requests not in the trace, "
                         f"{r['chunk_count_mismatch']} with a chunk count unlike the trace's")
        if r.get("disturbed"):
            notes.append(f"* {r['client']} N={r['streams']}: the client waited {r['client_wait_pct']:.1f}% of the "
                         "window for its core (other jobs, hypervisor steal) in every try: its figures are "
                         "pessimistic")
        if r.get("error"):
            notes.append(f"ERROR {r['client']} N={r['streams']}: {r['error'][:300]}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines + notes)


def steps_table(steps: list[dict[str, Any]]) -> str:
    """Per client and step over its repeats: what capacity is decided on."""
    head = ("client", "N", "runs", "chunks/s", "cpu%", "ttft99 med", "[min-max]", "ttft999", "lag99", "lagmax",
            "simcpu%", "late TTFT stamps by cause")
    rows = [head]
    for st in steps:
        causes = ", ".join(f"{c} {k}" for c, k in list(st["late_ttft_causes"].items())[:3])
        rows.append((
            st["client"] + ("*" if st["disturbed_runs"] else ""), str(st["streams"]), str(st["runs"]),
            _f(st["chunks_per_s"], "{:.0f}"), _f(st["client_cpu_pct"], "{:.0f}"),
            _f(st["ttft_err_p99_ms_median"], "{:.3f}"),
            f"[{_f(st['ttft_err_p99_ms_min'], '{:.2f}')}-{_f(st['ttft_err_p99_ms_max'], '{:.2f}')}]",
            _f(st["ttft_err_p999_ms"], "{:.2f}"), _f(st["loop_lag_p99_ms"], "{:.2f}"),
            _f(st["loop_lag_max_ms"], "{:.1f}"),
            _f(st["sim_cpu_pct_max"], "{:.0f}") + ("!" if st["sim_saturated"] or st["sim_late"] else ""), causes,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    if any(st["sim_saturated"] or st["sim_late"] for st in steps):
        lines.append("! THE SIMULATOR IS THE BOTTLENECK at these steps (its core above 85% or its chunk gap p50 "
                     "past the ITL): the client's limit is not what was measured there")
    return "\n".join(lines)


def summary_text(s: dict[str, Any]) -> str:
    out = ["", "per step over the repeats (capacity is decided on the median TTFT error p99):",
           steps_table(s.get("steps") or []),
           "", "sustained capacity (median TTFT error p99 < 5 ms | < 1 ms), CPU at the calm step, memory:"]
    for kind in [*CLIENTS, *sorted(k for k in s["clients"] if k not in CLIENTS)]:
        c = s["clients"].get(kind)
        if not c:
            continue
        parts = []
        for key in ("capacity_5ms", "capacity_1ms"):
            cap = c[key]
            if cap is None:
                parts.append("  none passed        ")
            else:
                flag = " (sim-limited)" if cap["limited_by_sim"] else " (top step)" if cap["at_top_step"] else ""
                parts.append(f"{cap['chunks_per_s']:7.0f}/s N={cap['streams']:<4d}{flag}")
        calm = c["calm_cpu_ms_per_1k_chunks"]
        out.append(f"  {kind:18s} {parts[0]} | {parts[1]} | {_f(calm, '{:.1f}')} ms/1k chunks at "
                   f"{_f(c['calm_chunks_per_s'], '{:.0f}')}/s | {c['rss_per_stream_kb']:.1f} KB/stream "
                   f"(N={c['rss_streams']})")
    rounds = s.get("by_round") or {}
    if len(rounds) > 1:
        out.append("per round (issue 14 asks 3 of 3):")
        for rep, rd in rounds.items():
            caps = ", ".join(f"{k} {c['capacity_5ms']}|{c['capacity_1ms']}" for k, c in rd["capacity"].items())
            met = " ".join(f"{'MET' if t['met'] else 'MISS'} {name}" for name, t in rd["targets"].items())
            out.append(f"  round {rep}: N at 5 ms|1 ms: {caps}; {met}")
    out.append("targets:")
    for name, t in s["targets"].items():
        detail = ", ".join(f"{k}={_f(v) if isinstance(v, float) else _fl(v)}" for k, v in t.items() if k != "met")
        out.append(f"  {'MET ' if t['met'] else 'MISS'} {name}: {detail}")
    return "\n".join(out)


# profile -------------------------------------------------------------------------------------
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


def collapse_report(raw: str, title: str, top: int = 40) -> str:
    """Own and inclusive shares of the main thread's busy samples per function, from py-spy's
    collapsed stacks (``--threads``: the first frame names the thread). Samples whose leaf is
    the hub's loop (waiting in epoll or dispatching) are counted apart: py-spy cannot see
    inside libev, so that is "idle + event-loop C code". Helper threads (our self-check probe)
    are left out: their samples are mostly waits for the one core."""
    by_thread: dict[str, list[tuple[list[str], int]]] = defaultdict(list)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        thread = frames[0] if frames and frames[0].startswith("thread ") else "thread ?"
        frames = [_fname(f) for f in frames if not f.startswith(("process ", "thread "))]
        if frames:
            by_thread[thread].append((frames, int(count)))
    if not by_thread:
        return title + "\npy-spy recorded no samples\n"
    main = max(by_thread, key=lambda t: sum(c for _, c in by_thread[t]))
    others = sum(c for t, rows in by_thread.items() if t != main for _, c in rows)
    own: dict[str, int] = defaultdict(int)
    incl: dict[str, int] = defaultdict(int)
    total = hub = 0
    for frames, c in by_thread[main]:
        total += c
        if frames[-1].startswith(("Hub.run ", "run (gevent/hub.py")):
            hub += c
            continue
        own[frames[-1]] += c
        for fn in set(frames):
            incl[fn] += c
    busy = total - hub
    if not busy:
        return title + "\npy-spy recorded no busy samples\n"
    lines = [title,
             f"main thread: {total} samples, {100 * hub / total:.1f}% of them in the gevent hub loop (epoll wait + "
             f"libev dispatch, C code); shares below are of its other {busy} samples ({others} samples of "
             "helper threads left out)", "",
             "own time (leaf frame; C calls count to their Python caller)"]
    for fn, c in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * c / busy:6.2f}%  {fn}")
    lines += ["", "inclusive time"]
    for fn, c in sorted(incl.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * c / busy:6.2f}%  {fn}")
    return "\n".join(lines) + "\n"


def _fname(frame: str) -> str:
    """py-spy frames read "function (path/to/file.py:123)": keep the function and the file's
    last two path parts."""
    frame = frame.strip()
    name, sep, loc = frame.partition(" (")
    if not sep:
        return frame
    file = loc.rstrip(")").rsplit(":", 1)[0]
    parts = file.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


# --tail ---------------------------------------------------------------------------------------
TAIL_STEPS = "200,240,280,320,360,400"


def tail_steps(path: Path) -> list[int]:
    """The steps around the knee of an earlier run: per client, the highest step whose median
    TTFT error p99 stayed under 5 ms and the next one up, with every step of that run between
    them (and one 40-stream step either side when the knee is at the edge)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return [int(x) for x in TAIL_STEPS.split(",")]
    steps_by_client: dict[str, dict[int, float]] = defaultdict(dict)
    for st in doc.get("summary", {}).get("steps", []):
        if st.get("ttft_err_p99_ms_median") is not None:
            steps_by_client[st["client"]][st["streams"]] = st["ttft_err_p99_ms_median"]
    if not steps_by_client:  # an older file: one run per step
        for r in doc.get("results", []):
            if r.get("ttft_err_p99_ms") is not None:
                steps_by_client[r["client"]].setdefault(r["streams"], r["ttft_err_p99_ms"])
    all_steps = sorted({n for by in steps_by_client.values() for n in by})
    if not all_steps:
        return [int(x) for x in TAIL_STEPS.split(",")]
    lo, hi = None, None
    for by in steps_by_client.values():
        ok = [n for n, p in by.items() if p < BOUNDS_MS[0]]
        last_ok = max(ok) if ok else min(by) - 40
        above = [n for n in by if n > last_ok]
        first_bad = min(above) if above else last_ok + 40
        lo = last_ok if lo is None else min(lo, last_ok)
        hi = first_bad if hi is None else max(hi, first_bad)
    assert lo is not None and hi is not None
    out = {max(20, lo), hi} | {n for n in all_steps if lo <= n <= hi}
    return sorted(out)


# main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", help="stream counts, comma-separated (default 60,160,280,400,480,560; "
                    "--quick 60,400)")
    ap.add_argument("--clients", default=",".join(CLIENTS), help="subset of ours,fasthttp,floor")
    ap.add_argument("--duration", type=float, help="measured window per run, seconds (default 8; --quick 4)")
    ap.add_argument("--min-first-tokens", type=int, help="lengthen a step's window until it holds this many "
                    "first tokens, so its TTFT p99.9 is one (default 1000: 43 s at 60 streams; --quick 0)")
    ap.add_argument("--calm-rate", type=float, default=3000.0,
                    help="chunks/s of the CPU-per-chunk comparison: the step nearest it (default 3000)")
    ap.add_argument("--calm-repeats", type=int, help="extra rounds of the calm step (default: as many as make "
                    "3 with --repeats; --quick 0); without calm pairs the CPU target takes the median of "
                    "the per-round ours/floor ratios")
    ap.add_argument("--calm-pairs", type=int, help="rounds of ours and the floor streaming at once at the calm "
                    "step (default 3; --quick 0): the CPU target adds ours' median excess over the floor in "
                    "them to the floor's best sequential round")
    ap.add_argument("--calm-pair-s", type=float, default=20.0, help="measured window of a calm pair, seconds "
                    "(default 20)")
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=float, default=1.5, help="seconds after the last stream started")
    ap.add_argument("--hold", type=float, default=1.0, help="client pause before any stream (memory baseline)")
    ap.add_argument("--spread", type=float, help="first requests spread over this many seconds (default: one "
                    "request's length, TTFT + (tokens-1) x ITL)")
    ap.add_argument("--start", default="even", help="how streams start, comma-separated: even (default), "
                    "locust (-r batches, our spawn spread on), locust-off (-r batches as Locust sends them)")
    ap.add_argument("--spawn-rate", type=float, default=70.0, help="-r of the locust start modes (default 70)")
    ap.add_argument("--drain", type=float, default=10.0, help="longest wait for requests in flight at the end")
    ap.add_argument("--repeats", type=int, help="runs of each step per client, interleaved in rounds (default 3; "
                    "--quick 1): capacity is decided on the median TTFT error p99, the spread shown")
    ap.add_argument("--tail", action="store_true", help="run only the steps around the knee: the last step "
                    "under 5 ms and the first over it of each client in --tail-from (default: the --out file), "
                    "with the steps between; without one, " + TAIL_STEPS)
    ap.add_argument("--tail-from", help="results file whose knee --tail runs around (default: --out)")
    ap.add_argument("--late-bound-ms", type=float, default=1.0,
                    help="late first-token stamps at or above max(this, the run's p99) are lined up with "
                    "the lag trace's events (default 1 ms; lower it to name a sub-millisecond tail)")
    ap.add_argument("--lag-trace", choices=("off", "on", "greenlets"), default="on",
                    help="our client's loop-lag trace (LOCUST_LLM_LAG_TRACE): lag, gc passes and our periodic "
                    "work per window, late stamps lined up with them; greenlets also times every greenlet run "
                    "(a Python call per switch: costs CPU; default on)")
    ap.add_argument("--sim-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--priority", choices=("rt", "nice", "normal"), help="scheduling of the simulator and the "
                    "clients: rt = SCHED_FIFO 1, nice = -10, normal (default rt as root, else normal)")
    ap.add_argument("--retries", type=int, default=1, help="reruns of a run that other jobs disturbed (default 1)")
    ap.add_argument("--disturbed-pct", type=float, default=2.0, help="a run is disturbed when the client was "
                    "ready but waited for its core (run delay + steal) more than this %% of the window")
    ap.add_argument("--quiet-pct", type=float, default=10.0,
                    help="before a run, wait until other jobs keep each core under this %% busy")
    ap.add_argument("--quiet-wait", type=float, help="longest wait for quiet before a run, seconds "
                    "(default 20; 0 with --priority rt, where other jobs only get idle time)")
    ap.add_argument("--quick", action="store_true", help="2 steps, 4 s windows, no calm repeats (about 2 minutes)")
    ap.add_argument("--profile", default="ours", help="clients to profile with py-spy (default ours)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--profile-streams", type=int, help="streams of the profiled run (default: the largest step)")
    ap.add_argument("--profile-s", type=float, help="seconds profiled (default 8; --quick 4)")
    ap.add_argument("--ours-locustfile", default=str(BENCH / "ours_locustfile.py"),
                    help="the locustfile run as 'ours' (to A/B a patched client; default bench/ours_locustfile.py)")
    ap.add_argument("--floor-script", default=str(BENCH / "floor_client.py"),
                    help="the script run as 'floor' (same command line as bench/floor_client.py; for A/B tests)")
    ap.add_argument("--keep", help="keep each run's client records and trace under this directory")
    ap.add_argument("--out", default=str(BENCH / "results" / "client_overhead.json"))
    a = ap.parse_args(argv)
    if a.tail and not a.steps:
        a.steps = ",".join(str(n) for n in tail_steps(Path(a.tail_from or a.out)))
    a.steps = [int(x) for x in (a.steps or ("60,400" if a.quick else "60,160,280,400,480,560")).split(",")
               if x.strip()]
    a.duration = a.duration or (4.0 if a.quick else 8.0)
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.min_first_tokens = a.min_first_tokens if a.min_first_tokens is not None else (0 if a.quick else 1000)
    if a.min_first_tokens < 0:
        ap.error("--min-first-tokens must be 0 or more")
    # the calm step already runs --repeats times; extra rounds only when that is under 3
    a.calm_repeats = a.calm_repeats if a.calm_repeats is not None else (0 if a.quick else max(0, 3 - a.repeats))
    a.calm_pairs = a.calm_pairs if a.calm_pairs is not None else (0 if a.quick else 3)
    if a.calm_pairs < 0 or a.calm_pair_s <= 0:
        ap.error("--calm-pairs must be 0 or more and --calm-pair-s more than 0")
    a.profile_s = a.profile_s or (4.0 if a.quick else 8.0)
    a.clients = [c.strip() for c in a.clients.split(",") if c.strip()]
    a.start = [m.strip() for m in a.start.split(",") if m.strip()]
    for m in a.start:
        if m not in START_MODES:
            ap.error(f"unknown --start mode {m!r}: choose from {', '.join(START_MODES)}")
    if a.spawn_rate <= 0:
        ap.error("--spawn-rate must be more than 0")
    a.profile = [] if a.no_profile else [c.strip() for c in a.profile.split(",") if c.strip()]
    for c in a.clients + a.profile:
        if c not in CLIENTS:
            ap.error(f"unknown client {c!r}: choose from {', '.join(CLIENTS)}")
    a.profile_streams = a.profile_streams or max(a.steps)
    if a.spread is None:
        a.spread = round(request_s(a), 3)
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not shutil.which("taskset"):
        print("client_overhead: taskset (util-linux) is needed to pin the processes", file=sys.stderr)
        return 2
    ncpu = os.cpu_count() or 1
    if max(args.sim_cpu, args.client_cpu) >= ncpu or args.sim_cpu == args.client_cpu:
        print(f"client_overhead: needs two distinct CPUs ({args.sim_cpu}, {args.client_cpu}); this machine has "
              f"{ncpu}", file=sys.stderr)
        return 2
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {args.sim_cpu})  # the harness stays off the client's core

    def _terminate(*_: Any) -> None:
        raise KeyboardInterrupt  # so the finally blocks stop the client and the simulator

    signal.signal(signal.SIGTERM, _terminate)
    if args.priority is None:
        args.priority = "rt" if os.geteuid() == 0 else "normal"
    elif args.priority != "normal" and os.geteuid() != 0:
        print(f"client_overhead: --priority {args.priority} needs root; running at normal priority", file=sys.stderr)
        args.priority = "normal"
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if args.priority == "rt" else 20.0
    started = time.time()
    load_before = os.getloadavg()
    sim = Simulator(args, max([*args.steps, args.profile_streams]))
    print(f"simulator {sim.url} on CPU {args.sim_cpu}, clients on CPU {args.client_cpu}: ITL {args.itl_ms:g} ms, "
          f"TTFT {args.ttft_ms:g} ms, {args.output_tokens} tokens per request, one token per chunk, "
          f"{args.duration:g} s windows, priority {args.priority}, simulator loop {sim_loop()}", flush=True)
    longer = [f"N={n} {w:.1f} s" for n in args.steps if (w := window_s(n, args)) > args.duration]
    if longer:
        print(f"windows lengthened to hold {args.min_first_tokens} first tokens: {', '.join(longer)}", flush=True)
    calm_n = min(args.steps, key=lambda n: abs(offered_rate(n, args) - args.calm_rate))
    # rounds: every step of every client once per round, so drift in the machine's speed
    # falls on all of them alike; then the calm step's extra rounds
    plan = [(n, rep) for rep in range(args.repeats) for n in args.steps]
    plan += [(calm_n, args.repeats + i) for i in range(args.calm_repeats)]
    results: list[dict[str, Any]] = []
    profiles: dict[str, str] = {}
    pairs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="client_overhead-") as td:
            tmp = Path(td)
            runs = [(start, kind) for start in args.start for kind in args.clients
                    if start == "even" or kind != "floor"]
            for n, rep in plan:
                for start, kind in runs:
                    if rep and start != "even":
                        continue  # the calm repeats compare CPU; start modes are compared at each step once
                    r = run_measured(kind, n, sim, args, tmp, f"{kind}-{start}-{n}-r{rep}", start)
                    r["repeat"] = rep  # the round (0..--repeats-1; the calm step's extra rounds after)
                    results.append(r)
                    print(f"  {label(r):18s} N={n:4d}: {r['chunks_per_s']:6.0f} chunks/s (offered "
                          f"{r['offered_chunks_per_s']:.0f}, sim wrote {r['sim_chunks_per_s']:.0f} at "
                          f"{r['sim_cpu_pct']:.0f}% CPU), client CPU {r['client_cpu_pct']:.0f}% = "
                          f"{_f(r['cpu_ms_per_1k_chunks'], '{:.1f}')} ms/1k chunks, TTFT error p50/p99/p99.9 "
                          f"{_f(r['ttft_err_p50_ms'], '{:.3f}')}/{_f(r['ttft_err_p99_ms'], '{:.3f}')}/"
                          f"{_f(r.get('ttft_err_p999_ms'), '{:.3f}')} ms, loop lag max "
                          f"{_f(r.get('loop_lag_max_ms'), '{:.1f}')} ms; "
                          f"waited for its core {r['client_wait_pct']:.1f}% (others used "
                          f"{r['client_core_foreign_pct']:.0f}% of it)",
                          flush=True)
            if "ours" in args.clients and "floor" in args.clients:
                for rnd in range(args.calm_pairs):
                    pr = calm_pair(calm_n, sim, args, tmp, rnd)
                    pairs.append(pr)
                    print(f"  pair {rnd} N={calm_n:4d} ({' first, '.join(pr['order'])} second): ours "
                          f"{_f(pr['ours']['cpu_ms_per_1k_chunks'], '{:.1f}')}, floor "
                          f"{_f(pr['floor']['cpu_ms_per_1k_chunks'], '{:.1f}')} ms/1k chunks in the same "
                          f"{pr['window_s']:.0f} s: ours' excess {_f(pr['excess_ms_per_1k'], '{:.2f}')} ms/1k chunks, "
                          f"ratio {_f(pr['ratio'], '{:.3f}')}", flush=True)
            for kind in args.profile:
                prof_path = Path(args.out).parent / f"profile_{kind}.txt"
                prof_path.parent.mkdir(parents=True, exist_ok=True)
                profiles[kind] = profile_client(kind, sim, args, tmp, prof_path)
    finally:
        sim.stop()
    summary = summarise(results, args, pairs)
    print()
    print(table(results))
    print(summary_text(summary))
    for kind, text in profiles.items():
        print(f"\n{kind} client profile (top of the own-time list; all of it in profile_{kind}.txt):")
        print("\n".join(text.splitlines()[:20]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "locust-llm/bench/client_overhead/1",
        "command": " ".join(["bench/client_overhead.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"cpus": ncpu, "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_before": load_before, "sim_loop": sim_loop()},
        "settings": vars(args),
        "elapsed_s": time.time() - started,
        "results": results,
        "calm_pairs": pairs,
        "summary": summary,
        "profiles": profiles,
    }
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\nwritten {out} ({doc['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
