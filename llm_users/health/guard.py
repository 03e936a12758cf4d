"""The run's guards against measuring nothing: where the preflight runs, the mid-run fail-stop,
and the exit code of a run that measured nothing.

- **Preflight** (:mod:`llm_users.health.preflight`) runs in the processes that send the load:
  the local runner at start (before Locust starts the test; a fatal finding is one line and
  exit 1), each worker as its test starts (it has the host from the master by then; a master
  may not reach the server in a multi-host setup, so it sends none). A worker's fatal finding
  goes to the master (:data:`PREFLIGHT_MESSAGE`), which prints the one line, sets exit code 1
  and stops the run; the worker's users stop before their first request.
- **Fail-stop** (``--llm-fail-stop``, default 30 s): on the process with the merged view (local
  runner, master), a run whose requests have all failed for that long, with failures still
  arriving, stops as ``-t`` would, with one line naming the top failure category; exit 1.
- **Nothing measured**: a test that ends with no successful request in its measured window
  (warm-up and cool-down excluded) prints one line with a hint computed from what is known
  (the E2E of the requests that did end, the longest cut by the stop, the max tokens; requests
  that all failed are named as failures, and HTTP 413 as the server's size limit with the
  largest request's size, never as a run too short: issue 54 item 6) and the process exits 1
  (``environment.process_exit_code``, which Locust's own shutdown uses in every mode;
  ``--exit-code-on-error`` still decides for a run that measured something).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import gevent

from llm_users.health.preflight import Finding, run_preflight
from llm_users.metrics import RequestRecord
from llm_users.run import MergingRun, WorkerRun

PREFLIGHT_MESSAGE = "llm_preflight_failed"


def say(line: str) -> None:
    print(f"locust-llm: {line}", file=sys.stderr, flush=True)


# -- preflight --------------------------------------------------------------------------------------

def preflight_findings(environment: Any, config: Any, discovered: dict[str, str]) -> list[Finding]:
    """The preflight of every LLM User class at its host (none without a host)."""
    targets = []
    for cls in config.user_settings:
        host = getattr(cls, "host", None) or environment.host
        if host:
            targets.append((cls, config.settings(cls), host))
    return run_preflight(targets, discovered)


def preflight_at_start(environment: Any, run: Any, discovered: dict[str, str]) -> Finding | None:
    """The local runner's preflight (at init): the fatal finding, if any; warnings printed."""
    if not run.config.preflight:
        return None
    findings = preflight_findings(environment, run.config, discovered)
    for f in findings:
        if not f.fatal:
            say(f.message)
    return next((f for f in findings if f.fatal), None)


def attach_before(environment: Any, run: Any, discovered: dict[str, str]) -> None:
    """What must run before the run's own ``test_start`` (before ``run.install``): a worker's
    preflight, so the test's clock and self-check start when the load can."""
    if isinstance(run, WorkerRun):
        _attach_worker(environment, run, discovered)


def attach(environment: Any, run: Any) -> None:
    """The guards that watch the run (after ``run.install``: its stop has written the summary)."""
    if isinstance(run, MergingRun):
        _attach_merging(environment, run)


def _attach_worker(environment: Any, run: WorkerRun, discovered: dict[str, str]) -> None:
    checked: set[str] = set()

    def on_test_start(**_: Any) -> None:
        config = run.current_config
        host = environment.host or ""
        if not config.preflight or host in checked:
            return
        checked.add(host)
        findings = preflight_findings(environment, config, discovered)
        fatal = next((f for f in findings if f.fatal), None)
        for f in findings:
            if not f.fatal:
                say(f"{run.node}: {f.message}")
        if fatal is not None:
            environment.llm_preflight_failed = True  # this worker's users stop before their first request
            environment.runner.send_message(PREFLIGHT_MESSAGE, {"line": fatal.message, "worker": run.node})

    environment.events.test_start.add_listener(on_test_start)


def _stop(environment: Any, run: MergingRun) -> None:
    """Stop the test as ``-t`` does (headless: quit; web UI: stop, the UI stays)."""
    runner = environment.runner
    if run.config.headless:
        gevent.spawn(runner.quit)
    else:
        gevent.spawn(run.stop_runner, runner)


# -- the merged view: fail-stop, worker preflight, nothing measured ---------------------------------

