"""Parse cost per chunk: one 128-token vLLM response, chunk by chunk, ours vs the floor (issue 14).

    .venv/bin/python bench/parse_per_chunk.py

Records one real response from the embedded simulator, then feeds it a chunk per call through
ours (httptools -> OpenAI stream parser -> request state, as ``stream.py`` does after a recv)
and through the floor's inline loop (``bench/floor_client.py``: de-chunk, split on blank lines,
orjson). No sockets: this is the CPU per chunk after the bytes arrive. Prints the best of 5
rounds of 200 responses, in ns per chunk.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import httptools
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import floor_client as fc  # noqa: E402

from bench.lib.llm_imports import (  # noqa: E402
    OpenAIStreamParser,
    RequestRecord,
    RequestState,
    _Exchange,
    start_simulator,
)


def record_response(tokens: int = 128) -> list[bytes]:
    """The response's bytes, one piece per HTTP chunk (the head with the first)."""
    sim = start_simulator(["--ttft-ms", "1", "--itl-ms", "1", "--output-tokens", str(tokens)])
    try:
        host, port = sim.url.split("//")[1].split(":")
        body = fc.request_body("sim-model", tokens)
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Accept-Encoding: identity\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        with socket.create_connection((host, int(port))) as s:
            s.sendall(head + body)
            data = b""
            while not data.endswith(b"0\r\n\r\n"):
                data += s.recv(65536)
    finally:
        sim.stop()
    h_end = data.index(b"\r\n\r\n") + 4
    rest = data[h_end:]
    chunks = []
    i = 0
    while i < len(rest):
        j = rest.index(b"\r\n", i)
        end = j + 2 + int(rest[i:j], 16) + 2
        chunks.append(rest[i:end])
        i = end
    return [data[:h_end] + chunks[0], *chunks[1:]]


def ours(pieces: list[bytes]) -> None:
    state = RequestState(RequestRecord("id", "n", "b", "m"), OpenAIStreamParser(), frozenset())
    state.start()
    ex = _Exchange(state)
    http = ex.http = httptools.HttpResponseParser(ex)
    for p in pieces:
        ex.now = time.perf_counter_ns()
        http.feed_data(p)
    state.finish(time.perf_counter_ns())


def floor(pieces: list[bytes]) -> None:
    dechunk = fc.Dechunker()
    sse = b""
    stamps = []
    body = pieces[0][pieces[0].find(b"\r\n\r\n") + 4:]
    for k in range(len(pieces)):
        if k:
            body = pieces[k]
        now = time.perf_counter_ns()
        payload = dechunk.feed(body)
        if payload:
            sse = sse + payload if sse else payload
            frames = sse.split(b"\n\n")
            sse = frames.pop()
            for frame in frames:
                if not frame.startswith(b"data: ") or frame[6:] == b"[DONE]":
                    continue
                obj = orjson.loads(frame[6:])
                choices = obj.get("choices")
                if choices and choices[0].get("delta", {}).get("content"):
                    stamps.append(now)


def main() -> None:
    pieces = record_response()
    for name, f in (("ours", ours), ("floor", floor)):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(200):
                f(pieces)
            best = min(best, (time.perf_counter_ns() - t) / 200 / len(pieces))
        print(f"{name:6} {best:7.0f} ns per chunk ({len(pieces)} chunks per response)")


if __name__ == "__main__":
    main()
