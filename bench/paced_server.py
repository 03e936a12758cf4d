"""A paced SSE server for the benchmarks: every chunk written at its own exact time, or every
stream's chunk at the same decode step, one ``send()`` and one TCP segment per chunk.

llm-sim paces every stream from one event-loop timer (llm_users/sim/clock.py), which fires at
whole milliseconds: the chunks due in a millisecond leave together, and a client waking up
finds several sockets ready. Real servers differ, and a client's cost per chunk depends on
how many chunks each of its wake-ups finds (issue 34 item 0). This server gives the two
ends of that range, each stream's schedule kept exactly by one pacing thread (timer slack 1 ns,
``Condition.wait`` to the next due time):

- ``--shape spread``: chunk k of a request leaves at receipt + TTFT + k x ITL, each stream on
  its own phase, so chunks are spread through every millisecond as they would be from a
  server whose streams are paced apart (the "paced server" of issue 34's first measurement);
- ``--shape lockstep``: every stream's chunk leaves at the same step of a global ITL grid,
  back to back, as a continuous-batching server (vLLM, TGI, llama.cpp) writes the tokens of
  one decode step: the most chunks per client wake-up.

Any POST gets an OpenAI chat-completions stream of ``--tokens`` chunks (one token each, the
last with ``finish_reason`` and the usage frame in the same write, then ``data: [DONE]``
and the chunked terminator), whatever it asks; ``GET /v1/models`` lists ``sim-model``; any
other GET is 404. ``GET /_stats`` gives ``requests``, ``chunks`` and how late the pacing thread
wrote (``late_us_p50``/``p99``/``max`` over the last 100,000 chunks).

    python bench/paced_server.py --port 8000 --shape spread --ttft-ms 50 --itl-ms 20 --tokens 200

Prints ``serving on http://HOST:PORT`` once it listens. Standard library only.
"""

from __future__ import annotations

import argparse
import ctypes
import heapq
import json
import socket
import sys
import threading
import time
from array import array

perf_counter_ns = time.perf_counter_ns
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n")
LATE_KEPT = 100_000


def http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def frame(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def stream_writes(tokens: int) -> list[bytes]:
    """The bytes of each write of one response: a chunk per token, the last with the usage
    frame and [DONE], then the terminator in its own write."""
    base = {"id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": 0, "model": "sim-model"}
    out = []
    for k in range(tokens):
        delta = {"role": "assistant", "content": "tok"} if k == 0 else {"content": " tok"}
        last = k == tokens - 1
        body = frame({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": "length" if last else None}]})
        if last:
            usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": tokens + 12}
            body += frame({**base, "choices": [], "usage": usage}) + b"data: [DONE]\n\n"
        out.append(http_chunk(body))
    out.append(b"0\r\n\r\n")
    return out


def small_timer_slack() -> None:
    """1 ns of timer slack for this thread (Linux's default 50 µs would bunch wake-ups)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


class Pacer:
    """One thread that writes every due chunk at its time: a heap of (due_ns, n, sock, k)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.ttft_ns = int(args.ttft_ms * 1e6)
        self.itl_ns = int(args.itl_ms * 1e6)
        self.lockstep = args.shape == "lockstep"
        self.writes = stream_writes(args.tokens)
        self.heap: list[tuple[int, int, socket.socket, int]] = []
        self.cond = threading.Condition()
        self.n = 0
        self.requests = 0
        self.chunks = 0
        self.late = array("q")
        self.epoch = perf_counter_ns()

    def start_stream(self, sock: socket.socket) -> None:
        now = perf_counter_ns()
        first = now + self.ttft_ns
        if self.lockstep:  # the next step of the global grid
            first += -(first - self.epoch) % self.itl_ns
        with self.cond:
            self.requests += 1
            self.n += 1
            heapq.heappush(self.heap, (first, self.n, sock, 0))
            self.cond.notify()

    def run(self) -> None:
        small_timer_slack()
        heap, cond, writes, last = self.heap, self.cond, self.writes, len(self.writes) - 1
        while True:
            with cond:
                while not heap:
                    cond.wait()
                due = heap[0][0]
                wait = due - perf_counter_ns()
                if wait > 0:
                    cond.wait(wait / 1e9)
                    continue
                _, n, sock, k = heapq.heappop(heap)
                if k < last - 1:
                    heapq.heappush(heap, (due + self.itl_ns, n, sock, k + 1))
            late = perf_counter_ns() - due
            try:
                sock.sendall(writes[k] if k < last - 1 else writes[k] + writes[last])
            except OSError:
                continue
            self.chunks += 1
            if len(self.late) >= LATE_KEPT:
                del self.late[: LATE_KEPT // 2]
            self.late.append(late)

    def stats(self) -> dict:
        late = sorted(self.late)
        pick = (lambda p: round(late[min(len(late) - 1, int(p * len(late)))] / 1e3, 1)) if late else (lambda p: None)
        return {"requests": self.requests, "chunks": self.chunks, "late_us_p50": pick(0.5),
                "late_us_p99": pick(0.99), "late_us_max": round(late[-1] / 1e3, 1) if late else None}


def read_request(sock: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
    """(request line, what follows the request) or None when the peer closed."""
    while b"\r\n\r\n" not in buf:
        got = sock.recv(65536)
        if not got:
            return None
        buf += got
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        got = sock.recv(65536)
        if not got:
            return None
        rest += got
    return head.split(b"\r\n", 1)[0], rest[length:]


def reply_json(sock: socket.socket, status: str, obj: dict) -> None:
    body = json.dumps(obj).encode()
    sock.sendall(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                 % (status.encode(), len(body), body))


def serve_connection(sock: socket.socket, pacer: Pacer) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    try:
        while True:
            got = read_request(sock, buf)
            if got is None:
                return
            line, buf = got
            method, path = line.split(b" ")[:2]
            if method == b"POST":
                sock.sendall(HEAD)
                pacer.start_stream(sock)  # the pacer writes the rest; the client asks again when it ends
            elif path == b"/v1/models":
                reply_json(sock, "200 OK", {"object": "list", "data": [{"id": "sim-model", "object": "model"}]})
            elif path == b"/_stats":
                reply_json(sock, "200 OK", pacer.stats())
            else:
                reply_json(sock, "404 Not Found", {"error": "not found"})
    except OSError:
        return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--shape", choices=("spread", "lockstep"), default="spread")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=200)
    args = ap.parse_args(argv)
    if args.tokens < 2:
        ap.error("--tokens must be at least 2")
    pacer = Pacer(args)
    threading.Thread(target=pacer.run, daemon=True, name="pacer").start()
    lsock = socket.create_server((args.host, args.port), backlog=4096)
    host, port = lsock.getsockname()[:2]
    print(f"serving on http://{host}:{port}", flush=True)
    while True:
        conn, _ = lsock.accept()
        threading.Thread(target=serve_connection, args=(conn, pacer), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
