"""``--ceiling``: step the stream count up until each client breaks its 1 ms and 5 ms
stamp-error bounds (p99), one series per ITL (``--ceiling-itl``, default 20 and 5 ms) and,
with ``--long-output T``, a series of T-token outputs at the first ITL (per-chunk cost must not
grow with output length).

A series restarts the simulator with its ITL and output length. Each client then runs
``--ceiling-start`` streams, then x ``--ceiling-factor`` (rounded up to 10) until a step breaks
the 5 ms bound (which breaks the 1 ms bound too), delivers under 95 % of the offered chunks,
finds the simulator's core saturated, or passes ``--ceiling-max``. The bound is read on the TTFT
error p99 (client first-token stamp minus the simulator's write stamp); in a long-output
series, where a window holds few first tokens, on the p99 of every chunk's stamp delay (the
same error, taken over all chunks). A step that breaks a bound not yet broken is run once more
at once (``--ceiling-confirm``, the default, for every client alike): it breaks the bound only
if both runs do, so one noisy window on a shared machine does not set a ceiling (ceiling run 4:
one 1.31 ms step among steps under 1 ms up to 480 streams). ``ceiling_entries`` (pure: tested)
turns the runs into the ``ceiling[]`` entries of the results file."""

from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path
from typing import Any

from bench.overhead.config import BOUNDS_MS, offered_rate, request_s
from bench.overhead.report import run_line
from bench.overhead.runs import run_measured
from bench.overhead.simulator import Simulator

LONG_SPREAD_S = 2.56  # a long series spreads its first requests over this (not one 80 s request)


def series_list(args: argparse.Namespace) -> list[tuple[float, int]]:
    """(itl_ms, output_tokens) of every series: each --ceiling-itl at --output-tokens, then the
    long-output series at the first ITL."""
    out = [(itl, args.output_tokens) for itl in args.ceiling_itl]
    if args.long_output:
        out.append((args.ceiling_itl[0], args.long_output))
    return out


def series_args(args: argparse.Namespace, itl_ms: float, tokens: int) -> argparse.Namespace:
    a = copy.copy(args)
    a.itl_ms, a.output_tokens = itl_ms, tokens
    if tokens > args.output_tokens:  # long outputs: few first tokens per window, a short spread
        a.min_first_tokens = 0
        a.spread = min(request_s(a), LONG_SPREAD_S)
    else:
        a.spread = round(request_s(a), 3)
    return a


def step_error_ms(r: dict[str, Any], long: bool) -> float | None:
    """The figure a step is judged on: TTFT error p99, or every chunk's delay p99 in a long series."""
    return r.get("chunk_delay_p99_ms") if long else r.get("ttft_err_p99_ms")


def broke(r: dict[str, Any], long: bool, bound_ms: float) -> bool:
    err = step_error_ms(r, long)
    short = r.get("chunks_per_s", 0.0) < 0.95 * r.get("offered_chunks_per_s", 0.0)
    return err is None or err >= bound_ms or short or bool(r.get("error"))


def step_broke(runs: list[dict[str, Any]], long: bool, bound_ms: float) -> bool:
    """A step (its run and, where it was confirmed, the run again) broke a bound if every run did."""
    return all(broke(r, long, bound_ms) for r in runs)


def next_step(n: int, factor: float) -> int:
    return max(n + 10, int(math.ceil(n * factor / 10.0)) * 10)


