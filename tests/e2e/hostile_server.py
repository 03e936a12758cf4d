"""A small misbehaving HTTP server on 127.0.0.1, one misbehaviour per port (issue 54).

    python -m tests.e2e.hostile_server endless_line/raw endless_line/sdk ...

prints one JSON line, ``{"control": PORT, "ports": {"endless_line/raw": PORT, ...}}``, then
serves until killed. Each named listener answers every POST with its misbehaviour, written as
fast as the client reads, until the client leaves (or 4 GiB, so a client that never cuts cannot
keep it busy forever); any other request (a probe) gets a 404. ``GET /stats`` on the control
port: per name, the POSTs read (``requests``), the time the first came (``first``) and the
``Accept-Encoding`` headers seen. One name per (misbehaviour, client mode), so runs beside each
other are counted apart. Misbehaviours (the part of the name before ``/``):

- ``endless_line``: an OpenAI SSE ``data:`` line that never ends (chunked);
- ``endless_ndjson``: an Ollama NDJSON line that never ends (chunked);
- ``endless_body``: an embeddings JSON body that never ends (chunked, no line end);
- ``endless_head``: a response header that never ends;
- ``endless_tokens``: valid OpenAI token chunks, one token each, forever (never a finish);
- ``gzip_bomb``: an SSE body gzip-compressed though identity was asked: zeros, made as it is
  sent (about 1 KB on the wire per MiB inflated).

Threads, blocking sockets, no dependency: its own process, so the client's memory is measured
apart from it.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator

CAP = 4 << 30
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
TOKEN = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
         b'"delta":{"content":"x"},"finish_reason":null}]}\n\n')


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _forever(piece: bytes) -> Iterator[bytes]:
    while True:
        yield piece


def endless_line() -> Iterator[bytes]:
    yield SSE_HEAD + b"\r\n" + _chunk(b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
                                      b'"delta":{"content":"')
    yield from _forever(_chunk(b"x" * 65536))


def endless_ndjson() -> Iterator[bytes]:
    yield (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
           + _chunk(b'{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"'))
    yield from _forever(_chunk(b"x" * 65536))


def endless_body() -> Iterator[bytes]:
    yield (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
           + _chunk(b'{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":['))
    yield from _forever(_chunk(b"0.0123456789," * 5000))


def endless_head() -> Iterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Filler: "
    yield from _forever(b"a" * 65536)


def endless_tokens() -> Iterator[bytes]:
    yield SSE_HEAD + b"\r\n"
    yield from _forever(_chunk(TOKEN * 64))


def gzip_bomb() -> Iterator[bytes]:
    yield SSE_HEAD + b"Content-Encoding: gzip\r\n\r\n"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = z.compress(b'data: {"choices":[{"index":0,"delta":{"content":"')
    zeros = bytes(1 << 20)
    while True:
        out = first + z.compress(zeros) + z.flush(zlib.Z_SYNC_FLUSH)
        first = b""
        yield _chunk(out)


BEHAVIOURS: dict[str, Callable[[], Iterator[bytes]]] = {f.__name__: f for f in (
    endless_line, endless_ndjson, endless_body, endless_head, endless_tokens, gzip_bomb)}


class Counts:
    """What each named listener saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stats: dict[str, dict] = {}

    def saw(self, name: str, accept_encoding: str) -> None:
        with self.lock:
            s = self.stats.setdefault(name, {"requests": 0, "first": None, "accept_encoding": []})
            s["requests"] += 1
            s["first"] = s["first"] or time.time()
            if accept_encoding not in s["accept_encoding"]:
                s["accept_encoding"].append(accept_encoding)


def _read_request(conn: socket.socket) -> tuple[bytes, bytes, dict[bytes, bytes]] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return None
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    method, path = lines[0].split(b" ")[:2]
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in lines[1:])}
    length = int(headers.get(b"content-length", b"0"))
    while len(body) < length:
        got = conn.recv(65536)
        if not got:
            return None
        body += got
    return method, path, headers


def _answer(conn: socket.socket, name: str, counts: Counts) -> None:
    with conn:
        request = _read_request(conn)
        if request is None:
            return
        method, _path, headers = request
        if method != b"POST":
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        counts.saw(name, headers.get(b"accept-encoding", b"").decode("latin-1"))
        sent = 0
        try:
            for piece in BEHAVIOURS[name.split("/")[0]]():
                conn.sendall(piece)
                sent += len(piece)
                if sent > CAP:
                    return
        except OSError:
            return  # the client cut it: what a bounded client does


def _listen(name: str, counts: Counts) -> int:
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_answer, args=(conn, name, counts), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1]


def _control(counts: Counts) -> int:
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            with conn:
                if _read_request(conn) is None:
                    continue
                with counts.lock:
                    body = json.dumps(counts.stats).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%b" % (len(body), body))

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def main(names: list[str]) -> None:
    counts = Counts()
    ports = {name: _listen(name, counts) for name in names}
    print(json.dumps({"control": _control(counts), "ports": ports}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
