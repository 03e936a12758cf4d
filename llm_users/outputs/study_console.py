"""Console lines of the shipped load profiles (open-loop verdict, per-stage table, sweep points
and knee), printed under the LLM summary table: one function per profile, each reading the final
summary only; the profiles hand them to the console (``LoadProfile.console_lines``). With SLOs,
each stage or sweep point has its goodput and its result (pass, or fail and which SLO failed:
:mod:`.study_slo`), the knee is named, and the overall goodput is printed only labelled as
pooled over different loads. Repeated points (``--llm-repeat``) get a ``ci`` column (the
Student-t 95% interval of req/s over the repeats) and a line saying how it was computed; a
repeated sweep its knee's interval."""

from __future__ import annotations

from typing import Any

from llm_users.outputs.study_slo import (
    kind_of,
    knee_sentence,
    load_label,
    pooled_goodput_text,
    verdicts,
)


def _ms(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return "-" if v is None else f"{v:.1f}"


def trace_text(a: dict[str, Any]) -> str | None:
    """A trace replay in words (summary.json ``arrivals``: ``trace`` and its ``trace_*`` keys):
    ``trace replay of t.jsonl's 30 rows at speed-up 2``; None when the times came from an
    arrival law (its ``arrival`` and ``seed`` then say how; under a trace they decide nothing)."""
    if not a.get("trace"):
        return None
    w = a.get("trace_window")
    window = f" (seconds {w[0]:g} to {'its end' if w[1] is None else f'{w[1]:g}'} of it)" if w else ""
    return (f"trace replay of {a['trace']}'s {a.get('trace_requests')} rows{window} at speed-up "
            f"{a.get('trace_speedup') or 1:g}")


def arrivals_lines(summary: dict[str, Any]) -> list[str]:
    """The open-loop line and its verdict."""
    lines: list[str] = []
    a = summary.get("arrivals")
    if a:
        trace = trace_text(a)
        target = (f"{a['rate']:g} req/s" if a.get("rate") else "the trace's schedule" if trace
                  else "per stage")
        achieved = "-" if a.get("achieved_rps") is None else f"{a['achieved_rps']:.2f}"
        law = trace or f"{a['arrival']}, seed {a['seed']}"
        lines.append(f"open loop ({law}): target {target}, achieved {achieved} req/s; "
                     f"schedule lag p50 {_ms(a['schedule_lag'], 'p50')} / p99 {_ms(a['schedule_lag'], 'p99')} ms; "
                     f"TTFT from schedule p99 {_ms(a['ttft_from_schedule'], 'p99')} ms, "
                     f"E2E from schedule p99 {_ms(a['e2e_from_schedule'], 'p99')} ms")
        lines.append(("WARNING: " if a["cap_reached"] or a["client_behind"] else "") + a["verdict"])
    return lines


def points_table(summary: dict[str, Any], points: list[dict[str, Any]], title: str, word: str = "point") -> list[str]:
    """The per-point table: load, counts, rates, TTFT/TPOT/E2E, and with SLOs the point's
    goodput and its result (pass/fail and which SLO failed; the knee named)."""
    kind = kind_of(points)
    vs = verdicts(summary, points)
    head = (f"{title}: {word:<5} {kind:>11} {'reqs':>6} {'excl':>5} {'req/s':>8} {'TTFT p50':>9} {'p99':>8} "
            f"{'TPOT p50':>9} {'p99':>8} {'E2E p99':>9}")
    repeated = any(s.get("ci") for s in points)
    if repeated:
        head += f" {'ci req/s':>13}"
    if vs:
        head += f" {'goodput':>8}  result"
    lines = [head]
    for i, s in enumerate(points):
        rps = s.get("requests_per_s")
        row = (f"  {'':{len(title)}}{s.get('index', i):<5} {load_label(s, kind):>11} {s['requests']:>6} "
               f"{s['excluded']:>5} {'-' if rps is None else f'{rps:.2f}':>8} {_ms(s.get('ttft'), 'p50'):>9} "
               f"{_ms(s.get('ttft'), 'p99'):>8} {_ms(s.get('tpot'), 'p50'):>9} {_ms(s.get('tpot'), 'p99'):>8} "
               f"{_ms(s.get('e2e'), 'p99'):>9}")
        if repeated:
            row += f" {ci_text((s.get('ci') or {}).get('throughput_rps')):>13}"
        if vs:
            good = (s.get("slo") or {}).get("goodput_rps")
            v = vs[i]
            row += f" {'-' if good is None else f'{good:.2f}':>8}  {v.text}" + ("  <- knee" if v.knee else "")
        lines.append(row)
    if repeated:
        k = max((s.get("ci") or {}).get("repeats", 1) for s in points)
        lines.append(f"  each {word} measured {k} times: its figures pool the repeats; ci = Student-t 95% "
                     f"interval over the repeats' own figures (summary.json: ci, repeats)")
    return lines


def ci_text(ci: dict[str, Any] | None) -> str:
    """``4.41-4.62`` (the interval), the mean alone with one repeat, ``-`` without."""
    if not ci:
        return "-"
    if ci.get("low") is None or ci.get("high") is None:
        return f"{ci['mean']:.2f}"
    return f"{ci['low']:.2f}-{ci['high']:.2f}"


def stages_lines(summary: dict[str, Any]) -> list[str]:
    """The per-stage table with each stage's result when SLOs are given, the knee, and the
    pooled goodput labelled as such (a sweep's points have their own table: :func:`sweep_lines`)."""
    stages = summary.get("stages")
    if not stages or summary.get("sweep"):
        return []
    lines = points_table(summary, stages, "stages (settle window excluded)", "stage")
    knee = knee_sentence(summary, stages)
    if knee:
        lines.append(knee)
    lines += why_lines(summary)
    pooled = pooled_goodput_text(summary)
    if pooled:
        lines.append(f"goodput {pooled}")
    return lines


def why_lines(summary: dict[str, Any]) -> list[str]:
    """The knee's explanation (summary.json ``knee.explanation``: load/explain.py), one line."""
    why = (summary.get("knee") or {}).get("explanation")
    return [f"why the knee: {why}"] if why else []


def sweep_lines(summary: dict[str, Any]) -> list[str]:
    """The sweep's points (each with its result and which SLO failed), its knee, and the
    pooled goodput labelled as such."""
    lines: list[str] = []
    sw = summary.get("sweep")
    if sw:
        key = "concurrency" if sw["mode"] == "concurrency" else "rate"
        if sw.get("points"):
            lines += points_table(summary, sw["points"], "sweep points (settle window excluded)")
        knee = sw.get("knee")
        if knee:
            lines.append(f"SLO sweep ({sw['mode']}): knee at {key} {knee[key]:g} "
                         f"(goodput {knee.get('goodput_rps') or 0:.2f} req/s, {knee.get('share_meeting_all') or 0:.1%} "
                         f"met the SLOs); {len(sw['points'])} points; stopped: {sw['stopped']}")
        else:
            verdict = sw.get("verdict") or "no load met the SLOs"
            stopped = "" if sw["stopped"] in verdict else f"; stopped: {sw['stopped']}"
            lines.append(f"SLO sweep ({sw['mode']}): {verdict}{stopped}")
        lines += why_lines(summary)
        ki = sw.get("knee_interval")
        if ki:
            ends = ["-" if v is None else f"{v:g}" for v in (ki.get("low"), ki.get("high"))]
            lines.append(f"knee interval ({sw.get('repeat')} repeats per point, 95% CI of the share meeting every SLO): "
                         f"{key} {ends[0]} (surely passes) to {ends[1]} (surely fails)")
        if sw.get("max_load"):
            lines.append(str(sw["max_load"]))
        pooled = pooled_goodput_text(summary)
        if pooled:
            lines.append(f"goodput {pooled}")
    return lines
