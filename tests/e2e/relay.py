"""A TCP relay that delays each direction, standing in for a network's latency and jitter (this
machine's kernel has no netem qdisc).

    python tests/e2e/relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS [JITTER_MS]

Each chunk read from one side is written to the other DELAY_MS after it was read, plus a
uniform draw in [0, JITTER_MS) when given (seeded), never before the chunk ahead of it (a byte
stream stays in order, as TCP reorders netem's jitter back): without jitter gaps between chunks
are kept, latency grows by the delay. Two threads per direction (reader stamps and queues,
writer sleeps until due). Prints ``relay: ready`` once listening; runs until killed.
"""

from __future__ import annotations

import queue
import random
import socket
import sys
import threading
import time


def pipe(src: socket.socket, dst: socket.socket, delay_s: float, jitter_s: float = 0.0, seed: int = 0) -> None:
    q: queue.Queue[tuple[float, bytes]] = queue.Queue()
    rng = random.Random(seed)

    def reader() -> None:
        last = 0.0
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            last = max(last, time.monotonic() + delay_s + (rng.random() * jitter_s if jitter_s else 0.0))
            q.put((last, data))
            if not data:
                return

    def writer() -> None:
        while True:
            due, data = q.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()


def main(argv: list[str]) -> None:
    host, port, thost, tport, delay_ms = argv[:5]
    jitter_s = float(argv[5]) / 1000 if len(argv) > 5 else 0.0
    srv = socket.create_server((host, int(port)), backlog=128)
    print("relay: ready", flush=True)
    n = 0
    while True:
        n += 1
        client, _ = srv.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.create_connection((thost, int(tport)), timeout=10)
        upstream.settimeout(None)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe(client, upstream, float(delay_ms) / 1000, jitter_s, 2 * n)
        pipe(upstream, client, float(delay_ms) / 1000, jitter_s, 2 * n + 1)


if __name__ == "__main__":
    main(sys.argv[1:])