def run_ceiling(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Every series, every client, stepped up until it breaks; the runs, tagged with their series."""
    results: list[dict[str, Any]] = []
    for itl_ms, tokens in series_list(args):
        a = series_args(args, itl_ms, tokens)
        long = tokens > args.output_tokens
        sim = Simulator(a, args.ceiling_max)
        print(f"ceiling series: ITL {itl_ms:g} ms, {tokens} tokens, simulator {sim.url}", flush=True)
        try:
            for kind in args.clients:
                n, broken = args.ceiling_start, set()  # the bounds a confirmed step broke
                while n <= args.ceiling_max:
                    step = []
                    while True:
                        r = run_measured(kind, n, sim, a, tmp, f"ceil-{kind}-{itl_ms:g}-{tokens}-{n}-{len(step)}")
                        r.update({"repeat": len(step), "ceiling": True, "itl_ms": itl_ms, "ttft_ms": a.ttft_ms,
                                  "output_tokens": tokens, "long_output": long, "step_error_p99_ms": step_error_ms(r, long)})
                        results.append(r)
                        step.append(r)
                        print(run_line(r), flush=True)
                        if len(step) > 1 or not args.ceiling_confirm or r.get("sim_saturated") or r.get("error"):
                            break
                        if not any(broke(r, long, b) for b in BOUNDS_MS if b not in broken):
                            break
                    broken |= {b for b in BOUNDS_MS if step_broke(step, long, b)}
                    if BOUNDS_MS[0] in broken or any(x.get("sim_saturated") for x in step):
                        break
                    n = next_step(n, args.ceiling_factor)
        finally:
            sim.stop()
    return results


def ceiling_entries(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per client and series: the largest step under each bound (before the first step that broke
    it), its chunks/s and CPU per 1,000 chunks, the step that broke 5 ms, and what stopped it."""
    groups: dict[tuple[str, float, int], list[dict[str, Any]]] = {}
    for r in results:
        if r.get("ceiling"):
            groups.setdefault((r["client"], r["itl_ms"], r["output_tokens"]), []).append(r)
    out = []
    for (client, itl_ms, tokens), rs in groups.items():
        rs = sorted(rs, key=lambda r: (r["streams"], r.get("repeat", 0)))
        steps: dict[int, list[dict[str, Any]]] = {}
        for r in rs:
            steps.setdefault(r["streams"], []).append(r)
        long = bool(rs[0].get("long_output"))
        e: dict[str, Any] = {"client": client, "itl_ms": itl_ms, "output_tokens": tokens,
                             "bound_on": "chunk_delay_p99_ms" if long else "ttft_err_p99_ms"}
        for bound, tag in ((BOUNDS_MS[1], "1ms"), (BOUNDS_MS[0], "5ms")):
            ok = None
            for runs in steps.values():
                if step_broke(runs, long, bound):
                    break
                ok = next(r for r in runs if not broke(r, long, bound))
            e[f"streams_{tag}"] = ok["streams"] if ok else 0
            e[f"chunks_per_s_{tag}"] = round(ok["chunks_per_s"], 1) if ok else 0.0
            e[f"cpu_ms_per_1k_chunks_{tag}"] = ok.get("cpu_ms_per_1k_chunks") if ok else None
            e[f"client_cpu_pct_{tag}"] = ok.get("client_cpu_pct") if ok else None
        last = steps[rs[-1]["streams"]]
        e["broke_5ms_at"] = last[0]["streams"] if step_broke(last, long, BOUNDS_MS[0]) else None
        e["stopped_by"] = ("5 ms bound" if e["broke_5ms_at"] is not None else
                           "simulator saturated" if any(r.get("sim_saturated") for r in last) else "--ceiling-max")
        e["confirmed_steps"] = sum(len(runs) > 1 for runs in steps.values())
        e["steps"] = [{"streams": r["streams"], "repeat": r.get("repeat", 0), "chunks_per_s": round(r["chunks_per_s"], 1),
                       "offered_chunks_per_s": round(offered_rate(r["streams"], _ns(itl_ms, tokens, r)), 1),
                       "error_p99_ms": step_error_ms(r, long), "cpu_ms_per_1k_chunks": r.get("cpu_ms_per_1k_chunks"),
                       "client_cpu_pct": r.get("client_cpu_pct"), "sim_cpu_pct": r.get("sim_cpu_pct")} for r in rs]
        out.append(e)
    return out


def _ns(itl_ms: float, tokens: int, r: dict[str, Any]) -> argparse.Namespace:
    return argparse.Namespace(itl_ms=itl_ms, output_tokens=tokens, ttft_ms=r.get("ttft_ms", 20.0))


def ceiling_table(entries: list[dict[str, Any]]) -> str:
    head = (f"{'client':9s} {'ITL':>4s} {'tokens':>6s} {'N<1ms':>6s} {'chunks/s<1ms':>12s} {'ms/1k':>6s} "
            f"{'N<5ms':>6s} {'chunks/s<5ms':>12s} {'ms/1k':>6s}  stopped by")
    lines = ["ceiling (largest step under each bound; ms/1k: client CPU per 1,000 chunks there):", head,
             "-" * len(head)]
    for e in entries:
        def f(x: Any, fmt: str = "{:.1f}") -> str:
            return "-" if x is None else fmt.format(x)
        lines.append(f"{e['client']:9s} {e['itl_ms']:4g} {e['output_tokens']:6d} {e['streams_1ms']:6d} "
                     f"{e['chunks_per_s_1ms']:12.0f} {f(e['cpu_ms_per_1k_chunks_1ms']):>6s} {e['streams_5ms']:6d} "
                     f"{e['chunks_per_s_5ms']:12.0f} {f(e['cpu_ms_per_1k_chunks_5ms']):>6s}  {e['stopped_by']}"
                     f"{' (' + str(e['broke_5ms_at']) + ')' if e['broke_5ms_at'] else ''}")
    return "\n".join(lines)
