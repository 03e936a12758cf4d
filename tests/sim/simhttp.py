"""A deliberately raw HTTP/1.1 client for the simulator tests: one request per connection
(``Connection: close``), reads to EOF or to a reset, and keeps the bytes exactly as sent, so a
test can see a missing terminator, a malformed line or a TCP reset that a friendly client
would hide. Plus small helpers around the ground-truth endpoints."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Raw:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # de-chunked
    chunked_complete: bool = False  # the final 0-size chunk arrived
    reset: bool = False  # the connection was reset (ECONNRESET) before EOF
    eof: bool = False

    def json(self) -> Any:
        return json.loads(self.body)

    def lines(self) -> list[bytes]:
        return self.body.splitlines()


def _dechunk(data: bytes) -> tuple[bytes, bool]:
    out = bytearray()
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return bytes(out), False
        size = int(data[pos:end].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out), data[end + 2:end + 4] == b"\r\n"
        start = end + 2
        if len(data) < start + size + 2:
            out += data[start:start + size]
            return bytes(out), False
        out += data[start:start + size]
        pos = start + size + 2


def request(url: str, path: str, body: Any = None, headers: dict[str, str] | None = None, method: str = "POST",
            timeout: float = 10.0) -> Raw:
    u = urlsplit(url)
    payload = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    head = [f"{method} {path} HTTP/1.1", f"Host: {u.hostname}:{u.port}", "Connection: close",
            f"Content-Length: {len(payload)}"]
    if body is not None:
        head.append("Content-Type: application/json")
    for k, v in (headers or {}).items():
        head.append(f"{k}: {v}")
    raw = Raw()
    data = bytearray()
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        try:
            while True:
                piece = sock.recv(65536)
                if not piece:
                    raw.eof = True
                    break
                data += piece
        except ConnectionResetError:
            raw.reset = True
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return raw
    lines = bytes(data[:head_end]).decode("latin-1").split("\r\n")
    raw.status = int(lines[0].split()[1])
    for line in lines[1:]:
        k, _, v = line.partition(":")
        raw.headers[k.strip().lower()] = v.strip()
    rest = bytes(data[head_end + 4:])
    if raw.headers.get("transfer-encoding", "").lower() == "chunked":
        raw.body, raw.chunked_complete = _dechunk(rest)
    else:
        raw.body = rest
    return raw


def get_json(url: str, path: str, method: str = "GET") -> Any:
    r = request(url, path, method=method)
    assert r.status == 200, (r.status, r.body[:300])
    return r.json()


def trace(url: str, request_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """The finished ground-truth record of one request (waits for it to finish)."""
    deadline = time.monotonic() + timeout
    while True:
        r = request(url, f"/_sim/trace?request_id={request_id}", method="GET")
        if r.status == 200:
            rec = r.json()
            if rec["outcome"] != "active":
                return rec
        if time.monotonic() > deadline:
            raise AssertionError(f"no finished trace record for {request_id}: {r.status} {r.body[:200]!r}")
        time.sleep(0.01)
