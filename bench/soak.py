"""Soak with a study: hours of closed-loop and open-loop stages through ``--processes``; are
memory and open fds flat, does every request served come back as one record, is no process
left? (issue 10 items 5, 7; issue 33 item 7)

One Locust run cannot mix the two kinds (a stage plan is users, or requests/s when
``--llm-arrival`` is given), so the soak starts one simulator (``llm-sim``) and two headless
Locust runs against it, side by side for the whole soak, each ``--processes 2`` (a master and
two workers) with an ``--llm-stages`` plan: ``closed`` (users) and ``open`` (requests/s,
``--llm-arrival``). Their phases take turns (``--phase`` each): in a closed phase the closed run
steps from the low to the high user count while the open run's stage is 0 req/s, then the other
way round; the last phase runs both at their low load (a plan whose last stage has no load would
wait for a request that never comes). The load is light on purpose (the machine is shared).

Every ``--interval`` seconds it samples VmRSS and open fds of every process of the three trees
(the simulator, each master and its workers, any child of theirs) from /proc. At the end:

- **flat**: per process, the Theil-Sen slope of RSS after ``--warmup`` at most
  ``--rss-bound`` percent per hour, and fds constant at equal load: per phase kind, no later
  phase's fewest fds above the first one's by more than ``--fd-slack``
  (``bench/lib/soak_verdict.py``; docs/benchmarks.md has the method);
- **records == served**: both runs' requests.jsonl against ``GET /_sim/stats``: ``ok`` records
  == served, records == started (the ones cut by a stop are ``interrupted`` records, counted
  aborted by the simulator), no request_id twice;
- **no process left**: every pid seen (by pid and start time) gone within 10 s of the end;
- both runs exit 0.

    .venv/bin/python bench/soak.py                                   # the soak: 2 h, 10 min phases
    .venv/bin/python bench/soak.py --duration 5m --phase 30s --warmup 60s --interval 5   # validation
    .venv/bin/python bench/soak.py --duration 5m --phase 30s --warmup 60s --client sdk
    .venv/bin/python bench/soak.py --rejudge bench/results/soak --warmup 15m   # judge again

Writes ``soak.json`` (plan, verdicts, accounting), ``soak.csv`` (every sample, on disk as taken), ``soak.svg``
(matplotlib, the ``report`` extra) and each run's ``--llm-report`` directory (``closed/``,
``open/``) into ``--out`` (default bench/results/soak). Exit 0 when every verdict passes.
Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.llm_imports import parse_duration_s  # noqa: E402
from bench.lib.procfs import memory_kb, open_fds, stat_fields, tree_by_children  # noqa: E402
from bench.lib.soak_verdict import (  # noqa: E402
    FD_SLACK,
    RSS_BOUND_PCT_PER_H,
    Phase,
    accounting,
    flatness,
    leftovers,
    phases,
    stage_plan,
    theil_sen,
)

BIN = Path(sys.executable).parent
RUNS = ("closed", "open")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_time(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None else None  # proc(5) field 22: starttime


def low_high(text: str, option: str) -> tuple[float, float]:
    lo, _, hi = text.partition(":")
    try:
        a, b = float(lo), float(hi or lo)
    except ValueError:
        sys.exit(f"soak: {option} takes LOW:HIGH (e.g. 8:16), got {text!r}")
    if not 0 < a <= b:
        sys.exit(f"soak: {option} needs 0 < LOW <= HIGH, got {text!r}")
    return a, b


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="2h", help="about how long (default 2h)")
    ap.add_argument("--phase", default="10m", help="one closed or open phase (default 10m)")
    ap.add_argument("--users", default="8:16", help="closed-loop users, LOW:HIGH (default 8:16)")
    ap.add_argument("--rate", default="2:4", help="open-loop requests/s, LOW:HIGH (default 2:4)")
    ap.add_argument("--arrival", default="poisson", help="open-loop --llm-arrival (default poisson)")
    ap.add_argument("--max-inflight", type=int, default=24,
                    help="open-loop --llm-max-inflight, split over the workers: bounds the connection pool (default 24)")
    ap.add_argument("--client", default="raw", choices=("raw", "sdk"), help="--llm-client (default raw)")
    ap.add_argument("--processes", type=int, default=2, help="workers per run (default 2)")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--warmup", default="15m",
                    help="left out of the flatness verdict (default 15m: the simulator's 2,000-record trace ring "
                         "fills in about 12 min at this load)")
    ap.add_argument("--rss-bound", type=float, default=RSS_BOUND_PCT_PER_H,
                    help=f"RSS slope bound after warm-up, %% per hour (default {RSS_BOUND_PCT_PER_H:g})")
    ap.add_argument("--fd-slack", type=int, default=FD_SLACK,
                    help=f"a later phase's fewest fds may exceed the first phase's by this much (default {FD_SLACK})")
    ap.add_argument("--sim-args", default="--ttft-ms 100 --itl-ms 40 --output-tokens 100",
                    help="llm-sim's timing (default: 100 ms TTFT, 40 ms ITL, 100 tokens: about 4.1 s a request, "
                         "25 chunks/s a stream)")
    ap.add_argument("--locustfile", type=Path, default=ROOT / "locustfiles" / "vllm.py",
                    help="what both runs load (default locustfiles/vllm.py; bench/soak_probe_locustfile.py adds "
                         "the masters' memory by allocator, read by bench/soak_probe.py)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak")
    ap.add_argument("--rejudge", type=Path, metavar="DIR",
                    help="judge an earlier soak's samples again (DIR/soak.csv) with this --warmup, --rss-bound, --fd-slack")
    args = ap.parse_args()
    try:
        args.duration_s = parse_duration_s(args.duration, "--duration")
        args.phase_s = parse_duration_s(args.phase, "--phase")
        args.warmup_s = parse_duration_s(args.warmup, "--warmup")
    except Exception as e:  # ConfigError: one line
        sys.exit(f"soak: {e}")
    args.users_lh, args.rate_lh = low_high(args.users, "--users"), low_high(args.rate, "--rate")
    return args


def start_sim(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    sim = subprocess.Popen([str(BIN / "llm-sim"), "--host", "127.0.0.1", "--port", "0", "--exit-with-parent",
                            *args.sim_args.split()], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert sim.stdout is not None
    url = next(w for w in sim.stdout.readline().split() if w.startswith("http://"))
    return sim, url


def start_run(args: argparse.Namespace, run: str, plan: str, url: str) -> subprocess.Popen[bytes]:
    port = str(free_port())
    users = int(args.users_lh[1]) if run == "closed" else args.processes
    cmd = [str(BIN / "locust"), "-f", str(args.locustfile), "--headless", "--only-summary",
           "--processes", str(args.processes), "--master-bind-port", port, "--master-port", port,
           "-u", str(users), "-r", str(users), "--llm-stages", plan, "--host", url,
           "--llm-report", str(args.out / run), "--llm-client", args.client, "--stop-timeout", "30",
           "--llm-preflight", "off",  # its requests reach the simulator but are no records
           "--llm-prometheus-port", "0", "--loglevel", "WARNING"]
    if run == "open":
        cmd += ["--llm-arrival", args.arrival, "--llm-seed", "1", "--llm-max-inflight", str(args.max_inflight)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    log = (args.out / f"{run}.log").open("wb")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def label_tree(root: int, name: str) -> dict[str, int]:
    """``name`` for the root, ``name.worker0..`` for its children by pid, ``name.child<pid>`` deeper."""
    pids = tree_by_children(root)
    kids = sorted(p for p in pids[1:] if (stat_fields(p) or [b"", b"0"])[1] == str(root).encode())
    out = {name: root} | {f"{name}.worker{i}": p for i, p in enumerate(kids)}
    out |= {f"{name}.child{p}": p for p in pids[1:] if p not in kids}
    return out


def get_json(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(rows: list[dict[str, Any]], plan: list[Phase], warmup_s: float, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped (matplotlib is the 'report' extra)"
    fig, (a, c, b) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    end_s = plan[-1].start_s + plan[-1].duration_s
    for name in sorted({str(r["process"]) for r in rows}):
        # from the second sample (the first may catch a process just started) to the plan's end
        # (then the reports: the masters' peak would squash the scale)
        pts = [r for r in rows if r["process"] == name and r["rss_mb"] is not None and 0 < r["t_s"] <= end_s]
        a.plot([r["t_s"] / 60 for r in pts], [r["rss_mb"] for r in pts], label=name)
        base = next((r["rss_mb"] for r in pts if r["t_s"] >= warmup_s), None)
        if base:
            after = [r for r in pts if r["t_s"] >= warmup_s]
            c.plot([r["t_s"] / 60 for r in after], [100 * (r["rss_mb"] / base - 1) for r in after], label=name)
        b.plot([r["t_s"] / 60 for r in pts], [r["fds"] for r in pts], label=name)
    colours = {"closed": "#dde8f5", "open": "#f5e8dd", "mixed": "#e6e6e6"}
    for ax in (a, c, b):
        for p in plan:
            ax.axvspan(p.start_s / 60, (p.start_s + p.duration_s) / 60, color=colours[p.kind], zorder=0)
        ax.axvline(warmup_s / 60, color="k", linestyle=":", linewidth=1)
    c.set_ylabel("RSS change since warm-up (%)")
    a.set_ylabel("RSS (MB)")
    b.set_ylabel("open fds")
    b.set_xlabel("minutes (shaded: closed-loop blue, open-loop orange, both grey; dotted: end of warm-up)")
    a.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    return f"plot: {path}"


def judge(rows: list[dict[str, Any]], plan: list[Phase], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every process's flatness verdict; samples after the plan's end (the tails, the reports) not judged."""
    plan_end = plan[-1].start_s + plan[-1].duration_s
    verdicts = {}
    for name in sorted({str(r["process"]) for r in rows}):
        mine = [r for r in rows if r["process"] == name]
        series = [(float(r["t_s"]), r["rss_mb"], r["fds"]) for r in mine]
        verdicts[name] = v = flatness(series, args.warmup_s, args.rss_bound, args.fd_slack, plan, plan_end)
        for part in ("anon", "file"):  # where the RSS slope is: the process's own pages or mapped files
            pts = [(float(r["t_s"]) / 3600, r[f"{part}_mb"]) for r in mine
                   if r.get(f"{part}_mb") is not None and args.warmup_s <= float(r["t_s"]) <= plan_end]
            if len(pts) >= 3:
                v[f"{part}_slope_mb_per_h"] = round(theil_sen(pts), 3)
    return verdicts


