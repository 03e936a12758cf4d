"""The LLM summary table printed at test stop (the ``console`` output), with the lines the
load profiles add under it.

The table is the last word of a headless run: Locust prints its own final table (other
counts: warm-up included, "approximated" percentiles) at exit, after the test stopped, so in
a headless run :class:`ConsoleTable` holds its text and prints it on Locust's ``quit`` event,
which Locust fires right after its own table (:func:`hold_until_quit`). A run with the web UI
prints it when the test stops. A percentile from fewer than :data:`MIN_PERCENTILE_SAMPLES`
samples is marked ``*``.
"""

from __future__ import annotations

import atexit
import time
from typing import Any

from llm_users.load.ramp import console_lines as ramp_lines
from llm_users.load.ramp import users_text
from llm_users.load.registry import console_lines
from llm_users.outputs.final import FinalData
from llm_users.outputs.reasoning_view import first_token_metrics, reasoning_line

#: A percentile computed from fewer samples than this is marked ``*`` in the table (a p99
#: from 4 samples is the largest of them, not a tail).
MIN_PERCENTILE_SAMPLES = 20
MARK = "*"

_COLUMNS = [
    ("Name", 28, None),
    ("reqs", 7, ("requests",)),
    ("fails", 6, ("failures",)),
    ("TTFT p50", 9, ("ttft", "p50")),
    ("p90", 8, ("ttft", "p90")),
    ("p99", 8, ("ttft", "p99")),
    ("ITL p50", 8, ("itl", "p50")),
    ("p99", 8, ("itl", "p99")),
    ("TPOT p50", 9, ("tpot", "p50")),
    ("E2E p50", 9, ("e2e", "p50")),
    ("p99", 9, ("e2e", "p99")),
    ("out tok/s", 10, ("output_tokens_per_s",)),
    ("req/s", 7, ("requests_per_s",)),
]


