"""Why one client's cost per chunk differs by 2x between two servers (issue 34 item 0): the
same client, the same streams, three shapes of server writes, and how many chunks each of the
client's wake-ups finds.

Shapes (each one ``send()`` and one TCP segment per chunk, TCP_NODELAY):

- ``sim``: llm-sim, the project's bench server: every stream's due chunks written from one
  event-loop timer at whole milliseconds (llm_users/sim/clock.py);
- ``spread``: bench/paced_server.py, each chunk at its own exact time (streams on their own
  phases, spread through the millisecond: the "paced server" of the first measurement);
- ``lockstep``: bench/paced_server.py, every stream's chunk at the same step of an ITL grid, as
  a continuous-batching server writes one decode step.

Clients: ``ours`` (the shipped ``locustfiles/vllm.py`` as users run it: ``-u N -r R``, Locust's
start, every default) and ``ours-even`` (bench/ours_locustfile.py, first requests spread evenly
over one request's length, as bench/client_overhead.py starts it), ``floor`` (the gevent floor,
bench/floor_client.py). The server on ``--server-cpu``, the client's whole tree on
``--client-cpu`` (``taskset``; ``--priority rt`` as in client_overhead.py).

Per run, over the window (after every stream started and ``--warmup`` seconds):

- ``chunks_per_s`` (the server's counter) against the offered N x tokens / request length;
- ``cpu_us_per_chunk``: the client tree's utime+stime over the window / chunks;
- ``wakeups_per_chunk``: the client's voluntary context switches (each one a sleep in
  epoll_wait that ended in a wake-up) / chunks: 1.0 means every chunk cost a wake-up of its
  own, 0.1 that each found ten;
- ``reference_ms``, ``reference_after_ms``: a fixed Python loop's time on the client's core
  just before and just after the run (the VM's speed of the moment: compare runs by it);
- ``ttft_p50_ms``/``p99`` and ``itl_p99_ms`` as the client recorded them (against the server's
  nominal TTFT and ITL; the server's own lateness, ``server_late_us_p50/p99``, beside them).

    .venv/bin/python bench/server_shape.py                      # 280 streams, the three shapes, three clients
    .venv/bin/python bench/server_shape.py --streams 100,280 --shapes sim,spread --clients ours
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib import reference  # noqa: E402
from bench.lib.priority import priority_prefix  # noqa: E402
from bench.lib.procfs import tree, tree_cpu_s  # noqa: E402
from bench.overhead.analysis import load_client_records, pct  # noqa: E402

BIN = ROOT / ".venv" / "bin"


def voluntary_switches(pids: list[int]) -> int:
    """Voluntary context switches of every thread of these processes."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            total += int(line.split()[1])
            except OSError:
                pass
    return total


def reference_ms(args: argparse.Namespace) -> float:
    """A fixed pure-Python loop's milliseconds on the client's core, as the client runs there:
    this VM's speed moves by up to half between hours, and the per-chunk figures move with it."""
    pin = [*priority_prefix(args.priority), "taskset", "-c", str(args.client_cpu)]
    out = subprocess.run([*pin, sys.executable, "-c", reference.SOURCE], capture_output=True, text=True, check=True)
    return round(float(out.stdout), 1)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return orjson.loads(r.read())


