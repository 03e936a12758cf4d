"""Baseline for bench/client_overhead.py: Locust's stock FastHttpUser reading an SSE stream.

What a Locust user writes today to stream an OpenAI chat completion: ``stream=True``, then
``resp._response.readline()`` (geventhttpclient's buffered reader; SSE lines end in LF, so the
separator is ``b"\\n"``), ``json.loads`` per data line, a ``perf_counter_ns`` stamp per line.

    BENCH_OUT=fasthttp.jsonl locust -f bench/fasthttp_locustfile.py --host http://127.0.0.1:8000 \\
        --headless -u 64 -r 64 -t 10s

Environment: ``BENCH_OUT`` (per-request JSONL: ``{"id", "t0", "chunks": [stamp_ns, ...]}``),
``BENCH_STREAMS`` and ``BENCH_SPREAD_S`` (first requests spread evenly over that many
seconds), ``BENCH_HOLD_S`` (pause after ``BENCH-READY`` before any user starts),
``BENCH_MAX_TOKENS``, ``BENCH_MODEL``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid

import gevent
import orjson
from locust import FastHttpUser, constant, events, task

perf_counter_ns = time.perf_counter_ns

STREAMS = int(os.environ.get("BENCH_STREAMS", "1"))
SPREAD_S = float(os.environ.get("BENCH_SPREAD_S", "1"))
BODY = json.dumps({
    "model": os.environ.get("BENCH_MODEL", "sim-model"),
    "messages": [{"role": "user", "content": "Explain how a hash map handles collisions."}],
    "max_tokens": int(os.environ.get("BENCH_MAX_TOKENS", "128")),
    "temperature": 0.0,
    "top_p": 1.0,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
})
_numbers = itertools.count()
_out_fd = -1


@events.init.add_listener
def _hold(environment, **_kw) -> None:
    global _out_fd
    out = os.environ.get("BENCH_OUT")
    if out:
        _out_fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    print("BENCH-READY", flush=True)
    time.sleep(float(os.environ.get("BENCH_HOLD_S", "0")))


class StockFastHttp(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 60.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        gevent.sleep(SPREAD_S * (next(_numbers) % STREAMS) / STREAMS)

    @task
    def chat(self) -> None:
        rid = uuid.uuid4().hex
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            "X-Request-Id": rid,
        }
        stamps: list[int] = []
        t0 = perf_counter_ns()
        with self.client.post("/v1/chat/completions", data=BODY, headers=headers, stream=True,
                              catch_response=True) as resp:
            r = resp._response
            while True:
                line = r.readline(b"\n")
                if not line:
                    break
                now = perf_counter_ns()
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].rstrip()
                if payload == b"[DONE]":
                    continue  # read on to the end of the body so the connection is reused
                obj = json.loads(payload)
                choices = obj.get("choices")
                if choices and choices[0].get("delta", {}).get("content"):
                    stamps.append(now)
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}")
        if _out_fd >= 0:
            os.write(_out_fd, orjson.dumps({"id": rid, "t0": t0, "chunks": stamps}) + b"\n")
