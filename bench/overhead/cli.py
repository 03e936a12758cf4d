"""client_overhead's command line (``parse_args``: every flag and its default) and the run from
end to end (``main``): the simulator, the rounds of runs, the calm pairs, the profiles, the
summary printed and the results file written. ``--tail``'s steps come from an earlier results
file (``tail_steps``). The description comes from bench/client_overhead.py's docstring."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.overhead.config import (
    BENCH,
    BOUNDS_MS,
    CLIENTS,
    DEFAULT_CLIENTS,
    START_MODES,
    calm_step,
    request_s,
    window_s,
)
from bench.overhead.report import pair_line, run_line, summary_text, table
from bench.overhead.rules import summarise
from bench.overhead.runs import calm_pair, profile_client, run_measured
from bench.overhead.simulator import Simulator, sim_loop

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


def parse_args(argv: list[str] | None, description: str | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", help="stream counts, comma-separated (default 60,160,280,400,480,560; "
                    "--quick 60,400)")
    ap.add_argument("--clients", default=",".join(DEFAULT_CLIENTS), help="subset of ours,fasthttp,floor,uvfloor "
                    "(uvfloor: the uvloop floor, bench/floor_uvloop.py; default ours,fasthttp,floor)")
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
    ap.add_argument("--ceiling", action="store_true", help="step the streams up until each client breaks its 1 ms "
                    "and 5 ms TTFT-error bounds (p99), per --ceiling-itl (and --long-output); writes ceiling[]")
    ap.add_argument("--ceiling-itl", default="20,5", help="ITLs (ms) of the ceiling series (default 20,5)")
    ap.add_argument("--ceiling-start", type=int, default=40, help="first step of a ceiling series (default 40)")
    ap.add_argument("--ceiling-factor", type=float, default=1.25, help="next step = this x the last, rounded up "
                    "to 10 (default 1.25)")
    ap.add_argument("--ceiling-max", type=int, default=4000, help="largest step of a ceiling series (default 4000)")
    ap.add_argument("--ceiling-confirm", action=argparse.BooleanOptionalAction, default=True,
                    help="run a step that breaks a bound not yet broken once more; it breaks the bound only if both "
                    "runs do (default on, every client alike)")
    ap.add_argument("--long-output", type=int, default=0, help="with --ceiling: a series of this many tokens per "
                    "request (e.g. 4096) at the first --ceiling-itl, judged on every chunk's stamp delay p99")
    ap.add_argument("--out", default=str(BENCH / "results" / "client_overhead.json"))
    a = ap.parse_args(argv)
    a.ceiling_itl = [float(x) for x in a.ceiling_itl.split(",") if x.strip()]
    if a.ceiling and (not a.ceiling_itl or min(a.ceiling_itl) <= 0 or a.ceiling_start < 1
                      or a.ceiling_factor <= 1.0 or a.long_output < 0):
        ap.error("--ceiling needs --ceiling-itl > 0, --ceiling-start >= 1, --ceiling-factor > 1, --long-output >= 0")
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


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    args = parse_args(argv, description)
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
    if args.ceiling:
        return _ceiling_main(args, argv, ncpu, started, load_before)
    sim = Simulator(args, max([*args.steps, args.profile_streams]))
    print(f"simulator {sim.url} on CPU {args.sim_cpu}, clients on CPU {args.client_cpu}: ITL {args.itl_ms:g} ms, "
          f"TTFT {args.ttft_ms:g} ms, {args.output_tokens} tokens per request, one token per chunk, "
          f"{args.duration:g} s windows, priority {args.priority}, simulator loop {sim_loop()}", flush=True)
    longer = [f"N={n} {w:.1f} s" for n in args.steps if (w := window_s(n, args)) > args.duration]
    if longer:
        print(f"windows lengthened to hold {args.min_first_tokens} first tokens: {', '.join(longer)}", flush=True)
    calm_n = calm_step(args)
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
                    if start == "even" or kind not in ("floor", "uvfloor")]
            for n, rep in plan:
                for start, kind in runs:
                    if rep and start != "even":
                        continue  # the calm repeats compare CPU; start modes are compared at each step once
                    r = run_measured(kind, n, sim, args, tmp, f"{kind}-{start}-{n}-r{rep}", start)
                    r["repeat"] = rep  # the round (0..--repeats-1; the calm step's extra rounds after)
                    results.append(r)
                    print(run_line(r), flush=True)
            if "ours" in args.clients and "floor" in args.clients:
                for rnd in range(args.calm_pairs):
                    pr = calm_pair(calm_n, sim, args, tmp, rnd)
                    pairs.append(pr)
                    print(pair_line(pr), flush=True)
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


def _ceiling_main(args: argparse.Namespace, argv: list[str] | None, ncpu: int, started: float,
                  load_before: tuple[float, float, float]) -> int:
    """--ceiling: the series (bench/overhead/ceiling.py), their table, the results file."""
    from bench.overhead.ceiling import ceiling_entries, ceiling_table, run_ceiling

    with tempfile.TemporaryDirectory(prefix="client_overhead-") as td:
        results = run_ceiling(args, Path(td))
    entries = ceiling_entries(results)
    print()
    print(table(results))
    print(ceiling_table(entries))
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
        "ceiling": entries,
    }
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\nwritten {out} ({doc['elapsed_s']:.0f} s)")
    return 0
