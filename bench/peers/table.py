"""The peer table from one ``bench/peers/run.sh`` results folder: per tool and stream count,
the tool's own TTFT p50 (read from its own output file) minus the server's true TTFT, the
chunks/s the server wrote (its ``chunks`` counter) of what an on-time closed loop is offered,
and the CPU per chunk of the tool's whole process tree over the steady part of the run (from
``measure.py``'s /proc samples).

    python bench/peers/table.py bench/results/peers/<run> [--ttft-ms 50] [--json out.json]

How each tool defines its figures (from their docs and sources, the versions pinned in
install.sh):

- locust-llm: TTFT = first token-bearing chunk's arrival minus the request's send (connection
  set-up excluded on a kept-alive connection), stamped per read; ITL = gaps between
  token-bearing chunks. From report/summary.json ``overall.ttft.p50``.
- AIPerf: ``time_to_first_token`` = first response chunk with content minus the request's
  start, ms; ``inter_token_latency`` = (request latency - TTFT) / (output tokens - 1), per
  request (a mean per request, not per gap); ``inter_chunk_latency`` = per-gap.
  From artifacts/profile_export_aiperf.json.
- GuideLLM: ``time_to_first_token_ms`` = first token iteration minus the request's start;
  ``inter_token_latency_ms`` = (last token - first token) / (output tokens - 1), per request.
  From benchmarks.json ``benchmarks[0].metrics.time_to_first_token_ms.successful``.
- inference-perf: TTFT and ITL from its per-request lifecycle report, when it gives them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def steady(samples: list[list[float]], request_s: float = 4.03, duration_s: float | None = None) -> dict[str, float] | None:
    """Chunks/s and CPU per chunk over the steady part of a run: from one request's length plus
    1 s after the server's first chunk (every stream has started, however the tool spreads its
    starts) to 1 s before the tool's nominal end (first chunk + --duration; without it, 1 s
    before the last chunk), so neither the ramp nor the drain of requests in flight counts.
    When that leaves under 2 s, the whole streaming span."""
    moving = [i for i in range(1, len(samples)) if samples[i][2] > samples[i - 1][2]]
    if len(moving) < 2:
        return None
    t_first, t_last = samples[moving[0] - 1][0], samples[moving[-1]][0]
    end = t_last - 1.0 if duration_s is None else min(t_last, t_first + duration_s) - 1.0
    a = next((s for s in samples if s[0] >= t_first + request_s + 1.0), None)
    b = next((s for s in reversed(samples) if s[0] <= end), None)
    if a is None or b is None or b[0] - a[0] < 2.0:
        a, b = samples[moving[0] - 1], samples[moving[-1]]
    dt, dc, dn = b[0] - a[0], b[1] - a[1], b[2] - a[2]
    if dt <= 0 or dn <= 0:
        return None
    return {"window_s": dt, "chunks_per_s": dn / dt, "cpu_pct": 100.0 * dc / dt, "cpu_us_per_chunk": 1e6 * dc / dn}


def tool_figures(tool: str, d: Path) -> dict[str, Any]:
    """TTFT and ITL p50 (ms) from the tool's own output file."""
    try:
        if tool == "aiperf":
            doc = json.loads((d / "artifacts" / "profile_export_aiperf.json").read_text())
            return {"ttft_p50_ms": doc["time_to_first_token"]["p50"], "itl_p50_ms": doc["inter_token_latency"]["p50"],
                    "requests": doc.get("request_count", {}).get("avg")}
        if tool == "guidellm":
            m = json.loads((d / "benchmarks.json").read_text())["benchmarks"][0]["metrics"]
            t, i = m["time_to_first_token_ms"]["successful"], m["inter_token_latency_ms"]["successful"]
            return {"ttft_p50_ms": t["percentiles"]["p50"], "itl_p50_ms": i["percentiles"]["p50"],
                    "requests": t["count"]}
        if tool == "locust-llm":
            o = json.loads((d / "report" / "summary.json").read_text())["overall"]
            return {"ttft_p50_ms": o["ttft"]["p50"], "itl_p50_ms": o["itl"]["p50"], "requests": o["requests"]}
        if tool == "inference-perf":
            return inference_perf_figures(d)
    except (OSError, KeyError, IndexError, TypeError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"error": f"unknown tool {tool}"}


