"""client_overhead's vocabulary and the arithmetic of its settings: where things are, the
clients and start modes, a result row's name, and what a step's settings imply (a request's
length, the measured window, the chunks/s offered, how long the streams take to start, the
calm step)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
VENV_BIN = Path(sys.executable).parent
CLIENTS = ("ours", "fasthttp", "floor", "uvfloor")  # uvfloor: the uvloop floor (bench/floor_uvloop.py)
DEFAULT_CLIENTS = ("ours", "fasthttp", "floor")
START_MODES = ("even", "locust", "locust-off")
BOUNDS_MS = (5.0, 1.0)


def label(r: dict[str, Any]) -> str:
    """A result's row name: the client, and its start mode unless even."""
    start = r.get("start", "even")
    return r["client"] if start == "even" else f"{r['client']}/{start}"


def label_order(name: str) -> tuple[int, int]:
    """Sort key of a row name (``ours``, ``ours/locust``): start mode, then client."""
    client, _, start = name.partition("/")
    return (START_MODES.index(start or "even"), CLIENTS.index(client))


def request_s(args: argparse.Namespace) -> float:
    return (args.ttft_ms + (args.output_tokens - 1) * args.itl_ms) / 1000.0


def window_s(n: int, args: argparse.Namespace) -> float:
    """A step's measured window: --duration, or longer where that would hold fewer than
    --min-first-tokens first tokens (N streams start N / request_s of them a second): a
    "p99.9" of fewer than 1,000 values is the largest or second largest of them, not a
    99.9th percentile."""
    return max(args.duration, args.min_first_tokens * request_s(args) / n) if n else args.duration


def offered_rate(n: int, args: argparse.Namespace) -> float:
    """Chunks/s that N closed-loop streams get from an on-time server: T chunks per TTFT + (T-1) ITL."""
    return n * args.output_tokens / request_s(args)


def start_s(n: int, start: str, args: argparse.Namespace) -> float:
    """How long the streams take to start: the even spread, or Locust's batches (one each
    second, the last one's users then spread over up to 1 s)."""
    return args.spread if start == "even" else math.ceil(n / args.spawn_rate) + 1.0


def calm_step(args: argparse.Namespace) -> int:
    """The step of the CPU-per-chunk comparison: the one whose offered rate is nearest --calm-rate."""
    return min(args.steps, key=lambda n: abs(offered_rate(n, args) - args.calm_rate))