def print_processes(verdicts: dict[str, dict[str, Any]]) -> None:
    for name, v in verdicts.items():
        if not v["judged"]:
            print(f"  {name:22s} not judged ({v['samples']} samples after warm-up)")
            continue
        parts = (f" (anon {v['anon_slope_mb_per_h']:+.2f}, file {v.get('file_slope_mb_per_h', 0.0):+.2f} MB/h)"
                 if "anon_slope_mb_per_h" in v else "")
        print(f"  {name:22s} RSS {v['rss_first_mb']:7.1f} -> {v['rss_last_mb']:7.1f} MB "
              f"(min {v['rss_min_mb']:.1f}, max {v['rss_max_mb']:.1f}), slope {v['rss_slope_pct_per_h']:+.2f} %/h{parts} "
              f"[{'flat' if v['rss_flat'] else 'NOT flat'}], peak {v['rss_peak_mb']:.1f}; fds {v['fds_min']}..{v['fds_max']}"
              f", per phase {v.get('fds_by_phase_kind')} "
              f"[{'constant' if v['fds_constant'] else 'not judged' if not v.get('fds_judged') else 'NOT constant'}]")


def rejudge(args: argparse.Namespace) -> int:
    """``--rejudge DIR``: the flatness verdicts of an earlier soak again, from its soak.csv, with
    this command line's ``--warmup``, ``--rss-bound`` and ``--fd-slack`` (a 2-hour run judged
    again without running it again); written to DIR/soak.rejudged.json and .svg."""
    earlier = json.loads((args.rejudge / "soak.json").read_text())
    plan = [Phase(**p) for p in earlier["plan"]["phases"]]
    with (args.rejudge / "soak.csv").open() as f:
        rows = [{"t_s": float(r["t_s"]), "process": r["process"],
                 "rss_mb": float(r["rss_mb"]) if r["rss_mb"] else None,
                 **{k: float(r[k]) if r.get(k) else None for k in ("anon_mb", "file_mb")},
                 "fds": int(r["fds"]) if r["fds"] else None} for r in csv.DictReader(f)]
    verdicts = judge(rows, plan, args)
    print_processes(verdicts)
    flat = bool(verdicts) and all(v["flat"] for v in verdicts.values() if v["judged"])
    out = {"warmup_s": args.warmup_s, "rss_bound_pct_per_h": args.rss_bound, "fd_slack": args.fd_slack,
           "processes": verdicts, "flat": flat}
    (args.rejudge / "soak.rejudged.json").write_text(json.dumps(out, indent=2) + "\n")
    print(plot(rows, plan, args.warmup_s, args.rejudge / "soak.rejudged.svg"))
    print("flat" if flat else "NOT flat")
    return 0 if flat else 1