class FailWatch:
    """Every request failing for ``limit_s`` (pure; fed records and asked once a second).

    Stops when failures have been arriving for ``limit_s`` with no success since the first of
    them, and the latest came within ``recent_s`` (a run of long requests after one early
    failure is not "every request failing")."""

    def __init__(self, limit_s: float, lag_s: float = 1.0) -> None:
        self.limit_s = limit_s
        self.recent_s = max(limit_s / 2, lag_s + 1.0)
        self.first_fail: float | None = None
        self.last_fail = 0.0
        self.categories: Counter[str] = Counter()

    def record(self, ok: bool, category: str | None, now: float) -> None:
        if ok:
            self.first_fail = None
            self.categories.clear()
            return
        if self.first_fail is None:
            self.first_fail = now
        self.last_fail = now
        self.categories[category or "error"] += 1

    def due(self, now: float) -> bool:
        return (self.first_fail is not None and now - self.first_fail >= self.limit_s
                and now - self.last_fail <= self.recent_s)

    def line(self) -> str:
        n = sum(self.categories.values())
        top, k = self.categories.most_common(1)[0] if self.categories else ("error", 0)
        return (f"every request failed for {self.limit_s:g} s ({n} failures, top category {top}: {k}); "
                f"stopped the run instead of going on (--llm-fail-stop {self.limit_s:g}s; off to keep going)")


class Ended:
    """What is known of the requests that ended, warm-up included (for the hint)."""

    def __init__(self) -> None:
        self.ok = 0
        self.ok_e2e_s = 0.0
        self.longest_cut_s = 0.0
        self.records = 0  # every record, whatever its status
        self.failed: Counter[str] = Counter()  # failures by category
        self.warmup_failed: Counter[str] = Counter()  # of them, the warm-up's (load/warmup.py: window.warmup.failed)
        self.too_large_bytes = 0  # the largest request a server refused with HTTP 413 (0: none, or size unknown)

    def add(self, rec: RequestRecord) -> None:
        self.records += 1
        e2e = (rec.e2e_ns or 0) / 1e9
        if rec.status == "interrupted":
            self.longest_cut_s = max(self.longest_cut_s, e2e)
        elif rec.ok:
            self.ok += 1
            self.ok_e2e_s += e2e
        elif rec.status != "cancelled":
            self.failed[rec.error_category or "error"] += 1
            if rec.warmup:
                self.warmup_failed[rec.error_category or "error"] += 1
            if rec.http_status == TOO_LARGE:
                self.too_large_bytes = max(self.too_large_bytes, rec.request_bytes)


TOO_LARGE = 413


def _failed_why(top: str, ended: Ended) -> str:
    """What to do about failures whose top category is ``top``: HTTP 413 is the server's size
    limit (a proxy's most often), named with the largest request's size; else the table."""
    if top != f"http_{TOO_LARGE}":
        return "see the failure table"
    size = ended.too_large_bytes
    sent = f"requests of up to {_size(size)}" if size else "the requests"
    return (f"the server refused {sent} as too large (HTTP 413 Payload Too Large): its request-size limit (or a "
            "proxy's: nginx's client_max_body_size is 1 MiB by default) is below them, not the run too short; "
            "shorten the prompts (--llm-dataset, --llm-input-tokens, --llm-images) or raise the limit")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB ({n} bytes)" if n >= 2**20 else f"{n / 1024:.1f} KiB ({n} bytes)"


