"""Test helpers: run a real locust process, read its outputs, talk to the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get_json(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def run_locust(
    locustfile: str,
    *args: str,
    report: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    csv_prefix: Path | None = None,
    only_summary: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a real `locust` process headless from the project root (``only_summary=False``:
    with Locust's stats table every 2 s on stderr)."""
    cmd = [LOCUST, "-f", str(ROOT / "locustfiles" / locustfile), "--headless",
           *(["--only-summary"] if only_summary else []), "--loglevel", "WARNING", *args]
    if report is not None:
        cmd += ["--llm-report", str(report)]
    if csv_prefix is not None:  # Locust's final stats, written at exit (its CSV is periodic)
        cmd += ["--json-file", str(csv_prefix)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def read_records(report: Path) -> list[dict[str, Any]]:
    with (report / "requests.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


def read_summary(report: Path) -> dict[str, Any]:
    return json.loads((report / "summary.json").read_text())


def locust_request_count(prefix: Path) -> int:
    """Locust's own request count, from the stats it saved with --json-file at exit."""
    entries = json.loads(Path(f"{prefix}.json").read_text())
    return sum(int(e["num_requests"]) for e in entries)


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