def main() -> int:
    args = parse_args()
    if args.rejudge:
        return rejudge(args)
    args.out.mkdir(parents=True, exist_ok=True)
    plan = phases(args.duration_s, args.phase_s)
    plans = {"closed": stage_plan(plan, "closed", *args.users_lh), "open": stage_plan(plan, "open", *args.rate_lh)}
    sim, url = start_sim(args)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped soak stops its runs too (below)
    t0 = time.monotonic()
    runs = {run: start_run(args, run, plans[run], url) for run in RUNS}
    rows: list[dict[str, Any]] = []
    seen: dict[int, int] = {}  # pid -> start time: the leftover check
    # every sample is on disk as it is taken: a soak cut short (a machine taken back) leaves its
    # soak.csv and plan (soak.json without verdicts) for --rejudge
    (args.out / "soak.json").write_text(json.dumps({"plan": {"phases": [asdict(p) for p in plan]}}, indent=2) + "\n")
    csv_file = (args.out / "soak.csv").open("w", newline="")
    w = csv.DictWriter(csv_file, fieldnames=["t_s", "process", "pid", "rss_mb", "anon_mb", "file_mb", "fds"])
    w.writeheader()
    try:
        while any(p.poll() is None for p in runs.values()):
            t = round(time.monotonic() - t0, 1)
            procs = label_tree(sim.pid, "sim")
            for run, p in runs.items():
                if p.poll() is None:
                    procs |= label_tree(p.pid, run + ".master")
            for name, pid in procs.items():
                st = start_time(pid)
                if st is not None:
                    seen.setdefault(pid, st)
                mem = {k: round(v / 1024, 2) for k, v in memory_kb(pid).items()}
                rows.append({"t_s": t, "process": name, "pid": pid, "rss_mb": mem.get("VmRSS"),
                             "anon_mb": mem.get("RssAnon"), "file_mb": mem.get("RssFile"), "fds": open_fds(pid)})
                w.writerow(rows[-1])
            csv_file.flush()
            time.sleep(max(0.0, args.interval - (time.monotonic() - t0 - t)))
    except KeyboardInterrupt:
        for p in runs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
        for p in runs.values():
            p.wait(120)
    csv_file.close()
    elapsed = time.monotonic() - t0
    stats = get_json(url + "/_sim/stats")
    sim.terminate()
    sim.wait(30)
    deadline = time.monotonic() + 10
    while True:
        left = leftovers(seen, {pid: start_time(pid) for pid in seen})
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    records = [r for run in RUNS for r in read_records(args.out / run / "requests.jsonl")]
    acct = accounting(records, stats)
    acct["by_run"] = {run: len(read_records(args.out / run / "requests.jsonl")) for run in RUNS}
    verdicts = judge(rows, plan, args)
    exits = {run: p.returncode for run, p in runs.items()}
    # a process that lives only part of the soak (none should) is not judged: flat needs its samples
    judged = {n: v for n, v in verdicts.items() if v["judged"]}
    result = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "plan": {"phases": [asdict(p) for p in plan], "llm_stages": plans},
        "elapsed_s": round(elapsed, 1), "exit_codes": exits, "processes": verdicts, "accounting": acct,
        "leftover_pids": left,
        "pass": {
            "flat": bool(judged) and all(v["flat"] for v in judged.values()),
            "records_equal_served": acct["exact"],
            "no_process_left": not left,
            "exit_0": all(rc == 0 for rc in exits.values()),
        },
    }
    result["pass"]["all"] = all(result["pass"].values())
    (args.out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"soak: {elapsed:.0f} s, {len(plan)} phases of {args.phase_s:g} s, closed {args.users} users, "
          f"open {args.rate} req/s ({args.arrival}), client {args.client}, samples every {args.interval:g} s")
    print(f"  stages closed: {plans['closed']}\n  stages open:   {plans['open']}")
    print_processes(verdicts)
    print(f"  records {acct['records']} {acct['records_by_status']} (closed {acct['by_run']['closed']}, open "
          f"{acct['by_run']['open']}); simulator started {acct['sim_started']}, served {acct['sim_served']}, "
          f"aborted {acct['sim_aborted']}, errors {acct['sim_errors']}; duplicates {acct['duplicates']}: "
          f"{'exact' if acct['exact'] else 'NOT exact'}")
    print(f"  exit codes {exits}; processes left: {left or 'none'}")
    print(plot(rows, plan, args.warmup_s, args.out / "soak.svg"))
    print(f"  -> {args.out / 'soak.json'}")
    print("PASS" if result["pass"]["all"] else f"FAIL: {[k for k, v in result['pass'].items() if not v]}")
    return 0 if result["pass"]["all"] else 1


if __name__ == "__main__":
    sys.exit(main())
