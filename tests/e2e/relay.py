"""A TCP relay that delays each direction by a fixed time, standing in for a network's latency
(this machine's kernel has no netem qdisc).

    python tests/e2e/relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS

Each chunk read from one side is written to the other DELAY_MS after it was read, in order,
so gaps between chunks are kept: latency grows by the delay, spacing does not change. Two
threads per direction (reader stamps and queues, writer sleeps until due). Prints
``relay: ready`` once listening; runs until killed.
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time


def pipe(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    q: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def reader() -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            q.put((time.monotonic() + delay_s, data))
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
    host, port, thost, tport, delay_ms = argv
    srv = socket.create_server((host, int(port)), backlog=128)
    print("relay: ready", flush=True)
    while True:
        client, _ = srv.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.create_connection((thost, int(tport)), timeout=10)
        upstream.settimeout(None)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe(client, upstream, float(delay_ms) / 1000)
        pipe(upstream, client, float(delay_ms) / 1000)


if __name__ == "__main__":
    main(sys.argv[1:])
