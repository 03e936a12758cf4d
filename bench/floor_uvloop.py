"""The uvloop floor: the least an asyncio client on uvloop does to stream OpenAI chat completions.

The same request, connections and records as ``bench/floor_client.py`` (the gevent floor), on
an ``asyncio.Protocol`` over uvloop instead of gevent sockets: one keep-alive connection per
stream, a hand-written HTTP/1.1 request, minimal de-chunking, SSE split on blank lines,
``orjson.loads`` per frame and one ``time.perf_counter_ns()`` stamp per ``data_received``
(uvloop's read callback: libuv reads the socket and calls back, no greenlet switch, no timer
per read). The yardstick above the gevent floor: what a callback-driven loop in C costs.

    python bench/floor_uvloop.py --url http://127.0.0.1:8000 --streams 64 --duration 10 \\
        --out uvfloor.jsonl

Command line and output as ``bench/floor_client.py`` (``BENCH-READY``, ``--hold``, ``--spread``,
one JSON line ``{"id", "t0", "chunks"}`` per request as it ends). Falls back to asyncio's own
loop, and says so, when uvloop is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
import uuid
from urllib.parse import urlsplit

import orjson
from floor_client import Dechunker, request_body  # bench/ is the script's directory

perf_counter_ns = time.perf_counter_ns


class StreamProtocol(asyncio.Protocol):
    """One stream: a connection and its closed loop of requests, driven by read callbacks."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.done = asyncio.get_running_loop().create_future()
        self.requests = 0
        self.rid = ""
        self.t0 = 0
        self.stamps: list[int] = []
        self.head: bytes | None = b""  # the response head while it comes, None once read
        self.chunked = True
        self.dechunk = Dechunker()
        self.sse = b""
        self.finished = False
        self.open = False  # a request sent and not yet ended

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send()

    def send(self) -> None:
        self.rid = uuid.uuid4().hex
        self.stamps = []
        self.head = b""
        self.dechunk = Dechunker()
        self.sse = b""
        self.finished = False
        self.open = True
        self.t0 = perf_counter_ns()
        assert self.transport is not None
        self.transport.write(self.client.head % self.rid.encode() + self.client.body)

    def data_received(self, data: bytes) -> None:
        now = perf_counter_ns()
        if self.head is not None:
            buf = self.head + data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.head = buf
                return
            head = buf[:end].lower()
            if not head.startswith(b"http/1.1 200"):
                self.fail(f"HTTP error: {head[:40]!r}")
                return
            self.chunked = b"transfer-encoding: chunked" in head
            self.head = None
            data = buf[end + 4:]
        payload = self.dechunk.feed(data) if self.chunked else data
        if payload:
            sse = self.sse + payload if self.sse else payload
            frames = sse.split(b"\n\n")
            self.sse = frames.pop()
            for frame in frames:
                if not frame.startswith(b"data: "):
                    continue
                p = frame[6:]
                if p == b"[DONE]":
                    self.finished = True
                    continue
                obj = orjson.loads(p)
                choices = obj.get("choices")
                if choices and choices[0].get("delta", {}).get("content"):
                    self.stamps.append(now)
        if self.dechunk.end or (self.finished and not self.chunked):
            self.end_request()

    def cut(self) -> None:
        """The drain's end with this request still streaming: what it had, marked cut."""
        if self.open and self.stamps:
            os.write(self.client.out_fd, orjson.dumps({"id": self.rid, "t0": self.t0, "chunks": self.stamps,
                                                      "cut": True}) + b"\n")
        self.open = False

    def end_request(self) -> None:
        self.open = False
        os.write(self.client.out_fd, orjson.dumps({"id": self.rid, "t0": self.t0, "chunks": self.stamps}) + b"\n")
        self.requests += 1
        if time.monotonic() < self.client.deadline:
            self.send()
        else:
            self.close()

    def fail(self, why: str) -> None:
        print(f"uvfloor: stream failed: {why}", file=sys.stderr, flush=True)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            if exc is not None or self.head is not None or not self.dechunk.end:
                print(f"uvfloor: connection lost mid-response: {exc!r}", file=sys.stderr, flush=True)
            self.done.set_result(None)


class Client:
    """What every stream shares: the address, the request and the output file."""

    def __init__(self, host: str, port: int, head: bytes, body: bytes, out_fd: int, deadline: float) -> None:
        self.host, self.port, self.head, self.body, self.out_fd = host, port, head, body, out_fd
        self.deadline = deadline
        self.protocols: list[StreamProtocol] = []

    async def stream(self, delay: float) -> int:
        await asyncio.sleep(delay)
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(lambda: StreamProtocol(self), self.host, self.port)
        except OSError as e:
            print(f"uvfloor: connect failed: {e!r}", file=sys.stderr, flush=True)
            return 0
        self.protocols.append(proto)
        await proto.done
        return proto.requests


async def run(a: argparse.Namespace, host: str, port: int, head: bytes, body: bytes, out_fd: int) -> int:
    if a.hold:
        await asyncio.sleep(a.hold)
    client = Client(host, port, head, body, out_fd, time.monotonic() + a.duration)
    n = a.streams
    tasks = [asyncio.ensure_future(client.stream(a.spread * i / n)) for i in range(n)]
    done, pending = await asyncio.wait(tasks, timeout=a.duration + a.drain)
    for t in pending:
        t.cancel()
    for proto in client.protocols:
        proto.cut()
    return sum(t.result() for t in done if not t.cancelled() and t.exception() is None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True, help="seconds of streaming before no new request")
    ap.add_argument("--out", required=True, help="JSONL of per-request chunk stamps")
    ap.add_argument("--hold", type=float, default=0.0, help="seconds to wait after BENCH-READY")
    ap.add_argument("--spread", type=float, default=1.0, help="stream starts spread over this many seconds")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--model", default="sim-model")
    ap.add_argument("--drain", type=float, default=30.0, help="longest wait for requests in flight at the end")
    a = ap.parse_args(argv)
    url = urlsplit(a.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    body = request_body(a.model, a.max_tokens)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\nUser-Agent: uvfloor\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nAccept-Encoding: identity\r\n"
        f"Content-Length: {len(body)}\r\nX-Request-Id: %s\r\n\r\n"
    ).encode().replace(b"%s", b"%b")
    out_fd = os.open(a.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        import uvloop  # type: ignore[import-not-found]

        factory = uvloop.new_event_loop
    except ImportError:
        print("uvfloor: uvloop not installed, running on asyncio's own loop", file=sys.stderr, flush=True)
        factory = None
    print("BENCH-READY", flush=True)
    with asyncio.Runner(loop_factory=factory) as runner:
        total = runner.run(run(a, host, port, head, body, out_fd))
    os.close(out_fd)
    print(f"uvfloor: {total} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
