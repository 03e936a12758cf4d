"""The first screen of report.html, its header: what ran, when, for how long, against what
(backend, model, server and its version), with which load plan (users and spawn rate, the
stages, the sweep, the open-loop rate and arrival law, the trace; for a plain run, the users that
ran in the measured window beside it), which requests (prompt and output lengths or the
dataset, max tokens) and which SLOs; each said once. It reads summary.json's
``setup`` block (:mod:`.setup`), with the ``environment`` and ``config`` blocks where an older
summary has no ``setup``.

Also the rule for the last second: a run stops mid-second, so the timeline's last row covers
only part of a second and would be drawn as a throughput dip; :func:`complete_rows` leaves it
out of per-second rates.
"""

from __future__ import annotations

import html
import time
from typing import Any

from llm_users.load.ramp import NOTE_SHARE, users_text
from llm_users.outputs.html_base import fmt as _fmt


def complete_rows(rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``rows`` without a last second that the run did not cover whole."""
    stop = (summary.get("window") or {}).get("test_stop")
    if rows and stop is not None and rows[-1]["time"] + 1 > stop:
        return rows[:-1]
    return rows


def _when(t: float | None) -> str:
    if not t:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _users_plan(opts: dict[str, Any]) -> str:
    """An older summary's load: users and spawn rate from the options."""
    users, rate = opts.get("num_users"), opts.get("spawn_rate")
    load = f"{users} users" if users is not None else "-"
    if rate is not None:
        load += f", spawned at {rate:g}/s" if isinstance(rate, int | float) else f", spawn rate {rate}"
    return load


def _workload(setup: dict[str, Any]) -> str:
    parts = []
    if setup.get("input_tokens") is not None:
        parts.append(f"synthetic prompts of {setup['input_tokens']} input tokens")
    elif setup.get("dataset"):
        parts.append(f"dataset {setup['dataset']}")
    if setup.get("prefix_tokens"):
        parts.append(f"shared prefix {setup['prefix_tokens']} tokens")
    if setup.get("output_tokens") is not None:
        parts.append(f"{setup['output_tokens']} output tokens")
    else:
        parts.append("output up to max tokens" if setup.get("ignore_eos") else "output until the model stops")
    if setup.get("turns"):
        parts.append(f"{setup['turns']} turns per conversation")
    return "; ".join(parts) or "-"


def _sampling(setup: dict[str, Any]) -> str:
    if setup.get("max_tokens") is None:
        return "-"
    text = str(setup["max_tokens"])
    extras = []
    if setup.get("temperature") is not None:
        extras.append(f"temperature {setup['temperature']}")
    if setup.get("ignore_eos") is not None:
        extras.append(f"ignore_eos {'on' if setup['ignore_eos'] is True else setup['ignore_eos']}")
    return text + (f" ({', '.join(extras)})" if extras else "")


def _slos(setup: dict[str, Any], summary: dict[str, Any]) -> str:
    limits = setup.get("slos_ms") or ((summary["overall"].get("slo") or {}).get("limits_ms")) or {}
    return ", ".join(f"{k.upper()} ≤ {v:g} ms" for k, v in limits.items()) or "none given (--llm-slo)"


def _server(env: dict[str, Any]) -> str:
    server = env.get("server") or {}
    return " ".join(x for x in (server.get("server_header"), server.get("model_id"),
                                server.get("model_file") and f"[{server['model_file']}]",
                                server.get("version") and f"(version {server['version']})") if x) or "-"


def cells(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The header's rows: (label, text)."""
    env = summary.get("environment") or {}
    setup = summary.get("setup") or {}
    opts = env.get("options") or summary.get("config") or {}
    w = summary.get("window") or {}
    start, stop = w.get("test_start"), w.get("test_stop")
    duration = (stop - start) if start and stop else None
    bm = env.get("backends_models") or []
    backends = ", ".join(sorted({b["backend"] for b in bm})) or setup.get("backend") or "-"
    models = ", ".join(sorted({str(b["model"]) for b in bm})) or setup.get("model") or \
        (env.get("server") or {}).get("model_id") or "-"
    locustfile = opts.get("locustfile") or "-"
    if isinstance(locustfile, list):
        locustfile = ", ".join(map(str, locustfile))
    plan = (setup.get("load_plan") or {}).get("text") or _users_plan(opts)
    ov = summary["overall"]
    return [
        ("Date", _when(start)),
        ("Duration", f"{_fmt(duration)} s; measured window {_fmt(w.get('measured_s'))} s "
                     f"(warm-up excluded {ov.get('excluded_warmup', 0)} requests)"),
        ("Host", str(summary.get("host"))), ("Backend", str(backends)), ("Model", str(models)),
        ("Server", _server(env)), ("Locustfile", str(locustfile)),
        ("Load plan", plan + _measured_users(w)), ("Workload", _workload(setup) if setup else "-"),
        ("Max tokens", _sampling(setup)), ("SLOs", _slos(setup, summary)),
        ("Requests", f"{ov['requests']} measured, {ov['failures']} failed"
                     + (f", {ov['cancelled']} cancelled by the client (--llm-cancel-after; not in the statistics)"
                        if ov.get("cancelled") else "")),
    ] + ([("Outages", _outages(summary))] if summary.get("outages") else [])


def _measured_users(window: dict[str, Any]) -> str:
    """The users that ran in the measured window beside the plan (summary.json ``window.users``)."""
    users = window.get("users") or {}
    text = users_text(users)
    if text is None:
        return ""
    if users.get("reached") is False:
        text += f"; the target of {users['target']} users was never reached (raise -r or -t)"
    elif (users.get("ramp_share") or 0) > NOTE_SHARE:
        text += f"; the ramp to {users['target']} users took {users['ramp_share']:.0%} of the window"
    return f" (measured at {text})"


def _outages(summary: dict[str, Any]) -> str:
    """Each outage's line (metrics/outages.py), shaded on the charts over time."""
    from llm_users.metrics.outages import console_line

    t0 = (summary.get("window") or {}).get("test_start")
    return "; ".join(console_line(o, t0) for o in summary["outages"])


def header(summary: dict[str, Any]) -> str:
    """The header table."""
    return "<table class='first'>" + "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in cells(summary)) + "</table>"