class Server:
    """llm-sim (``sim``) or bench/paced_server.py, pinned, with a chunk counter to read."""

    def __init__(self, shape: str, args: argparse.Namespace) -> None:
        pin = [*priority_prefix(args.priority), "taskset", "-c", str(args.server_cpu)]
        if shape == "sim":
            cmd = [*pin, str(BIN / "llm-sim"), "--host", "127.0.0.1", "--port", "0", "--ttft-ms", f"{args.ttft_ms:g}",
                   "--itl-ms", f"{args.itl_ms:g}", "--output-tokens", str(args.tokens), "--ignore-max-tokens",
                   str(args.tokens), "--tokens-per-chunk", "1", "--max-batch", "4096", "--seed", "1"]
            self.stats_path = "/_sim/stats"
        else:
            cmd = [*pin, sys.executable, str(ROOT / "bench" / "paced_server.py"), "--shape", shape,
                   "--ttft-ms", f"{args.ttft_ms:g}", "--itl-ms", f"{args.itl_ms:g}", "--tokens", str(args.tokens)]
            self.stats_path = "/_stats"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "serving on" not in line:
            self.proc.kill()
            raise RuntimeError(f"{shape} server did not start: {line}")
        self.url = line.split("serving on", 1)[1].split()[0]

    def stats(self) -> dict[str, Any]:
        return get_json(self.url + self.stats_path)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def client_command(client: str, n: int, url: str, run_s: float, args: argparse.Namespace,
                   work: Path) -> tuple[list[str], dict[str, str], Path]:
    pin = [*priority_prefix(args.priority), "taskset", "-c", str(args.client_cpu)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")} | {"PYTHONUNBUFFERED": "1"}
    request_s = (args.ttft_ms + (args.tokens - 1) * args.itl_ms) / 1000
    if client == "floor":
        out = work / "floor.jsonl"
        return [*pin, sys.executable, str(ROOT / "bench" / "floor_client.py"), "--url", url, "--streams", str(n),
                "--duration", f"{run_s:g}", "--out", str(out), "--spread", f"{request_s:g}",
                "--max-tokens", str(args.tokens), "--drain", "2"], env, out
    report = work / "ours"
    common = ["--host", url, "--headless", "-u", str(n), "-t", f"{round(run_s)}s", "--stop-timeout", "2",
              "--loglevel", "WARNING", "--llm-report", str(report)]
    if client == "ours-even":
        env |= {"BENCH_STREAMS": str(n), "BENCH_SPREAD_S": f"{request_s:g}"}
        cmd = [*pin, str(BIN / "locust"), "-f", str(ROOT / "bench" / "ours_locustfile.py"), *common, "-r", str(n),
               "--llm-spawn-spread", "off"]
    else:
        cmd = [*pin, str(BIN / "locust"), "-f", str(ROOT / "locustfiles" / "vllm.py"), *common,
               "-r", f"{args.spawn_rate or max(1, n // 4)}"]
    return cmd, env, report / "requests.jsonl"


def run_one(shape: str, client: str, n: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    request_s = (args.ttft_ms + (args.tokens - 1) * args.itl_ms) / 1000
    start_s = max(request_s, n / (args.spawn_rate or max(1, n // 4))) + 1.0
    run_s = start_s + args.warmup + args.window + 1.0
    ref = reference_ms(args)
    server = Server(shape, args)
    try:
        cmd, env, out = client_command(client, n, server.url, run_s, args, work)
        with open(work / "client.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            time.sleep(start_s + args.warmup)
            pids = tree(proc.pid)
            s0, c0, v0, t0 = server.stats(), tree_cpu_s(proc.pid), voluntary_switches(pids), time.monotonic()
            time.sleep(args.window)
            pids = tree(proc.pid)
            s1, c1, v1, t1 = server.stats(), tree_cpu_s(proc.pid), voluntary_switches(pids), time.monotonic()
            proc.wait(run_s + 120)
    finally:
        server.stop()
    ref_after = reference_ms(args)
    chunks = s1["chunks"] - s0["chunks"]
    records = load_client_records("ours" if client.startswith("ours") else client, out)
    ttft = [stamps[0] - t0_ns for _, t0_ns, stamps in records if stamps]
    gaps = [b - a for _, _, stamps in records for a, b in zip(stamps, stamps[1:], strict=False)]
    offered = n * args.tokens / request_s
    row = {
        "shape": shape, "client": client, "streams": n, "window_s": round(t1 - t0, 2),
        "offered_chunks_per_s": round(offered), "chunks_per_s": round(chunks / (t1 - t0)),
        "achieved_pct": round(100 * chunks / (t1 - t0) / offered, 1),
        "cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 1),
        "cpu_us_per_chunk": round(1e6 * (c1 - c0) / chunks, 1) if chunks else None,
        "wakeups_per_chunk": round((v1 - v0) / chunks, 3) if chunks else None,
        "requests": len(records), "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
        "itl_p50_ms": pct(gaps, 50), "itl_p99_ms": pct(gaps, 99), "exit": proc.returncode, "reference_ms": ref, "reference_after_ms": ref_after,
    }
    if shape != "sim":
        row |= {"server_late_us_p50": s1.get("late_us_p50"), "server_late_us_p99": s1.get("late_us_p99")}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="280", help="comma-separated stream counts (default 280)")
    ap.add_argument("--shapes", default="sim,spread,lockstep")
    ap.add_argument("--clients", default="ours,ours-even,floor")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--spawn-rate", type=float, default=0, help="ours' -r (default streams / 4, as -u 280 -r 70)")
    ap.add_argument("--warmup", type=float, default=4.0, help="seconds after every stream started (default 4)")
    ap.add_argument("--window", type=float, default=15.0, help="measured seconds (default 15)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every combination, interleaved (default 1)")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--priority", default="rt" if os.geteuid() == 0 else "normal", help="rt, nice or normal")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "server_shape.json")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="shape-") as tmp:
        for r in range(args.repeat):
            for n in [int(x) for x in args.streams.split(",")]:
                for shape in args.shapes.split(","):
                    for client in args.clients.split(","):
                        row = run_one(shape, client, n, args, Path(tmp) / f"{r}-{n}-{shape}-{client}")
                        row["round"] = r
                        rows.append(row)
                        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps({"config": {k: str(v) for k, v in vars(args).items()}, "results": rows},
                                      option=orjson.OPT_INDENT_2))
    print(f"{'shape':9s} {'client':9s} {'N':>4s} {'chunks/s':>8s} {'ach%':>6s} {'cpu%':>5s} {'us/chunk':>8s} "
          f"{'wake/chunk':>10s} {'ttft50':>7s} {'ttft99':>7s} {'itl99':>7s} {'ref_ms':>7s}")
    for x in rows:
        print(f"{x['shape']:9s} {x['client']:9s} {x['streams']:4d} {x['chunks_per_s']:8d} {x['achieved_pct']:6.1f} "
              f"{x['cpu_pct']:5.1f} {x['cpu_us_per_chunk'] or 0:8.1f} {x['wakeups_per_chunk'] or 0:10.3f} "
              f"{x['ttft_p50_ms'] or 0:7.2f} {x['ttft_p99_ms'] or 0:7.2f} {x['itl_p99_ms'] or 0:7.2f} {x['reference_ms']:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
