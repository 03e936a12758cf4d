"""Slopes of a soak's memory probe: which allocator a master's RSS growth is in.

    .venv/bin/python bench/soak.py --locustfile bench/soak_probe_locustfile.py --out DIR
    .venv/bin/python bench/soak_probe.py DIR/probe --warmup 15m [--end 2h] [--json OUT]

For each probed process (``<run>-<pid>.jsonl``, bench/soak_probe_locustfile.py) and each figure
of ``bench/lib/allocator.components_mb`` (VmRSS, RssAnon and RssFile, glibc's main arena and the
anonymous maps, pymalloc's and glibc's live and kept bytes): its value at the warm-up's end and
at ``--end`` (the plan's end; the reports after it are not judged), and the Theil-Sen slope in
MB per hour between them, as bench/soak.py judges RSS.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.allocator import components_mb  # noqa: E402
from bench.lib.llm_imports import parse_duration_s  # noqa: E402
from bench.lib.soak_verdict import theil_sen  # noqa: E402


def read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def breakdown(rows: list[dict[str, Any]], warmup_s: float, end_s: float) -> dict[str, dict[str, float]]:
    """Per figure: ``first``, ``last`` (MB) and ``slope_mb_per_h`` over warmup_s..end_s."""
    kept = [r for r in rows if warmup_s <= r["t"] <= end_s]
    if len(kept) < 2:
        raise SystemExit(f"soak_probe: {len(kept)} samples between {warmup_s:g} s and {end_s:g} s: "
                         "too few for a slope (a longer soak, or a shorter --warmup)")
    series: dict[str, list[tuple[float, float]]] = {}
    for r in kept:
        for name, mb in components_mb(r).items():
            series.setdefault(name, []).append((r["t"] / 3600, mb))
    return {name: {"first": pts[0][1], "last": pts[-1][1], "slope_mb_per_h": theil_sen(pts)}
            for name, pts in series.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="the probe's directory (DIR/probe of bench/soak.py --out DIR)")
    ap.add_argument("--warmup", default="15m", help="left out, as bench/soak.py's --warmup (default 15m)")
    ap.add_argument("--end", default="2h", help="samples after this are left out (default 2h: the soak's plan)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    files = sorted(args.dir.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"soak_probe: no <run>-<pid>.jsonl in {args.dir}")
    warmup_s, end_s = parse_duration_s(args.warmup, "--warmup"), parse_duration_s(args.end, "--end")
    out = {}
    for path in files:
        figures = out[path.stem] = breakdown(read_rows(path), warmup_s, end_s)
        print(f"{path.stem}  ({args.warmup} to {args.end})")
        for name, f in figures.items():
            print(f"  {name:38s} {f['first']:8.2f} -> {f['last']:8.2f}  {f['slope_mb_per_h']:+7.3f} /h")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