def _number(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def few_samples(stats: dict[str, Any], path: tuple[str, ...]) -> bool:
    """True when ``path`` names a percentile (``("ttft", "p99")``) of a metric with fewer than
    :data:`MIN_PERCENTILE_SAMPLES` samples (its ``count``)."""
    if len(path) != 2 or not path[1].startswith("p"):
        return False
    metric = stats.get(path[0])
    count = metric.get("count") if isinstance(metric, dict) else None
    return count is not None and 0 < count < MIN_PERCENTILE_SAMPLES


def _cell(stats: dict[str, Any], path: tuple[str, ...]) -> str:
    v: Any = stats
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    text = _number(v)
    return text + MARK if v is not None and few_samples(stats, path) else text


def token_line(overall: dict[str, Any]) -> str | None:
    """Tokens per request (p50 and mean, input and output) and the token throughput, or None
    when no request succeeded."""
    inp, out = overall.get("input_tokens_per_request") or {}, overall.get("output_tokens_per_request") or {}
    if inp.get("p50") is None and out.get("p50") is None:
        return None

    def per_request(d: dict[str, Any]) -> str:
        mean = d.get("mean")
        return f"p50 {_number(d.get('p50'))}, mean {mean:.1f}" if mean is not None else "-"

    line = f"tokens per request: input {per_request(inp)}; output {per_request(out)}"
    if overall.get("total_tokens_per_s") is not None:
        line += (f"; throughput {_number(overall.get('output_tokens_per_s'))} output tok/s, "
                 f"{_number(overall['total_tokens_per_s'])} total (input+output) tok/s")
    return line


def tools_line(overall: dict[str, Any]) -> str | None:
    """Tool calls and structured answers (--llm-tools, --llm-response-format), when there were any."""
    calls = overall.get("tool_calls") or 0
    valid, invalid = overall.get("structured_valid") or 0, overall.get("structured_invalid") or 0
    parts = []
    if calls:
        parts.append(f"{calls} of {overall.get('successes') or 0} answers were tool calls")
    if valid or invalid:
        parts.append(f"structured output: {valid} valid, {invalid} invalid ({valid / (valid + invalid):.1%} valid)")
    return "answers: " + "; ".join(parts) if parts else None


def connect_line(overall: dict[str, Any]) -> str | None:
    """A note when more than half the measured requests opened their own connection (the openai
    SDK does for every stream; a server closing after each response): its cost is in no latency
    figure (t0 is after the connect), only in the request rate."""
    opened, requests = overall.get("connections_opened") or 0, overall.get("requests") or 0
    if not requests or opened * 2 <= requests:
        return None
    c = overall.get("connect") or {}
    return (f"{opened} of {requests} requests opened their own connection (connect p50 {c.get('p50') or 0:.2f} ms, "
            f"p99 {c.get('p99') or 0:.2f} ms): before t0, so in no latency figure here, only in the request rate")


#: Columns shown after TTFT's when present (outputs/reasoning_view.py: TTFO only when the run reasoned).
_FIRST_TOKEN_COLUMNS = {"ttfo": [("TTFO p50", 9, ("ttfo", "p50")), ("p99", 8, ("ttfo", "p99"))],
                        "ttst": [("TTST p50", 9, ("ttst", "p50"))]}


def _columns(overall: dict[str, Any]) -> list[tuple[str, int, tuple[str, ...] | None]]:
    extra = [c for m in first_token_metrics(overall) for c in _FIRST_TOKEN_COLUMNS[m]]
    return [*_COLUMNS[:6], *extra, *_COLUMNS[6:]]  # after TTFT p50/p90/p99
def kinds_line(overall: dict[str, Any]) -> str | None:
    """Embeddings and rerank requests: their throughput in inputs and input tokens (None when the
    run sent none). Their latency is the table's E2E (and TTFB): no TTFT, ITL or output tokens."""
    kinds = overall.get("request_kinds") or {}
    if not kinds:
        return None
    e2e = overall.get("e2e") or {}
    counts = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    return (f"embeddings/rerank ({counts} requests): {_number(overall.get('inputs_per_s'))} inputs/s, "
            f"{_number(overall.get('input_tokens_per_s'))} input tok/s, {_number(overall.get('requests_per_s'))} req/s; "
            f"E2E p50 {_number(e2e.get('p50'))} ms, p90 {_number(e2e.get('p90'))} ms, p99 {_number(e2e.get('p99'))} ms")


def counts_line(summary: dict[str, Any]) -> str | None:
    """Why this table's request count is not Locust's (issue 53 item 10), or None when they agree.

    Locust counts every request a user fired its ``request`` event for: each one that ended,
    measured or not (warm-up, cool-down; a cancelled one in its own ``<name> (cancelled)`` row).
    An interrupted request (in flight at the stop) fires none: it is in neither count. So
    Locust's total is this table's requests plus those excluded here, unless Locust's statistics
    were reset during the test (``--reset-stats`` as the spawn completed, the web UI's button)."""
    ov = summary["overall"]
    measured = ov.get("requests") or 0
    parts = [(ov.get(key) or 0, word) for key, word in
             (("excluded_warmup", "warm-up"), ("excluded_cooldown", "cool-down"), ("cancelled", "cancelled"))]
    parts = [(n, word) for n, word in parts if n]
    reset = ("as the spawn completed: --reset-stats" if (summary.get("config") or {}).get("reset_stats")
             else "from the web UI" if (summary.get("window") or {}).get("locust_stats_reset") else None)
    if not parts and reset is None:
        return None
    excluded = " + ".join(f"{n} {word}" for n, word in parts)
    interrupted = ov.get("interrupted") or 0
    neither = f"; the {interrupted} interrupted are in neither" if interrupted else ""
    if reset is not None:
        return (f"requests: {measured} measured here" + (f" ({excluded} excluded)" if parts else "")
                + f"; Locust's table counts only those that ended after its statistics were reset ({reset}), "
                  "measured or not" + neither)
    total = measured + sum(n for n, _ in parts)
    return (f"requests: {measured} measured here; Locust's table counts {total} = {measured} + {excluded} "
            f"(it counts every request that ended; these statistics leave those out){neither}")


def warmup_text(warmup: dict[str, Any], trace: bool = False) -> str:
    """Which requests were warm-up (summary.json ``window.warmup``): the time form, the ramp's, the
    first N per user, as applied (a master's: by its workers), and how many of them failed; in a
    trace replay none by default (``trace``: load/ramp.py warmup_per_user). load/warmup.py."""
    from llm_users.load.warmup import text

    return text(warmup, trace)


def watch_resets(environment: Any, run: Any) -> None:
    """Note in the test's summary (``window.locust_stats_reset``: when, epoch seconds) that
    Locust's statistics were reset mid-test from the web UI (its ``reset_stats`` event; a new test
    starts with none), so :func:`counts_line` claims no total for Locust's table."""
    resets: list[float] = []
    environment.events.test_start.add_listener(lambda **_: resets.clear())
    environment.events.reset_stats.add_listener(lambda **_: resets.append(time.time()))

    def note(summary: dict[str, Any]) -> None:
        if resets:
            summary.setdefault("window", {})["locust_stats_reset"] = resets[-1]

    run.summary_hooks.append(note)


def summary_table(summary: dict[str, Any]) -> str:
    """Per name and aggregated; latencies in ms."""
    columns = _columns(summary["overall"])
    head = " ".join(f"{t:<{w}}" if i == 0 else f"{t:>{w}}" for i, (t, w, _) in enumerate(columns))
    lines = ["LLM summary (latencies in ms; warm-up excluded)", head, "-" * len(head)]
    rows = list(summary["by_name"].items()) + [("Aggregated", summary["overall"])]
    marked = False
    for name, stats in rows:
        cells = [f"{name[:28]:<28}"]
        cells += [f"{_cell(stats, path):>{w}}" for _, w, path in columns[1:] if path]
        marked = marked or any(c.endswith(MARK) for c in cells[1:])
        lines.append(" ".join(cells))
    if marked:
        lines.append(f"{MARK} fewer than {MIN_PERCENTILE_SAMPLES} samples: that percentile is little more than "
                     "one of them")
    counts = counts_line(summary)
    if counts:
        lines.append(counts)
    ov = summary["overall"]
    tokens = token_line(ov)
    if tokens:
        lines.append(tokens)
    reasoning = reasoning_line(ov)
    if reasoning:
        lines.append(reasoning)
    kinds = kinds_line(ov)
    if kinds:
        lines.append(kinds)
    if ov.get("failures_by_category"):
        cats = ", ".join(f"{k}={v}" for k, v in sorted(ov["failures_by_category"].items()))
        lines.append(f"failures by category: {cats}")
    interrupted = ov.get("interrupted") or 0
    kept = summary.get("records_file") is not None  # requests.jsonl is written (--llm-report)
    if interrupted:
        lines += interrupted_lines(interrupted, ov.get("waiting_first_byte") or {}, kept)
    cancelled = ov.get("cancelled") or 0
    if cancelled:
        where = "in requests.jsonl with what was measured until then, " if kept else ""
        lines.append(f"cancelled: {cancelled} requests were abandoned by the client on purpose (--llm-cancel-after; "
                     f"{where}in Locust's table as '<name> (cancelled)'; not failures, not in these statistics)")
    completed = (cancelled + (ov.get("requests") or 0) + (ov.get("excluded_warmup") or 0)
                 + (ov.get("excluded_cooldown") or 0))
    if not completed:
        why = (f"all {interrupted} requests sent were still in flight at the stop (interrupted): a request takes "
               "longer than the run; run longer, or check that the server honours the max-token setting"
               if interrupted else "no request was sent (no users started, or the run ended before any request)")
        lines.append(f"no request completed: {why}")
    for kind, issue in (ov.get("sampling_issues") or {}).items():
        lines.append(f"WARNING: sampling not honoured ({kind}): {issue['requests']} requests; {issue['hint']}")
    answers = tools_line(ov)
    if answers:
        lines.append(answers)
    if ov.get("stale_reconnects"):
        lines.append(f"note: {ov['stale_reconnects']} idle keep-alive connections were found closed by the server "
                     "and replaced before sending (nothing was resent)")
    churn = connect_line(ov)
    if churn:
        lines.append(f"note: {churn}")
    for reason, r in (ov.get("estimated_token_reasons") or {}).items():
        level = "WARNING" if reason == "usage_implausible" else "note"
        lines.append(f"{level}: token counts of {r['requests']} requests are estimates ({reason}): {r['hint']}")
    window = summary.get("window") or {}
    if window.get("measured_s"):
        wu = window.get("warmup") or {}
        how = warmup_text(wu, bool((summary.get("arrivals") or {}).get("trace")))
        users = users_text(window.get("users"))  # the users that ran in the window (load/ramp.py)
        lines.append(f"measured window: {window['measured_s']:.1f} s" + (f" at {users}" if users else "")
                     + f"; warm-up excluded: {ov.get('excluded_warmup', 0)} requests ({how})"
                     + (f"; cool-down excluded: {ov.get('excluded_cooldown')}" if ov.get("excluded_cooldown") else ""))
        lines += ramp_lines(window)  # the target never reached; a ramp over a quarter of the window
    if ov.get("breakdown"):  # the server's own timings: where TTFT goes (metrics/breakdown.py)
        from llm_users.metrics.breakdown import console_line as breakdown_line

        lines.append(breakdown_line(ov["breakdown"]))
    slo = ov.get("slo")
    if slo and not slo.get("pooled_over_loads"):  # a study's: labelled in its lines (study_console)
        share = slo["share_meeting_all"]
        lines.append(f"goodput: {slo['goodput_rps'] or 0:.2f} req/s met every SLO "
                     f"({share:.1%} of requests)" if share is not None else "goodput: no requests")
    if summary.get("cost"):
        from llm_users.outputs.cost import console_line

        lines.append(console_line(summary["cost"]))
    lines += lost_worker_lines(summary.get("workers") or {})
    lines += console_lines(summary)  # the load profiles' (open loop, stages, sweep: outputs/study_console.py)
    backoff = summary.get("backoff") or {}
    retry = retry_after_line(backoff.get("retry_after") or {})
    if retry:
        lines.append(retry)
    honoured = backoff.get("retry_after") or {}
    waits = (backoff.get("waits") or 0) - (honoured.get("honoured") or 0)  # the Retry-After waits have their line
    if waits > 0:
        wait_s = (backoff.get("wait_s") or 0.0) - (honoured.get("waited_s") or 0.0)
        lines.append(f"backoff: users waited {waits} times ({wait_s:.1f} s in all) after repeated identical "
                     "failures (connect errors, 4xx, empty answers, in-stream errors, cuts at one point), so as not to flood (--llm-backoff off disables it)")
    if summary.get("outages"):  # the server could not be reached, and when it was back (metrics/outages.py)
        from llm_users.metrics.outages import console_line as outage_line

        t0 = (summary.get("window") or {}).get("test_start")
        lines += [outage_line(o, t0) for o in summary["outages"]]
    check = summary.get("self_check")
    if check:  # one line: the verdict's one sentence (health/verdict.py); the details are in summary.json
        lines.append(f"self-check: {check['message']}")
    return "\n".join(lines)


class ConsoleTable:
    """The ``console`` output: the table and its lines, printed whether or not there is a report;
    held until Locust's ``quit`` while :func:`hold_until_quit` is in force (headless runs)."""

    name = "console"

    def __init__(self) -> None:
        self.hold = False
        self.pending: list[str] = []

    def write(self, final: FinalData, directory: str | None) -> None:
        self.say(summary_table(final.summary))

    def say(self, text: str) -> None:
        """Print ``text`` now, or after the table when the table is held (the closing lines)."""
        if self.hold:
            self.pending.append(text)
        else:
            print(text, flush=True)

    def flush(self, **_: Any) -> None:
        """Print what was held (once); what comes after prints at once."""
        self.hold = False
        pending, self.pending = self.pending, []
        for text in pending:
            print(text, flush=True)


_hooked: set[int] = set()


def hold_until_quit(events: Any) -> None:
    """Headless: print the table after Locust's own final table, on ``quit`` (Locust fires it
    right after printing that table); at exit should ``quit`` never fire."""
    CONSOLE.hold = True
    if id(events) not in _hooked:
        _hooked.add(id(events))
        events.quit.add_listener(CONSOLE.flush)
        if len(_hooked) == 1:
            atexit.register(CONSOLE.flush)


CONSOLE = ConsoleTable()


def lost_worker_lines(workers: dict[str, Any]) -> list[str]:
    """A line per lost worker (what it took with it), and the exit code's reason."""
    lines = []
    for lost in workers.get("lost", []):
        n = lost.get("in_flight_at_last_report") or 0
        unrecorded = f"{n} requests it had in flight at its last report have no record; " if n else ""
        lines.append(f"WARNING: worker {lost['worker']} was lost: {unrecorded}up to {lost['window_at_risk_s']:.1f} s "
                     f"of its data may be missing")
    if workers.get("lost") and not workers.get("loss_allowed"):
        lines.append("exit 1: a worker was lost, so these figures miss part of the load (--llm-allow-worker-loss "
                     "accepts such a run)")
    return lines


def interrupted_lines(interrupted: int, waiting: dict[str, Any], kept: bool = True) -> list[str]:
    """The requests in flight at the stop: streams cut mid-answer, and those the server had
    not answered at all (no first byte), named apart with how long they waited; ``kept``:
    requests.jsonl holds them (a run with ``--llm-report``)."""
    unanswered = waiting.get("count") or 0
    cut = interrupted - unanswered
    parts = [f"{cut} cut mid-answer"] if cut else []
    if unanswered:
        parts.append(f"{unanswered} still waiting for a first byte")
    where = "kept in requests.jsonl with their TTFB/TTFT so far; " if kept else ""
    lines = [f"interrupted: {interrupted} requests were in flight when the run stopped ({', '.join(parts)}; "
             f"{where}not in these statistics)"]
    if unanswered:
        lines.append(f"WARNING: {unanswered} requests never got a first byte: the server accepted them and had not "
                     f"answered when the run stopped (waited p50 {fmt_s(waiting.get('p50'))}, max "
                     f"{fmt_s(waiting.get('max'))}); they are in no latency figure (--llm-first-byte-timeout "
                     "limits the wait)")
    return lines


def fmt_s(ms: float | None) -> str:
    """Milliseconds as the console writes a wait: '850 ms', '12.3 s'."""
    if ms is None:
        return "-"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def retry_after_line(retry: dict[str, Any]) -> str | None:
    """The 429/503 answers that asked for a wait (``Retry-After``), and what the users did."""
    n = retry.get("answers") or 0
    if not n:
        return None
    asked = f"{n} answers (429/503) asked the client to wait (Retry-After, up to {retry['asked_max_s']:g} s)"
    honoured = retry.get("honoured") or 0
    if honoured:
        return (f"retry-after: {asked}; users waited {honoured} times, {retry['waited_s']:.1f} s in all (at most "
                f"{retry['cap_s']:g} s each)")
    return (f"retry-after: {asked}; no user waited (open loop keeps its schedule, or --llm-backoff off): the "
            "offered load went on")
