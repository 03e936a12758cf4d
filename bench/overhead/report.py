"""What a run prints: a line per run and per calm pair, the table of runs, the per-step table,
the summary (capacity, CPU, memory, rounds, targets), and py-spy's samples collapsed into
own and inclusive time per function."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench.overhead.config import CLIENTS, START_MODES, label


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _fl(v: Any) -> str:
    return "[" + ", ".join(_f(x) for x in v) + "]" if isinstance(v, list) else str(v)


def run_line(r: dict[str, Any]) -> str:
    """One run, as it is printed when it ends."""
    return (f"  {label(r):18s} N={r['streams']:4d}: {r['chunks_per_s']:6.0f} chunks/s (offered "
            f"{r['offered_chunks_per_s']:.0f}, sim wrote {r['sim_chunks_per_s']:.0f} at "
            f"{r['sim_cpu_pct']:.0f}% CPU), client CPU {r['client_cpu_pct']:.0f}% = "
            f"{_f(r['cpu_ms_per_1k_chunks'], '{:.1f}')} ms/1k chunks, TTFT error p50/p99/p99.9 "
            f"{_f(r['ttft_err_p50_ms'], '{:.3f}')}/{_f(r['ttft_err_p99_ms'], '{:.3f}')}/"
            f"{_f(r.get('ttft_err_p999_ms'), '{:.3f}')} ms, loop lag max "
            f"{_f(r.get('loop_lag_max_ms'), '{:.1f}')} ms; "
            f"waited for its core {r['client_wait_pct']:.1f}% (others used "
            f"{r['client_core_foreign_pct']:.0f}% of it)")


def pair_line(pr: dict[str, Any]) -> str:
    """One calm pair, as it is printed when it ends."""
    return (f"  pair {pr['round']} N={pr['streams']:4d} ({' first, '.join(pr['order'])} second): ours "
            f"{_f(pr['ours']['cpu_ms_per_1k_chunks'], '{:.1f}')}, floor "
            f"{_f(pr['floor']['cpu_ms_per_1k_chunks'], '{:.1f}')} ms/1k chunks in the same "
            f"{pr['window_s']:.0f} s: ours' excess {_f(pr['excess_ms_per_1k'], '{:.2f}')} ms/1k chunks, "
            f"ratio {_f(pr['ratio'], '{:.3f}')}")


def table(results: list[dict[str, Any]]) -> str:
    head = ("client", "N", "r", "offered/s", "chunks/s", "sim/s", "cpu%", "ms/1k", "KB/strm", "ttft50", "ttft99",
            "ttft999", "itl50", "itl99", "lagmax", "simcpu%", "wait%")
    rows = [head]
    notes = []
    for r in sorted(results, key=lambda r: (r["streams"], START_MODES.index(r.get("start", "even")),
                                            CLIENTS.index(r["client"]), r.get("repeat", 0))):
        mark = "*" if r.get("disturbed") else ""
        rows.append((
            label(r) + mark, str(r["streams"]), str(r.get("repeat", 0)), _f(r["offered_chunks_per_s"], "{:.0f}"),
            _f(r["chunks_per_s"], "{:.0f}"), _f(r["sim_chunks_per_s"], "{:.0f}"), _f(r["client_cpu_pct"], "{:.0f}"),
            _f(r["cpu_ms_per_1k_chunks"], "{:.1f}"), _f(r["rss_per_stream_kb"], "{:.1f}"),
            _f(r["ttft_err_p50_ms"], "{:.3f}"), _f(r["ttft_err_p99_ms"], "{:.3f}"), _f(r.get("ttft_err_p999_ms"), "{:.2f}"),
            _f(r["itl_err_p50_ms"], "{:.3f}"), _f(r["itl_err_p99_ms"], "{:.3f}"), _f(r.get("loop_lag_max_ms"), "{:.1f}"),
            _f(r["sim_cpu_pct"], "{:.0f}"),
            _f(r["client_wait_pct"], "{:.1f}"),
        ))
        if r["sim_short"] or r["sim_saturated"]:
            why = [f"the simulator wrote {r['sim_chunks_per_s']:.0f} chunks/s, "
                   f"{100 * (1 - r['sim_chunks_per_s'] / r['offered_chunks_per_s']):.0f}% short of the offered "
                   f"{r['offered_chunks_per_s']:.0f}"]
            if r["sim_saturated"] or r["sim_late"]:
                verdict = (f"THE SIMULATOR IS THE BOTTLENECK: its core at {r['sim_cpu_pct']:.0f}%, chunk gap p50 "
                           f"{_f(r['sim_gap_p50_ms'])} ms")
            else:
                verdict = ("the simulator kept its pace (chunk gap p50 "
                           f"{_f(r['sim_gap_p50_ms'])} ms, core at {r['sim_cpu_pct']:.0f}%): the client was late "
                           "to read or to send its next request")
            notes.append(f"WARNING {r['client']} N={r['streams']}: {why[0]}; {verdict}")
        if r.get("unmatched") or r.get("chunk_count_mismatch"):
            notes.append(f"note {r['client']} N={r['streams']}: {r['unmatched']} requests not in the trace, "
                         f"{r['chunk_count_mismatch']} with a chunk count unlike the trace's")
        if r.get("disturbed"):
            notes.append(f"* {r['client']} N={r['streams']}: the client waited {r['client_wait_pct']:.1f}% of the "
                         "window for its core (other jobs, hypervisor steal) in every try: its figures are "
                         "pessimistic")
        if r.get("error"):
            notes.append(f"ERROR {r['client']} N={r['streams']}: {r['error'][:300]}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines + notes)


def steps_table(steps: list[dict[str, Any]]) -> str:
    """Per client and step over its repeats: what capacity is decided on."""
    head = ("client", "N", "runs", "chunks/s", "cpu%", "ttft99 med", "[min-max]", "ttft999", "lag99", "lagmax",
            "simcpu%", "late TTFT stamps by cause")
    rows = [head]
    for st in steps:
        causes = ", ".join(f"{c} {k}" for c, k in list(st["late_ttft_causes"].items())[:3])
        rows.append((
            st["client"] + ("*" if st["disturbed_runs"] else ""), str(st["streams"]), str(st["runs"]),
            _f(st["chunks_per_s"], "{:.0f}"), _f(st["client_cpu_pct"], "{:.0f}"),
            _f(st["ttft_err_p99_ms_median"], "{:.3f}"),
            f"[{_f(st['ttft_err_p99_ms_min'], '{:.2f}')}-{_f(st['ttft_err_p99_ms_max'], '{:.2f}')}]",
            _f(st["ttft_err_p999_ms"], "{:.2f}"), _f(st["loop_lag_p99_ms"], "{:.2f}"),
            _f(st["loop_lag_max_ms"], "{:.1f}"),
            _f(st["sim_cpu_pct_max"], "{:.0f}") + ("!" if st["sim_saturated"] or st["sim_late"] else ""), causes,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    if any(st["sim_saturated"] or st["sim_late"] for st in steps):
        lines.append("! THE SIMULATOR IS THE BOTTLENECK at these steps (its core above 85% or its chunk gap p50 "
                     "past the ITL): the client's limit is not what was measured there")
    return "\n".join(lines)


def summary_text(s: dict[str, Any]) -> str:
    out = ["", "per step over the repeats (capacity is decided on the median TTFT error p99):",
           steps_table(s.get("steps") or []),
           "", "sustained capacity (median TTFT error p99 < 5 ms | < 1 ms), CPU at the calm step, memory:"]
    for kind in [*CLIENTS, *sorted(k for k in s["clients"] if k not in CLIENTS)]:
        c = s["clients"].get(kind)
        if not c:
            continue
        parts = []
        for key in ("capacity_5ms", "capacity_1ms"):
            cap = c[key]
            if cap is None:
                parts.append("  none passed        ")
            else:
                flag = " (sim-limited)" if cap["limited_by_sim"] else " (top step)" if cap["at_top_step"] else ""
                parts.append(f"{cap['chunks_per_s']:7.0f}/s N={cap['streams']:<4d}{flag}")
        calm = c["calm_cpu_ms_per_1k_chunks"]
        out.append(f"  {kind:18s} {parts[0]} | {parts[1]} | {_f(calm, '{:.1f}')} ms/1k chunks at "
                   f"{_f(c['calm_chunks_per_s'], '{:.0f}')}/s | {c['rss_per_stream_kb']:.1f} KB/stream "
                   f"(N={c['rss_streams']})")
    rounds = s.get("by_round") or {}
    if len(rounds) > 1:
        out.append("per round (issue 14 asks 3 of 3):")
        for rep, rd in rounds.items():
            caps = ", ".join(f"{k} {c['capacity_5ms']}|{c['capacity_1ms']}" for k, c in rd["capacity"].items())
            met = " ".join(f"{'MET' if t['met'] else 'MISS'} {name}" for name, t in rd["targets"].items())
            out.append(f"  round {rep}: N at 5 ms|1 ms: {caps}; {met}")
    out.append("targets:")
    for name, t in s["targets"].items():
        detail = ", ".join(f"{k}={_f(v) if isinstance(v, float) else _fl(v)}" for k, v in t.items() if k != "met")
        out.append(f"  {'MET ' if t['met'] else 'MISS'} {name}: {detail}")
    return "\n".join(out)


def collapse_report(raw: str, title: str, top: int = 40) -> str:
    """Own and inclusive shares of the main thread's busy samples per function, from py-spy's
    collapsed stacks (``--threads``: the first frame names the thread). Samples whose leaf is
    the hub's loop (waiting in epoll or dispatching) are counted apart: py-spy cannot see
    inside libev, so that is "idle + event-loop C code". Helper threads (our self-check probe)
    are left out: their samples are mostly waits for the one core."""
    by_thread: dict[str, list[tuple[list[str], int]]] = defaultdict(list)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        thread = frames[0] if frames and frames[0].startswith("thread ") else "thread ?"
        frames = [_fname(f) for f in frames if not f.startswith(("process ", "thread "))]
        if frames:
            by_thread[thread].append((frames, int(count)))
    if not by_thread:
        return title + "\npy-spy recorded no samples\n"
    main = max(by_thread, key=lambda t: sum(c for _, c in by_thread[t]))
    others = sum(c for t, rows in by_thread.items() if t != main for _, c in rows)
    own: dict[str, int] = defaultdict(int)
    incl: dict[str, int] = defaultdict(int)
    total = hub = 0
    for frames, c in by_thread[main]:
        total += c
        if frames[-1].startswith(("Hub.run ", "run (gevent/hub.py")):
            hub += c
            continue
        own[frames[-1]] += c
        for fn in set(frames):
            incl[fn] += c
    busy = total - hub
    if not busy:
        return title + "\npy-spy recorded no busy samples\n"
    lines = [title,
             f"main thread: {total} samples, {100 * hub / total:.1f}% of them in the gevent hub loop (epoll wait + "
             f"libev dispatch, C code); shares below are of its other {busy} samples ({others} samples of "
             "helper threads left out)", "",
             "own time (leaf frame; C calls count to their Python caller)"]
    for fn, c in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * c / busy:6.2f}%  {fn}")
    lines += ["", "inclusive time"]
    for fn, c in sorted(incl.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * c / busy:6.2f}%  {fn}")
    return "\n".join(lines) + "\n"


def _fname(frame: str) -> str:
    """py-spy frames read "function (path/to/file.py:123)": keep the function and the file's
    last two path parts."""
    frame = frame.strip()
    name, sep, loc = frame.partition(" (")
    if not sep:
        return frame
    file = loc.rstrip(")").rsplit(":", 1)[0]
    parts = file.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"
