"""The self-check's two verdicts at their true causes (issue 53): a busy machine, a busy client.

Two real single-process ``locust`` runs of our client (locustfiles/vllm.py) against the
simulator, each read back from its summary.json:

- **busy machine**: 4 users against the simulator's defaults (TTFT 50 ms, ITL 10 ms), beside
  two busy loops (``python -c "while 1: pass"``). The client needs a few % of a core; the loops
  take its cores, so its loop thread waits for a core longer than it runs (schedstat's run delay
  against its CPU time). The verdict should be ``caution`` naming the cause, "the machine is
  busy", never "saturated".
- **busy client**: 300 users at a 1 ms chunk gap (TTFT 20 ms, 200 tokens: about 300,000 chunks/s
  asked), nothing beside it but the simulator (niced ahead of the client when we may). The
  client's own work holds its loop: it runs more than it waits, and the verdict should be
  ``saturated``.

The client and the loops are pinned to the same ``--cpus`` (default: the first two this process
may use, so a bigger machine shows what a 2-core one does); the simulator is left free.
Prints one row per case (verdict, the client's CPU, its loop thread's run and wait, the probes
that waited for the core, the loop lag p99) and each verdict's sentence; writes
bench/results/selfcheck_causes.json. Not a test: nothing asserts::

    .venv/bin/python bench/selfcheck_causes.py              # about 1 minute
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
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

CASES: dict[str, dict[str, Any]] = {
    "busy machine": {"sim": [], "users": 4, "loops": 2, "seconds": 20},
    "busy client": {"sim": ["--ttft-ms", "20", "--itl-ms", "1", "--output-tokens", "200"], "users": 300, "loops": 0,
                    "seconds": 12},
}


def busy_loops(n: int, cpus: set[int]) -> list[subprocess.Popen[bytes]]:
    """``n`` processes spinning ``while 1: pass`` on ``cpus``."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"], preexec_fn=lambda: os.sched_setaffinity(0, cpus))
            for _ in range(n)]


def nice_ahead(pid: int) -> None:
    """The simulator ahead of the client for a core (root only): the client must be the
    bottleneck the busy-client case names, not a simulator that fell behind first."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, int(task.name), -10)


def run_case(name: str, case: dict[str, Any], cpus: set[int], report: Path) -> dict[str, Any]:
    sim = start_simulator(["--seed", "1", *case["sim"]])
    loops: list[subprocess.Popen[bytes]] = []
    try:
        if not case["loops"]:
            nice_ahead(sim.process.pid)
        loops = busy_loops(case["loops"], cpus)
        cmd = [str(VENV_BIN / "locust"), "-f", str(ROOT / "locustfiles" / "vllm.py"), "--headless", "--only-summary",
               "--loglevel", "WARNING", "--host", sim.url, "-u", str(case["users"]), "-r", str(case["users"]),
               "-t", f"{case['seconds']}s", "--stop-timeout", "30", "--llm-report", str(report)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=case["seconds"] + 120,
                              env={**os.environ, "LOCUST_LLM_HTML": "off"},
                              preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    finally:
        for p in loops:
            p.send_signal(signal.SIGKILL)
            p.wait()
        sim.stop()
    check = json.loads((report / "summary.json").read_text())["self_check"]
    node = check["nodes"][0]
    line = next((x for x in proc.stdout.splitlines() if x.startswith("self-check: ")), "")
    loop = node.get("loop_thread") or {}
    return {"case": name, "users": case["users"], "busy_loops": case["loops"], "level": check["level"],
            "console": line, "cpu_share_p50": node["cpu_share_p50"], "loop_ran_ms": loop.get("ran_ms"),
            "loop_waited_ms": loop.get("waited_for_core_ms"), "probes": node["loop_lag_ms"]["count"],
            "probes_waited": (node.get("contention") or {}).get("count", 0),
            "lag_p99_ms": node["loop_lag_ms"]["p99"], "machine_busy": node.get("machine_busy"),
            "reasons": node["reasons"], "message": check["message"]}


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpus", default="", help="CPUs for the client and the busy loops, e.g. 0,1 "
                    "(default: the first two this process may use)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "selfcheck_causes.json"))
    args = ap.parse_args()
    cpus = {int(c) for c in args.cpus.split(",")} if args.cpus else set(sorted(os.sched_getaffinity(0))[:2])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            rows.append(run_case(name, case, cpus, Path(tmp) / name.replace(" ", "_")))
    print(f"client and busy loops on CPUs {sorted(cpus)}")
    print(f"{'case':<14} {'users':>5} {'loops':>5} {'verdict':<10} {'CPU p50':>7} {'loop ran':>9} {'waited':>9} "
          f"{'probes waited':>14} {'lag p99':>8}")
    for r in rows:
        print(f"{r['case']:<14} {r['users']:>5} {r['busy_loops']:>5} {r['level']:<10} "
              f"{_f(r['cpu_share_p50'] and 100 * r['cpu_share_p50'], '6.0f')}% {_f(r['loop_ran_ms'], '6.0f')} ms "
              f"{_f(r['loop_waited_ms'], '6.0f')} ms {r['probes_waited']:>6} of {r['probes']:<5} "
              f"{_f(r['lag_p99_ms'], '5.2f')} ms")
    for r in rows:
        print(f"{r['case']}: {r['console']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": sorted(cpus), "runs": rows},
                              indent=1))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