def nothing_measured(overall: dict[str, Any], ended: Ended, warmup: dict[str, Any], max_tokens: int | None,
                     run_s: float | None) -> str | None:
    """The line for a test with no successful request in its measured window (None otherwise)."""
    if overall.get("successes") or overall.get("cancelled"):  # cancelled on purpose: what was asked
        return None
    failures = overall.get("failures") or 0
    if failures:
        cats = overall.get("failures_by_category") or {}
        top = max(cats, key=cats.get) if cats else "error"
        return (f"nothing measured: all {failures} measured requests failed (top category {top}: "
                f"{cats.get(top, failures)}); {_failed_why(top, ended)}")
    if ended.failed and not ended.ok:  # failed in the warm-up (not in the statistics): not a run too short
        top, n = ended.failed.most_common(1)[0]
        return (f"nothing measured: every request that ended failed ({ended.failed.total()}, all in the warm-up or "
                f"cool-down, which the statistics leave out; top category {top}: {n}); {_failed_why(top, ended)}")
    tokens = f", now {max_tokens}" if max_tokens else ""
    lower = f"or lower the output length (--llm-max-tokens{tokens})"
    per_user = int(warmup.get("requests_per_user") or 0)
    warm_s = float(warmup.get("seconds") or 0.0)
    cut = int(overall.get("interrupted") or 0)
    if ended.ok and warmup.get("ramp"):  # --llm-warmup ramp (load/ramp.py): the spawn never completed in time
        return (f"nothing measured: the {ended.ok} requests that ended were warm-up (--llm-warmup ramp: they started "
                f"before all users ran), {cut} were cut by the stop; raise -r so the users all start well before the "
                "end, run longer (-t), or give --llm-warmup N or a time")
    if ended.ok and ended.warmup_failed:  # the server failed part of the warm-up: that first, not the run's length
        top, n = ended.warmup_failed.most_common(1)[0]
        failed = ended.warmup_failed.total()
        why = (_failed_why(top, ended) if top == f"http_{TOO_LARGE}"
               else "the server failed part of the warm-up: find why before running longer (-t)")
        return (f"nothing measured: the {ended.ok + failed} requests that ended were warm-up and {failed} of them "
                f"failed (top category {top}: {n}; summary.json window.warmup.failed); {why}")
    if ended.ok:
        e2e = ended.ok_e2e_s / ended.ok
        need = (per_user + 1) * e2e + warm_s
        why = (f"the {ended.ok} requests that ended were warm-up (--llm-warmup: each user's first {per_user}"
               + (f", the first {warm_s:g} s" if warm_s else "") + f"), {cut} were cut by the stop")
        return (f"nothing measured: no request succeeded in the measured window; {why}. A request takes "
                f"about {e2e:.1f} s (E2E): run longer than {need:.0f} s (-t; {per_user + 1} requests per "
                f"user), {lower}, or --llm-warmup 0")
    longest = max(ended.longest_cut_s, 0.0)
    ran = f" of {run_s:g} s" if run_s else ""
    if not ended.records:  # not one request ended or was cut: none was sent
        return (f"nothing measured: no request was sent in the run{ran}: the users' start-up took all of it (with "
                "--llm-input-tokens and no /tokenize on the server, two calibration prompts of ~190 and ~570 words "
                "go first: see the log's 'synthetic prompts by' line), or no user started; run longer (-t)")
    return (f"nothing measured: no request ended within the run{ran} ({cut} cut by the stop after up to "
            f"{longest:.1f} s: each takes longer): run longer than one request (-t well above its E2E), {lower}")


def _attach_merging(environment: Any, run: MergingRun) -> None:
    ended = Ended()
    state: dict[str, Any] = {"watch": None, "greenlet": None, "stopped": None, "nothing": None}
    environment.llm_preflight_failed = False

    def observe(rec: RequestRecord) -> None:
        ended.add(rec)
        watch = state["watch"]
        if watch is not None and rec.status not in ("interrupted", "cancelled"):
            watch.record(rec.ok, rec.error_category, time.monotonic())

    run.collector.observers.append(observe)

    def loop(watch: FailWatch) -> None:
        while True:
            gevent.sleep(0.5)
            if watch.due(time.monotonic()):
                state["stopped"] = watch.line()
                say(state["stopped"])
                environment.process_exit_code = 1
                _stop(environment, run)
                return

    def on_test_start(**_: Any) -> None:
        if state["stopped"] or state.get("nothing"):  # a web-UI test again: judged afresh
            environment.process_exit_code = None
        state["stopped"] = state["nothing"] = None
        limit = run.config.fail_stop_s
        state["watch"] = FailWatch(limit, run.data_lag_s) if limit else None
        if state["watch"] is not None:
            state["greenlet"] = gevent.spawn(loop, state["watch"])

    def on_test_stop(**_: Any) -> None:
        if state["greenlet"] is not None:
            state["greenlet"].kill(block=False)
            state["greenlet"] = None
        summary = run.last_summary
        if summary is None or state["stopped"] or environment.llm_preflight_failed:
            return
        settings = list(run.current_config.user_settings.values())
        max_tokens = settings[0].sampling.max_tokens if settings else None
        line = nothing_measured(summary.get("overall", {}), ended,
                                summary.get("window", {}).get("warmup", {}), max_tokens, run.config.run_time_s)
        if line is not None:
            say(line)
            state["nothing"] = line
            environment.process_exit_code = 1

    def on_preflight_failed(environment: Any = None, msg: Any = None, **_: Any) -> None:
        env = environment or run.environment
        if env.llm_preflight_failed:
            return
        env.llm_preflight_failed = True
        data = (msg.data if msg is not None else None) or {}
        say(str(data.get("line", "a worker's preflight failed")))
        env.process_exit_code = 1
        _stop(env, run)

    def on_summary(s: dict[str, Any]) -> None:
        if state["stopped"]:
            s["fail_stop"] = {"stopped": True, "reason": state["stopped"]}

    run.summary_hooks.append(on_summary)
    environment.events.test_start.add_listener(on_test_start)
    environment.events.test_stop.add_listener(on_test_stop)
    runner = environment.runner
    if runner is not None and hasattr(runner, "register_message") and not isinstance(run, WorkerRun):
        try:
            runner.register_message(PREFLIGHT_MESSAGE, on_preflight_failed)
        except Exception:  # a local runner has no workers to hear from
            pass
