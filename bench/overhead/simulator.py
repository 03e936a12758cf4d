"""The simulator the clients stream from: llm-sim in its own process, pinned to the simulator's
core, with its trace and stats endpoints."""

from __future__ import annotations

import argparse
import signal
import subprocess
import threading
import urllib.request
from typing import Any

import orjson

from bench.lib.priority import priority_prefix
from bench.overhead.config import VENV_BIN


def sim_call(url: str, method: str, path: str) -> Any:
    """One call to a simulator's control endpoints (``/_sim/trace``, ``/_sim/stats``): its JSON
    answer, or None for an empty one."""
    req = urllib.request.Request(url + path, method=method)
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return orjson.loads(body) if body else None


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
        return sim_call(self.url, method, path)

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
