"""One warm-up setting for the whole run, stated as it was applied, and the warm-up requests
counted by outcome (issue 53 item 6).

``--llm-warmup`` is run-wide: a worker applies the master's setting, never its own command
line's. Locust sends the master's options with each spawn and
:meth:`~llm_users.options.RunConfig.for_test` reads the warm-up from them as the test starts,
as it reads the SLOs; the users, the time form (``run.LLMRun.classify``) and ``--llm-warmup
ramp`` (:mod:`llm_users.load.ramp`) read that test's configuration. Each worker says in its
payloads what it applied (``applied.warmup``, :class:`~llm_users.distributed.Shipper`), so the
master states the setting the workers used, not the one it was given.

summary.json's ``window.warmup``: ``requests_per_user``, ``seconds`` and ``ramp`` as applied
(on a master: as the workers applied them; ``workers`` then lists each worker's), ``excluded``
(the warm-up requests that ended, left out of the statistics: the overall ``excluded_warmup``)
and ``failed`` of them, with ``failed_by_category``. The console's measured-window line says
them (:func:`text`), and the nothing-measured hint names failed warm-ups instead of the run's
length (:mod:`llm_users.health.guard`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from llm_users.metrics import RequestRecord

#: the keys of one applied setting (a worker's ``applied.warmup``, summary.json's ``window.warmup``)
SETTING = ("requests_per_user", "seconds", "ramp")


def applied(config: Any) -> dict[str, Any]:
    """The warm-up a run's configuration (:class:`~llm_users.options.RunConfig`) applies: each
    user's first N requests (the option, else none in a trace replay, else the User classes' own
    ``warmup_requests``; classes that differ: the most), the time form and the ramp's."""
    counts = {config.warmup_for(getattr(k, "warmup_requests", 1)) for k in config.user_settings} or {config.warmup_for(1)}
    return {"requests_per_user": max(counts), "seconds": float(config.warmup_s), "ramp": bool(config.warmup_ramp)}


def setting_text(s: Mapping[str, Any], trace: bool = False) -> str:
    """'first 1 per user', '30 s', 'started before the spawn completed'; in a trace replay none
    by default (``trace``: load/ramp.py ``warmup_per_user``)."""
    if s.get("seconds"):
        return f"{s['seconds']:g} s"
    if s.get("ramp"):
        return "started before the spawn completed"
    n = s.get("requests_per_user") or 0
    if trace and not n:
        return "none: a trace replay measures every row it sends; --llm-warmup N excludes each user's first N"
    return f"first {n} per user"


def text(warmup: Mapping[str, Any], trace: bool = False) -> str:
    """The console's words for ``window.warmup``: the setting as applied (on a master, by the
    workers, each named where they differ) and how many warm-up requests failed."""
    workers: Mapping[str, Any] = warmup.get("workers") or {}
    settings = {setting_text(s, trace) for s in workers.values()}
    if len(settings) > 1:
        how = "workers differ: " + ", ".join(f"{setting_text(s, trace)} on {w}" for w, s in sorted(workers.items()))
    else:
        how = setting_text(warmup, trace)
        if workers:
            how += f", as applied by {'the worker' if len(workers) == 1 else f'all {len(workers)} workers'}"
    failed = warmup.get("failed") or 0
    if failed:
        cats = ", ".join(f"{c}: {n}" for c, n in (warmup.get("failed_by_category") or {}).items())
        how += f"; {failed} of them failed ({cats})" if cats else f"; {failed} of them failed"
    return how


class WarmupCounts:
    """The warm-up requests that ended (an interrupted or cancelled one is counted elsewhere, as
    in the statistics), and those of them that failed, by category."""

    def __init__(self) -> None:
        self.excluded = 0
        self.failed: Counter[str] = Counter()

    def add(self, rec: RequestRecord) -> None:
        if not rec.warmup or rec.status in ("interrupted", "cancelled"):
            return
        self.excluded += 1
        if not rec.ok:
            self.failed[rec.error_category or "error"] += 1

    def block(self) -> dict[str, Any]:
        return {"excluded": self.excluded, "failed": self.failed.total(),
                "failed_by_category": dict(self.failed.most_common())}


def window_block(given: Mapping[str, Any], workers: Mapping[str, Mapping[str, Any]],
                 counts: WarmupCounts) -> dict[str, Any]:
    """summary.json's ``window.warmup``: ``given`` (the setting this process applies) unless
    workers reported theirs (``workers``: worker -> its applied setting), then theirs: where
    they all agree that setting, else the most of each part; and the counts."""
    out = dict(given)
    if workers:
        out["requests_per_user"] = max(int(s.get("requests_per_user") or 0) for s in workers.values())
        out["seconds"] = max(float(s.get("seconds") or 0.0) for s in workers.values())
        out["ramp"] = any(bool(s.get("ramp")) for s in workers.values())
        out["workers"] = {w: {k: s.get(k) for k in SETTING} for w, s in sorted(workers.items())}
    return {**out, **counts.block()}


def attach(environment: Any, run: Any) -> WarmupCounts | None:
    """A worker puts the warm-up it applies, as each test starts, in its payloads (after the
    options are read again: ``options.install``'s listener runs first), and says so where the
    master's setting replaced its own command line's. Where the run merges, every record is
    counted and ``window.warmup`` is written as applied."""
    shipper = getattr(run, "shipper", None)
    if shipper is not None:
        def on_test_start(**_: Any) -> None:
            now, own = applied(run.current_config), applied(run.config)
            shipper.applied["warmup"] = now
            if now != own:
                print(f"locust-llm: {run.node}: warm-up as the master set it ({setting_text(now)}), not as this "
                      f"worker's own options would ({setting_text(own)}): one --llm-warmup for the whole run",
                      file=sys.stderr, flush=True)

        environment.events.test_start.add_listener(on_test_start)
    collector = getattr(run, "collector", None)
    if collector is None:
        return None
    counts = WarmupCounts()
    collector.observers.append(counts.add)

    def hook(summary: dict[str, Any]) -> None:
        window = summary.get("window")
        if not isinstance(window, dict):
            return
        workers = {w: ws.applied["warmup"] for w, ws in collector.workers.items()
                   if ws.applied and ws.applied.get("warmup")}
        given = {**(window.get("warmup") or {}), **applied(run.current_config)}
        window["warmup"] = window_block(given, workers, counts)

    run.summary_hooks.append(hook)
    return counts
