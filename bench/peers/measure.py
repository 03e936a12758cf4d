"""Run one peer tool against the paced server and measure it from outside.

Starts the tool's command (already pinned with taskset by run.sh), samples every 0.5 s the CPU
of its whole process tree (utime+stime+cutime+cstime of every live descendant, from /proc) and
the server's chunk counter (``GET /_sim/stats`` ``chunks``), and writes them with the run's
settings to ``--out`` (JSON). ``table.py`` reads these files and the tools' own output files.

    python bench/peers/measure.py --sim URL --out run.json --streams 50 --offered 2500 -- CMD...
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(d))
    return out


def tree_cpu_s(root: int) -> float:
    """CPU seconds of root and every live descendant, with what their reaped children used."""
    kids = children_map()
    todo, total = [root], 0
    while todo:
        pid = todo.pop()
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        todo.extend(kids.get(pid, ()))
    return total / CLK_TCK


def sim_chunks(url: str) -> int:
    with urllib.request.urlopen(url + "/_sim/stats", timeout=10) as r:
        return int(json.loads(r.read())["chunks"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--offered", type=float, required=True, help="chunks/s an on-time server gives the streams")
    ap.add_argument("--duration", type=float, help="the tool's nominal run length, s (the steady window ends there)")
    ap.add_argument("--request-s", type=float, default=4.03, help="one request's length, s (the ramp)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    t_start = time.monotonic()
    with open(Path(a.out).with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    samples = []
    while proc.poll() is None and time.monotonic() - t_start < a.timeout:
        samples.append([round(time.monotonic() - t_start, 3), tree_cpu_s(proc.pid), sim_chunks(a.sim)])
        time.sleep(0.5)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc = {"tool": a.tool, "streams": a.streams, "offered_chunks_per_s": a.offered, "cmd": cmd,
           "duration_s": a.duration, "request_s": a.request_s,
           "exit_code": proc.returncode, "elapsed_s": time.monotonic() - t_start,
           "total_cpu_s": ru.ru_utime + ru.ru_stime, "samples": samples}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
