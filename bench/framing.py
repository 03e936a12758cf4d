"""Framing cost per MiB of one long line, fed in 64 KiB pieces (issue 9 item 4).

    .venv/bin/python bench/framing.py

Prints parse time per MiB for a single SSE data line and a single NDJSON line of 1..16 MiB.
Linear framing keeps the figure flat; the old join-and-resplit decoder grew with the size.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.llm_imports import OllamaStreamParser, OpenAIStreamParser  # noqa: E402

PIECE = 65536


def run(make, payload: bytes) -> float:
    best = float("inf")
    for _ in range(3):
        p = make()
        t = time.perf_counter_ns()
        for i in range(0, len(payload), PIECE):
            p.feed(payload[i:i + PIECE])
        best = min(best, time.perf_counter_ns() - t)
    return best / 1e6


def main() -> None:
    print(f"{'MiB':>4} {'SSE ms/MiB':>11} {'NDJSON ms/MiB':>14}")
    for mib in (1, 2, 4, 8, 16):
        text = b"x" * (mib << 20)
        sse = b'data: {"choices":[{"index":0,"delta":{"content":"' + text + b'"}}]}\n\n'
        nd = b'{"message":{"content":"' + text + b'"},"done":false}\n'
        print(f"{mib:>4} {run(OpenAIStreamParser, sse) / mib:>11.2f} {run(OllamaStreamParser, nd) / mib:>14.2f}")


if __name__ == "__main__":
    main()
