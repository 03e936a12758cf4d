"""Console lines of the shipped load profiles (open-loop verdict, per-stage table, sweep knee),
printed under the LLM summary table: one function per profile, each reading the final summary
only; the profiles hand them to the console (``LoadProfile.console_lines``)."""

from __future__ import annotations

from typing import Any


def _ms(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return "-" if v is None else f"{v:.1f}"


def arrivals_lines(summary: dict[str, Any]) -> list[str]:
    """The open-loop line and its verdict."""
    lines: list[str] = []
    a = summary.get("arrivals")
    if a:
        target = (f"{a['rate']:g} req/s" if a.get("rate") else "the trace's" if a.get("trace")
                  else "per stage")
        achieved = "-" if a.get("achieved_rps") is None else f"{a['achieved_rps']:.2f}"
        lines.append(f"open loop ({a['arrival']}, seed {a['seed']}): target {target}, achieved {achieved} req/s; "
                     f"schedule lag p50 {_ms(a['schedule_lag'], 'p50')} / p99 {_ms(a['schedule_lag'], 'p99')} ms; "
                     f"TTFT from schedule p99 {_ms(a['ttft_from_schedule'], 'p99')} ms, "
                     f"E2E from schedule p99 {_ms(a['e2e_from_schedule'], 'p99')} ms")
        lines.append(("WARNING: " if a["cap_reached"] or a["client_behind"] else "") + a["verdict"])
    return lines


def stages_lines(summary: dict[str, Any]) -> list[str]:
    """The per-stage table (a sweep's points too)."""
    lines: list[str] = []
    stages = summary.get("stages")
    if stages:
        kind = "rate" if "rate" in stages[0] else "users"
        lines.append(f"stages (settle window excluded): {kind:>6} {'reqs':>6} {'excl':>5} {'req/s':>8} "
                     f"{'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'E2E p99':>9}")
        for s in stages:
            rps = s.get("requests_per_s")
            lines.append(f"  stage {s['index']:<3}{'':22}{s[kind]:>6g} {s['requests']:>6} {s['excluded']:>5} "
                         f"{'-' if rps is None else f'{rps:.2f}':>8} {_ms(s.get('ttft'), 'p50'):>9} "
                         f"{_ms(s.get('ttft'), 'p99'):>8} {_ms(s.get('tpot'), 'p50'):>9} {_ms(s.get('e2e'), 'p99'):>9}")
    return lines


def sweep_lines(summary: dict[str, Any]) -> list[str]:
    """The sweep's knee."""
    lines: list[str] = []
    sw = summary.get("sweep")
    if sw:
        key = "concurrency" if sw["mode"] == "concurrency" else "rate"
        knee = sw.get("knee")
        if knee:
            lines.append(f"SLO sweep ({sw['mode']}): knee at {key} {knee[key]:g} "
                         f"(goodput {knee.get('goodput_rps') or 0:.2f} req/s, {knee.get('share_meeting_all') or 0:.1%} "
                         f"met the SLOs); {len(sw['points'])} points; stopped: {sw['stopped']}")
        else:
            lines.append(f"SLO sweep ({sw['mode']}): no load met the SLOs; stopped: {sw['stopped']}")
    return lines
