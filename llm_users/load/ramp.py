"""Locust's own ramp (``-u`` users started at ``-r`` per second) against the measured window
(issue 53 item 1): the users that ran in the window (summary.json ``window.users``), whether the
load ever reached its target, how much of the window was ramp, and ``--llm-warmup ramp``, which
measures only at the plateau (a request that starts before the spawn completed is warm-up).

Locust fires ``spawning_complete`` when all ``-u`` users run: a local runner when it spawned the
last one, a master once its workers reported theirs, and each worker when the master tells it
(so a worker flags its records against the whole ramp's end, on its own clock). A test stopped
before then never reached its target.

The users in the window are the per-second count the run keeps for timeseries.csv (a master's:
the workers' total), read for each whole second inside the window (a second's count is taken
somewhere in it), with the exact counts as the spawn completed and as the test began to stop;
the seconds after that are the stop's, not the load's. The load profiles (open loop, stages,
sweep, trace) start and stop users themselves and measure each stage in its own window: no
``window.users`` for them, and ``--llm-warmup ramp`` is refused beside them. Under a Locust
``LoadTestShape`` the users are stated but no target is judged.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from llm_users.durations import parse_duration_s
from llm_users.errors import ConfigError

RAMP = "ramp"
#: A ramp covering more of the measured window than this gets its console line.
NOTE_SHARE = 0.25


def parse_warmup(text: str | None) -> tuple[int | None, float]:
    """``'3'`` -> (3 requests per user, 0 s); ``'30s'`` -> (0, 30 s); ``'ramp'`` -> (0, 0 s): the
    spawn's end decides (:func:`is_ramp`); not given -> (None, 0): the User class's
    ``warmup_requests`` (default 1) applies, or none in a trace replay (:func:`warmup_per_user`)."""
    if text is None or str(text).strip() == "":
        return None, 0.0
    t = str(text).strip()
    if t.isdigit():
        return int(t), 0.0
    if is_ramp(t):
        return 0, 0.0
    return 0, parse_duration_s(t, "--llm-warmup")


def warmup_per_user(given: int | None, study: Any, default: int) -> int:
    """Each user's warm-up requests: ``--llm-warmup N`` when given; none under ``--llm-trace``
    (every row is a request the trace asked for: the rows are the workload, and the first would
    be dropped); else ``default`` (the User class's ``warmup_requests``, 1 unless it says otherwise)."""
    if given is not None:
        return given
    return 0 if study is not None and study.part("trace") is not None else default


def is_ramp(text: Any) -> bool:
    """``--llm-warmup ramp``: every request that starts before the spawn completed is warm-up."""
    return text is not None and str(text).strip().lower() == RAMP


class RampWatch:
    """One test's spawn as Locust told it: when it started, each time the spawn completed (with
    its user count) and the users as the test began to stop."""

    def __init__(self) -> None:
        self.completions: list[tuple[float, int]] = []
        self.stopping: tuple[float, int] | None = None
        self.target: int | None = None

    def start(self) -> None:
        self.completions, self.stopping, self.target = [], None, None

    def complete(self, user_count: int) -> None:
        self.completions.append((time.time(), int(user_count)))

    def stop(self, runner: Any) -> None:
        if self.stopping is None and runner is not None:
            self.stopping = (time.time(), int(runner.user_count))
            self.target = getattr(runner, "target_user_count", None)

    def is_warmup(self, start_time: float) -> bool:
        """Started before the spawn first completed (or while it has not yet)."""
        return not self.completions or start_time < self.completions[0][0]


def users_block(seconds: Sequence[tuple[int, int]], window: Mapping[str, Any], completions: Sequence[tuple[float, int]],
                stopping: tuple[float, int] | None, target: int | None, spawn_rate: Any = None) -> dict[str, Any]:
    """summary.json's ``window.users``: ``min`` and ``max`` users running in the measured window,
    ``target`` (the users asked; None: not judged), ``reached`` (the spawn completed at the
    target), ``ramp_s`` (from the test's start to then), ``ramp_share`` (the part of the measured
    window before then: 1.0 when never reached) and ``spawn_rate`` (-r). ``seconds``: (second,
    users) as the run took them each second; ``completions``: (time, users) each time the spawn
    completed; ``stopping``: (time, users) as the test began to stop."""
    lo, end, start = window.get("measured_start"), window.get("measured_end"), window.get("test_start")
    values: list[int] = []
    if lo is not None and end is not None:
        hi = min(end, stopping[0]) if stopping is not None else end
        points = [*completions, *([stopping] if stopping is not None else [])]
        values = [n for t, n in seconds if lo <= t and t + 1 <= hi] + [n for t, n in points if lo <= t <= hi]
        if not values:  # a window shorter than a second: the users as it began
            before = [(t, n) for t, n in [*seconds, *completions] if t <= lo]
            values = [max(before)[1]] if before else []
    judged = target is not None and target > 0
    ramp_end = next((t for t, n in completions if n >= target), None) if judged else None
    share = None
    if judged and lo is not None and end is not None and end > lo:
        edge = end if ramp_end is None else min(ramp_end, end)
        share = round(min(1.0, max(0.0, (edge - lo) / (end - lo))), 4)
    return {
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "target": target if judged else None,
        "reached": (ramp_end is not None) if judged else None,
        "ramp_s": round(ramp_end - start, 3) if ramp_end is not None and start is not None else None,
        "ramp_share": share,
        "spawn_rate": spawn_rate if isinstance(spawn_rate, int | float) else None,
    }


def users_text(users: Mapping[str, Any] | None) -> str | None:
    """'64 users' or '2-64 users' (None: no figure)."""
    if not users or users.get("max") is None:
        return None
    lo, hi = users["min"], users["max"]
    return f"{hi} users" if lo == hi else f"{lo}-{hi} users"


def console_lines(window: Mapping[str, Any]) -> list[str]:
    """The target never reached (a WARNING), or a ramp over more than NOTE_SHARE of the window."""
    users = window.get("users") or {}
    target, rate = users.get("target"), users.get("spawn_rate")
    if target is None or users.get("max") is None:
        return []
    ran = (window.get("test_stop") or 0) - (window.get("test_start") or 0)
    if users.get("reached") is False:
        needs = f"-r {rate:g} needs {target / rate:g} s; " if rate else ""
        return [f"WARNING: the load never reached its target: {users['max']} of {target} users in the measured "
                f"window ({needs}the run had {ran:.0f} s): the whole window was ramp; raise -r or -t"]
    share = users.get("ramp_share") or 0.0
    if share > NOTE_SHARE:
        return [f"note: the ramp to {target} users took {users['ramp_s']:.1f} s, {share:.0%} of the measured window "
                f"(at {users_text(users)}): --llm-warmup ramp measures only at the plateau, or raise -r"]
    return []


def plain(study: Any) -> bool:
    """A plain run: no load profile asked for (Locust's users, ``-u`` at ``-r``)."""
    from llm_users.load.registry import describe  # the profiles' registry: read at start, not at import

    return study is None or not describe(study)


def attach(environment: Any, run: Any) -> RampWatch:
    """Watch this process's spawn; where the run generates load and ``--llm-warmup ramp`` is on,
    flag each record started before the spawn completed as warm-up (this listener is added
    before the run's own, at ``run.install``, so the run's statistics see the flag); where the
    run merges, add ``window.users`` to the summary."""
    config = run.config
    if config.warmup_ramp and not plain(config.study):
        raise ConfigError("--llm-warmup ramp measures a plain run at its plateau; the load profiles (--llm-rate, "
                          "--llm-stages, --llm-steps, --llm-sweep, --llm-trace) measure each stage in its own "
                          "window: give --llm-warmup N or a time instead")
    watch = RampWatch()
    events = environment.events
    events.test_start.add_listener(lambda **_: watch.start())
    events.spawning_complete.add_listener(lambda user_count=0, **_: watch.complete(user_count))
    events.test_stopping.add_listener(lambda **_: watch.stop(environment.runner))
    if run.generates_load:  # this test's setting: a worker's is the master's (load/warmup.py)
        def flag(record: Any, **_: Any) -> None:
            if run.current_config.warmup_ramp and watch.is_warmup(record.start_time):
                record.warmup = True

        events.llm_response.add_listener(flag)
    if run.merges:
        run.summary_hooks.append(lambda summary: _add(summary, environment, run, watch))
    return watch


def _add(summary: dict[str, Any], environment: Any, run: Any, watch: RampWatch) -> None:
    window = summary.get("window")
    if not isinstance(window, dict):
        return
    window.setdefault("warmup", {})["ramp"] = bool(run.current_config.warmup_ramp)
    if not plain(run.current_config.study):
        return
    runner = environment.runner
    target = None
    if getattr(environment, "shape_class", None) is None:
        target = watch.target if watch.target is not None else getattr(runner, "target_user_count", None)
        target = target or run.current_options.get("num_users")
    lo, end = window.get("measured_start"), window.get("measured_end")
    seconds = run.collector.timeline.users_between(int(lo) - 2, int(end) + 1) if lo and end else []
    window["users"] = users_block(seconds, window, watch.completions, watch.stopping, target,
                                  run.current_options.get("spawn_rate"))
