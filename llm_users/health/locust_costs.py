"""Three costs Locust itself adds to a long or loaded run, taken off: memory that grows every
second, most of a second of a worker's loop at every spawn message, and a whole test stopped
because every worker was silent for 3 s. :func:`tune_locust` applies what a role needs.

**Per-second counters.** Each Locust ``StatsEntry`` counts requests and failures per whole
second (``num_reqs_per_sec``, ``num_fail_per_sec``) for its current RPS, which reads the last
dozen seconds (``current_rps``, ``current_fail_per_sec``). The dicts are never trimmed: a master
merges every worker report's seconds into them, so each entry (every request name, the total)
grew by 100-150 bytes a second for the whole run (bench/soak.py, issue 33). Totals and the
run's RPS come from the entries' counts and timestamps, not from these dicts:
:func:`trim_per_second` keeps the last :data:`KEEP_S` seconds. A master or local runner also
appends a chart point to ``stats.history`` every 5 s (about 1 kB each: 0.73 MB an hour), read
only by Locust's web UI and its ``--html`` report; without either, the last
:data:`HISTORY_KEPT` are kept.

**Spawn messages.** Locust's ``WorkerRunner`` (locust/runners.py, ``case "spawn"``) keeps the
master's custom options with ``k not in argument_parser.default_args_dict()`` inside a
comprehension over every option the master sent: a whole argument parser is built and parsed
for each one (6 ms on this project's VMs, about 115 options with ours: 0.7 s), with the
worker's event loop held the whole time. Every spawn message does it: each stage or sweep
point, every re-admission of a worker, the stop of a stage to 0 users. Streams in flight on
that worker were stamped up to 0.8 s late (loop lag p99 570 ms in a 2-minute SDK-mode stage
run, ITL p99 584 ms against a 40 ms pace), and the parsers' cycles were left for the
collector. The defaults do not change within a process (Locust's own options before any
custom one is added), so :func:`cache_default_args` wraps the function once: built on the
first call, a copy of that dict after.

**Silent workers.** Locust's master marks a worker missing after 3 missed heartbeats (1 s
apart, ``HEARTBEAT_LIVENESS``) and, once every worker is missing, stops the test ("The last
worker went missing, stopping test"): the rest of the run is lost, whatever the workers still
send is discarded, and the master exits 0. Three seconds is a loaded machine's start-up (the
SDKs' imports), a long collector pass, or a short network partition: seen here with every
worker stalled 8 s (SIGSTOP; test stopped at 17 s of 40), and with two SDK-mode runs starting
beside the test suite (both stopped at their start, nothing measured). The master waits
:data:`WORKER_SILENCE_S` instead, as a worker waits for a silent master
(``master_watch.NO_ANSWER_SILENCE_S``); a worker past it is still re-admitted when it comes back
(Locust's "self-healed"), and one that never does is reported lost with its window.
"""

from __future__ import annotations

from typing import Any

#: Seconds of per-second counts kept behind the newest: ten times what ``current_rps`` reads.
KEEP_S = 120
#: Entries of Locust's chart history kept when nothing reads it (one each 5 s: the last 5 minutes).
HISTORY_KEPT = 60
#: Seconds without a heartbeat before the master marks a worker missing (Locust's default: 3).
WORKER_SILENCE_S = 10
_CACHED = "_locust_llm_cached"


def trim_per_second(environment: Any, now: float, html_report: bool = False, keep_s: int = KEEP_S) -> int:
    """Drop per-second counts older than ``keep_s`` from every entry of Locust's
    ``RequestStats``, and its chart history when nothing will read it: no web UI and no
    ``--html`` (``html_report``, from the run's configuration); returns how many were dropped."""
    stats = environment.stats
    oldest = int(now) - keep_s
    dropped = 0
    for entry in [stats.total, *stats.entries.values()]:
        for counts in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            old = [t for t in counts if t < oldest]
            for t in old:
                del counts[t]
            dropped += len(old)
    history = stats.history
    if len(history) > HISTORY_KEPT and not html_report and getattr(environment, "web_ui", None) is None:
        dropped += len(history) - HISTORY_KEPT
        del history[:-HISTORY_KEPT]
    return dropped


def cache_default_args() -> bool:
    """Wrap ``locust.argument_parser.default_args_dict`` with a one-time cache (idempotent);
    True when it wrapped it now."""
    from locust import argument_parser

    original = argument_parser.default_args_dict
    if getattr(original, _CACHED, False):
        return False
    memo: dict[str, Any] = {}

    def default_args_dict() -> dict[str, Any]:
        if not memo:
            memo.update(original())
        return dict(memo)  # a copy: a caller may change what it gets

    setattr(default_args_dict, _CACHED, True)
    default_args_dict.__doc__ = original.__doc__
    argument_parser.default_args_dict = default_args_dict
    return True


def tune_locust(runner: Any) -> None:
    """What this process's role needs (the master: patience with silent workers; a worker: the
    spawn handler's defaults cached); the per-second trim runs each tick (:func:`trim_per_second`)."""
    from locust import runners

    if isinstance(runner, runners.MasterRunner):
        runners.HEARTBEAT_LIVENESS = max(runners.HEARTBEAT_LIVENESS, WORKER_SILENCE_S)
    elif isinstance(runner, runners.WorkerRunner):
        cache_default_args()