def inference_perf_figures(d: Path) -> dict[str, Any]:
    """inference-perf writes summary_lifecycle_metrics.json under its report folder (seconds)."""
    for f in sorted(d.rglob("summary_lifecycle_metrics.json")):
        doc = json.loads(f.read_text())
        succ = doc.get("successes", doc)
        lat = succ.get("latency", {})
        ttft, itl = lat.get("time_to_first_token") or {}, lat.get("inter_token_latency") or {}
        p50 = ttft.get("median", ttft.get("p50"))
        ip50 = itl.get("median", itl.get("p50"))
        return {"ttft_p50_ms": p50 * 1000.0 if p50 is not None else None,
                "itl_p50_ms": ip50 * 1000.0 if ip50 is not None else None, "requests": succ.get("count")}
    return {"error": "no summary_lifecycle_metrics.json"}


def rows(folder: Path, ttft_ms: float) -> list[dict[str, Any]]:
    out = []
    for mpath in sorted(folder.glob("*/measure.json")):
        m = json.loads(mpath.read_text())
        r: dict[str, Any] = {"tool": m["tool"], "streams": m["streams"], "offered_chunks_per_s": m["offered_chunks_per_s"],
                             "exit_code": m["exit_code"], "total_cpu_s": m.get("total_cpu_s")}
        r.update(tool_figures(m["tool"], mpath.parent))
        st = steady(m["samples"], m.get("request_s", 4.03), m.get("duration_s"))
        if st:
            r.update(st)
            r["achieved_pct"] = 100.0 * st["chunks_per_s"] / m["offered_chunks_per_s"]
        if r.get("ttft_p50_ms") is not None:
            r["ttft_p50_error_ms"] = r["ttft_p50_ms"] - ttft_ms
        out.append(r)
    order = {"locust-llm": 0, "aiperf": 1, "guidellm": 2, "inference-perf": 3}
    return sorted(out, key=lambda r: (r["streams"], order.get(r["tool"], 9), r["tool"]))


def table(rs: list[dict[str, Any]]) -> str:
    def f(x: Any, fmt: str) -> str:
        return "-" if x is None else fmt.format(x)

    lines = ["| streams | tool | TTFT p50 error | chunks/s achieved of offered | CPU per chunk (steady) | CPU % of the core |",
             "|---|---|---|---|---|---|"]
    for r in rs:
        note = f" ({r['error']})" if r.get("error") else ""
        lines.append(f"| {r['streams']} | {r['tool']}{note} | {f(r.get('ttft_p50_error_ms'), '{:+.1f} ms')} | "
                     f"{f(r.get('achieved_pct'), '{:.1f}%')} ({f(r.get('chunks_per_s'), '{:.0f}')} of "
                     f"{r['offered_chunks_per_s']:.0f}/s) | {f(r.get('cpu_us_per_chunk'), '{:.0f} µs')} | "
                     f"{f(r.get('cpu_pct'), '{:.0f}%')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--ttft-ms", type=float, default=50.0, help="the server's true TTFT (its --ttft-ms)")
    ap.add_argument("--json", help="also write the rows here (default FOLDER/table.json)")
    a = ap.parse_args(argv)
    folder = Path(a.folder)
    if not folder.is_dir():
        print(f"locust-llm: {folder} is not a bench/peers/run.sh results folder", file=sys.stderr)
        return 2
    rs = rows(folder, a.ttft_ms)
    Path(a.json or folder / "table.json").write_text(json.dumps(rs, indent=1))
    print(table(rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
