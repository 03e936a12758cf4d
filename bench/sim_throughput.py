"""How many chunks per second the simulator serves on ONE core.

Starts ``llm-sim`` pinned to one CPU (``--sim-core``, default 0), then drives it from separate
client processes pinned to the other CPUs: raw asyncio sockets, keep-alive connections, each
connection looping streaming chat requests (OpenAI route, 1 token per chunk by default) and
throwing the bytes away (a client that reads late reads many chunks at once, so it keeps up).
The figure is the simulator's own chunk counter (``/_sim/stats``) over the measured window,
after a warm-up; the simulator's CPU use over the window says whether it was saturated.

    python bench/sim_throughput.py                       # 500 streams, 5 ms gap: offered 100k chunks/s
    python bench/sim_throughput.py --streams 500 --itl-ms 20 --duration 10

Offered load = streams / itl. When the simulator keeps up, served == offered and its CPU is
below 100 %; past its capacity the chunk clock falls behind and served is its ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.llm_imports import start_simulator  # noqa: E402
from bench.lib.procfs import cpu_s  # noqa: E402

END = b"\r\n0\r\n\r\n"


class _Conn(asyncio.Protocol):
    def __init__(self, request: bytes, counter: list[int], stop: asyncio.Event) -> None:
        self.request = request
        self.counter = counter
        self.stop = stop
        self.tail = b""
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buf = self.tail + data[-16:] if len(data) < 16 else data[-16:]
        if buf.endswith(END):
            self.counter[0] += 1
            self.tail = b""
            if self.stop.is_set():
                self.transport.close()  # type: ignore[union-attr]
            else:
                self.transport.write(self.request)  # type: ignore[union-attr]
        else:
            self.tail = buf[-8:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _client(host: str, port: int, conns: int, request: bytes, seconds: float, out: mp.Queue) -> None:
    loop = asyncio.get_running_loop()
    counter = [0]
    stop = asyncio.Event()
    protos = []
    for i in range(conns):
        _, proto = await loop.create_connection(lambda: _Conn(request, counter, stop), host, port)
        protos.append(proto)
        if i % 50 == 49:
            await asyncio.sleep(0.01)  # spread the starts a little
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait([p.closed for p in protos], timeout=30)
    out.put(counter[0])


def _client_main(cpu: int | None, host: str, port: int, conns: int, request: bytes, seconds: float,
                 out: mp.Queue) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    try:
        import uvloop  # type: ignore[import-not-found]

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(_client(host, port, conns, request, seconds, out))


def _stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/_sim/stats", timeout=10) as r:
        return json.loads(r.read())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=500, help="concurrent streaming connections (default 500)")
    p.add_argument("--itl-ms", type=float, default=5.0, help="simulator chunk gap (default 5: 200 chunks/s/stream)")
    p.add_argument("--ttft-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=256, help="tokens per response (default 256)")
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds (default 10)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (default 3)")
    p.add_argument("--clients", type=int, default=0, help="client processes (default: one per other CPU, max 4)")
    p.add_argument("--sim-core", type=int, default=0, help="CPU the simulator is pinned to (default 0)")
    p.add_argument("--sim-arg", action="append", default=[], help="extra llm-sim argument (repeatable)")
    p.add_argument("--url", default=None, help="drive an already running simulator instead of starting one "
                   "(its settings then decide the offered load)")
    p.add_argument("--sim-pid", type=int, default=None, help="with --url: its pid, for the CPU figure")
    args = p.parse_args()

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    others = [c for c in cpus if c != args.sim_core] or cpus
    nclients = args.clients or min(4, len(others))
    sim_args = ["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--output-tokens", str(args.tokens),
                "--tokens-per-chunk", str(args.tokens_per_chunk), "--max-batch", str(max(256, args.streams)),
                *args.sim_arg]
    sim = None if args.url else start_simulator(sim_args)
    url = args.url or sim.url  # type: ignore[union-attr]
    pid = args.sim_pid if sim is None else sim.pid
    try:
        pinned = False
        if sim is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(sim.pid, {args.sim_core})
            pinned = True
        host, port = url.removeprefix("http://").rsplit(":", 1)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "benchmark"}], "stream": True,
                           "max_tokens": args.tokens}).encode()
        request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        out: mp.Queue = mp.Queue()
        total = args.warmup + args.duration
        per = [args.streams // nclients + (1 if i < args.streams % nclients else 0) for i in range(nclients)]
        procs = [mp.Process(target=_client_main, args=(others[i % len(others)], host, int(port), per[i], request,
                                                        total, out), daemon=True) for i in range(nclients)]
        for proc in procs:
            proc.start()
        time.sleep(args.warmup)
        s0, c0, t0 = _stats(url), cpu_s(pid) if pid else 0.0, time.monotonic()
        k0 = sum(cpu_s(proc.pid) for proc in procs)  # type: ignore[arg-type]
        time.sleep(args.duration)
        s1, c1, t1 = _stats(url), cpu_s(pid) if pid else 0.0, time.monotonic()
        k1 = sum(cpu_s(proc.pid) for proc in procs)  # type: ignore[arg-type]
        responses = sum(out.get(timeout=60) for _ in procs)
        for proc in procs:
            proc.join(30)
        elapsed = t1 - t0
        chunks_per_s = (s1["chunks"] - s0["chunks"]) / elapsed
        offered = args.streams * 1000.0 / args.itl_ms if args.itl_ms else float("inf")
        result = {
            "chunks_per_s": round(chunks_per_s),
            "tokens_per_s": round((s1["generation_tokens"] - s0["generation_tokens"]) / elapsed),
            "offered_chunks_per_s": round(offered),
            "sim_cpu_percent": round(100 * (c1 - c0) / elapsed, 1),
            "chunks_per_sim_cpu_second": round((s1["chunks"] - s0["chunks"]) / max(c1 - c0, 1e-9)),
            "sim_pinned_core": args.sim_core if pinned else None,
            "client_cpu_percent": round(100 * (k1 - k0) / elapsed, 1),
            "streams": args.streams,
            "client_processes": nclients,
            "client_cpus": sorted({others[i % len(others)] for i in range(nclients)}),
            "responses_completed": responses,
            "aborted": s1["aborted"],
            "python": sys.version.split()[0],
        }
        print(json.dumps(result, indent=2))
        print(f"llm-sim served {chunks_per_s:,.0f} chunks/s on one core "
              f"({result['sim_cpu_percent']}% CPU; offered {offered:,.0f}/s by {args.streams} streams)")
    finally:
        if sim is not None:
            sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
