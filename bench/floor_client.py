"""The floor: the least a gevent client can do to stream OpenAI chat completions and stamp them.

Raw gevent sockets, one keep-alive connection per stream, a hand-written HTTP/1.1 request,
minimal de-chunking, SSE split on blank lines, ``orjson.loads`` per frame and one
``time.perf_counter_ns()`` stamp per recv, given to every frame that recv completed (at one
frame per chunk, a stamp per frame). No Locust, no error handling beyond "give up on this
stream": it is the yardstick the other clients of ``bench/client_overhead.py`` are held to.

    python bench/floor_client.py --url http://127.0.0.1:8000 --streams 64 --duration 10 \\
        --out floor.jsonl

Prints ``BENCH-READY`` once imported and set up (before any stream opens), waits ``--hold``
seconds, starts the streams spread over ``--spread`` seconds, stops starting new requests after
``--duration`` seconds of streaming and lets the ones in flight finish. Each request, as it
ends, appends one JSON line to ``--out``: ``{"id", "t0", "chunks": [stamp_ns, ...]}`` (stamps
of the token-bearing chunks); nothing is kept in memory. A request still streaming when the
drain ends is written with what it had and ``"cut": true``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from urllib.parse import urlsplit

import gevent
import gevent.socket
import orjson

perf_counter_ns = time.perf_counter_ns


def request_body(model: str, max_tokens: int) -> bytes:
    """The same request the other clients send (vLLM dialect, usage asked for)."""
    return orjson.dumps({
        "model": model,
        "messages": [{"role": "user", "content": "Explain how a hash map handles collisions."}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "top_p": 1.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    })


class Dechunker:
    """HTTP/1.1 chunked transfer coding, incrementally: bytes in, payload bytes out."""

    __slots__ = ("pending", "left", "skip", "end")

    def __init__(self) -> None:
        self.pending = b""  # an incomplete chunk-size line
        self.left = 0  # payload bytes still due in the current chunk
        self.skip = 0  # CRLF bytes still to skip after a chunk's payload
        self.end = False

    def feed(self, data: bytes) -> bytes:
        buf = self.pending + data if self.pending else data
        self.pending = b""
        out = []
        i = 0
        n = len(buf)
        while i < n:
            if self.left:
                take = min(self.left, n - i)
                out.append(buf[i:i + take])
                i += take
                self.left -= take
                if not self.left:
                    self.skip = 2
                continue
            if self.skip:
                s = min(self.skip, n - i)
                i += s
                self.skip -= s
                continue
            j = buf.find(b"\r\n", i)
            if j < 0:
                self.pending = buf[i:]
                break
            size = int(buf[i:j].split(b";", 1)[0], 16)
            i = j + 2
            if size == 0:
                self.end = True
                break
            self.left = size
        return out[0] if len(out) == 1 else b"".join(out)


class Stream:
    """One stream: a connection and a loop of requests on it."""

    def __init__(self, host: str, port: int, head: bytes, body: bytes, out_fd: int) -> None:
        self.addr = (host, port)
        self.head = head
        self.body = body
        self.out_fd = out_fd
        self.requests = 0
        self.sock: gevent.socket.socket | None = None

    def connect(self) -> None:
        self.sock = gevent.socket.create_connection(self.addr)
        self.sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)

    def run(self, delay: float, deadline: float) -> None:
        gevent.sleep(delay)
        try:
            while time.monotonic() < deadline:
                self.one()
        except (OSError, ValueError) as e:
            print(f"floor: stream failed: {e!r}", file=sys.stderr, flush=True)
        finally:
            if self.sock is not None:
                self.sock.close()

    def one(self) -> None:
        if self.sock is None:
            self.connect()
        sock = self.sock
        rid = uuid.uuid4().hex
        data = self.head % rid.encode() + self.body
        stamps: list[int] = []
        t0 = perf_counter_ns()
        try:
            self.stream(sock, data, stamps)
        except gevent.GreenletExit:  # the drain's end: a request longer than the run (a long-output
            if stamps:  # series) still tells its chunks' stamps, as our client's cut records do
                os.write(self.out_fd, orjson.dumps({"id": rid, "t0": t0, "chunks": stamps, "cut": True}) + b"\n")
            raise
        os.write(self.out_fd, orjson.dumps({"id": rid, "t0": t0, "chunks": stamps}) + b"\n")
        self.requests += 1

    def stream(self, sock: gevent.socket.socket, data: bytes, stamps: list[int]) -> None:
        """Send one request and read its response, a stamp per token-bearing chunk into ``stamps``."""
        sock.sendall(data)
        buf = b""
        while True:  # the response head
            got = sock.recv(65536)
            now = perf_counter_ns()
            if not got:
                raise ValueError("connection closed before the response head")
            buf += got
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
        head = buf[:end].lower()
        if not head.startswith(b"http/1.1 200"):
            raise ValueError(f"HTTP error: {head[:40]!r}")
        chunked = b"transfer-encoding: chunked" in head
        dechunk = Dechunker()
        body = buf[end + 4:]
        sse = b""
        done = False
        while True:
            payload = dechunk.feed(body) if chunked else body
            if payload:
                sse = sse + payload if sse else payload
                frames = sse.split(b"\n\n")
                sse = frames.pop()
                for frame in frames:
                    if not frame.startswith(b"data: "):
                        continue
                    p = frame[6:]
                    if p == b"[DONE]":
                        done = True
                        continue
                    obj = orjson.loads(p)
                    choices = obj.get("choices")
                    if choices and choices[0].get("delta", {}).get("content"):
                        stamps.append(now)
            if done or dechunk.end:
                break
            body = sock.recv(65536)
            now = perf_counter_ns()
            if not body:
                raise ValueError("connection closed mid-response")
        if done and chunked and not dechunk.end:  # read the terminating zero-size chunk
            while not dechunk.end:
                more = sock.recv(65536)
                if not more:
                    break
                dechunk.feed(more)


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
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\nUser-Agent: floor\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nAccept-Encoding: identity\r\n"
        f"Content-Length: {len(body)}\r\nX-Request-Id: %s\r\n\r\n"
    ).encode().replace(b"%s", b"%b")
    out_fd = os.open(a.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    print("BENCH-READY", flush=True)
    if a.hold:
        time.sleep(a.hold)
    deadline = time.monotonic() + a.duration
    n = a.streams
    streams = [Stream(host, port, head, body, out_fd) for _ in range(n)]
    greenlets = [gevent.spawn(s.run, a.spread * i / n, deadline) for i, s in enumerate(streams)]
    gevent.joinall(greenlets, timeout=a.duration + a.drain)
    gevent.killall(greenlets, timeout=2)
    os.close(out_fd)
    print(f"floor: {sum(s.requests for s in streams)} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
