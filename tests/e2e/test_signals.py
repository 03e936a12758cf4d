"""Issue 10 item 1: a signal stops a run the way ``-t`` does, locally and distributed.

SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C) to the master, or SIGINT to the whole
process group (Ctrl-C in a terminal): workers stop their users, ship their last records, the
master waits for them, writes every output once and exits. Each run checks:
requests.jsonl lines == summary.json ``records`` == merged requests (measured + excluded +
interrupted) == requests the simulator started, and what it served == records less those
marked interrupted (in flight when the stop cut them); one LLM summary, no traceback, no worker
reported lost. SDK mode (``--llm-client sdk``, the OpenAI locustfile through the openai SDK) must
give the same counts: every variant runs in it locally, and one signal kind in each distributed
set-up.

Each test's run is a real ``locust`` (its own simulator, its own signal), started by the
module's :class:`Conductor` a few at a time (issue 55): a run gets its signal as soon as its
simulator has served 20 requests (a study: once its fourth stage has begun), and the test checks
it once it has ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llm_users.metrics import Distribution
from llm_users.sim.launcher import SimProcess, start_simulator
from tests.e2e.locust_pool import params, wanted
from tests.helpers import (
    LOCUSTFILES,
    free_port,
    get_json,
    master_args,
    processes_args,
    read_records,
    read_summary,
    start_locust,
    worker_args,
)

pytestmark = pytest.mark.slow

SIM_ARGS = ("--ttft-ms", "20", "--itl-ms", "4", "--output-tokens", "25", "--seed", "3")
# --llm-preflight off: every request the simulator counts is a record (the preflight's is none)
COMMON = [
    "--headless",
    "--only-summary",
    "-u",
    "6",
    "-r",
    "6",
    "-t",
    "60s",
    "--stop-timeout",
    "10",
    "--llm-prometheus-port",
    "0",
    "--llm-preflight",
    "off",
]


# Workers get --llm-client from the master (tests.helpers.LOCUSTFILES: each mode's locustfile).
CLIENT_ARGS = {"raw": [], "sdk": ["--llm-client", "sdk"]}

SERVED = 20  # the signal comes once the simulator has served this many: a run under way
START_S = 60  # ... within this many seconds of the start (several runs start at once)
EXIT_S = 60  # the master (a local run) exits within this many seconds of the signal
WORKER_EXIT_S = 30  # a worker, of the master's exit

# A study stopped by a signal: its finished stages are kept frozen (one compressed block each,
# stages.py) and read back for the report; every one must say exactly what its records say.
# SIGTERM during a headless shape run killed the process before (Locust's handler comes after
# the shape's run: plugin._route_signals_to_main).
# no warm-up: SDK users' first requests (1-2 s on a loaded machine) took CI's whole first stage
STUDY = ["--llm-stages", "3:4s,4:4s,3:4s,4:30s", "--llm-settle", "0.2s", "--llm-warmup", "0"]
SHAPE_LINE = "Shape test updating"  # Locust's INFO line at each stage's begin (3, 4, 3, 4 users: one each)
INTO_STAGE_S = 1.0  # the signal this long into the fourth stage (the first two are frozen at its begin)


@dataclass(frozen=True)
class Spec:
    """One run: ``setup`` local, processes (``--processes 2``) or workers (a master and two
    worker processes); ``how`` the signal (``SIGTERM``/``SIGINT`` to the master, ``... group``:
    SIGINT to its process group); a ``study`` runs STUDY's stages."""

    setup: str
    how: str
    client: str
    study: bool = False


@dataclass
class Ended:
    """A run that ended after its signal: each process's exit code, its logs, report dir, and
    the simulator's ``/_sim/stats`` once every process had exited."""

    spec: Spec
    returncodes: list[int]
    logs: list[Path]
    report: Path
    stats: dict[str, Any]

    def tail(self, n: int = 3000) -> str:
        return self.logs[0].read_text(errors="replace")[-n:]


@dataclass
class _Live:
    spec: Spec
    sim: SimProcess
    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]
    report: Path
    started: float = field(default_factory=time.monotonic)
    signal_at: float | None = None  # when the trigger was met (the study: plus INTO_STAGE_S)
    signalled: float | None = None
    master_exit: float | None = None


def _locust(args: list[str], log: Path, client: str = "raw", **kw: object) -> subprocess.Popen:
    return start_locust(args, log, locustfile=LOCUSTFILES[client], env={"OPENAI_API_KEY": "sk-test"}, **kw)


def _start(spec: Spec, where: Path) -> _Live:
    where.mkdir(parents=True, exist_ok=True)
    sim = start_simulator(list(SIM_ARGS))
    try:
        report = where / "r"
        args = [*COMMON, *(STUDY if spec.study else []), *CLIENT_ARGS[spec.client]]
        c = spec.client
        if spec.study:
            log = where / "locust.log"
            extra = processes_args(2) if spec.setup == "processes" else []
            procs = [_locust([*args, *extra, "--host", sim.url, "--llm-report", str(report)], log, c)]
            logs = [log]
        elif spec.setup == "local":
            log = where / "local.log"
            procs = [_locust([*args, "--host", sim.url, "--llm-report", str(report)], log, c)]
            logs = [log]
        elif spec.setup == "processes":
            log = where / "master.log"
            procs = [
                _locust(
                    [*args, *processes_args(2), "--host", sim.url, "--llm-report", str(report)],
                    log,
                    c,
                    start_new_session=True,
                )
            ]
            logs = [log]
        else:
            port = free_port()
            logs = [where / "master.log", where / "w0.log", where / "w1.log"]
            master = _locust(
                [*args, *master_args(port), "--host", sim.url, "--llm-report", str(report)],
                logs[0],
                c,
                process_group=0,
            )
            procs = [master]
            try:
                procs += [
                    _locust(worker_args(port), logs[1 + i], c, process_group=master.pid) for i in range(2)
                ]
            except BaseException:
                _kill(procs)
                raise
    except BaseException:
        sim.stop()
        raise
    return _Live(spec, sim, procs, logs, report)


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


class Conductor:
    """Runs the module's specs (by name), ``parallel`` at a time, each once: ``result(name)``
    starts it first if it has not started, and advances every run meanwhile (no threads: the
    pytest process may be gevent-patched): signal, exit, the simulator's stats."""

    def __init__(self, specs: dict[str, Spec], base: Path, wanted: list[str], parallel: int = 3) -> None:
        self.specs = specs
        self.base = base
        self.parallel = parallel
        self.pending = [n for n in wanted if n in specs]
        self.live: dict[str, _Live] = {}
        self.done: dict[str, Ended | BaseException] = {}

    def result(self, name: str) -> Ended:
        while name not in self.done:
            self._fill(first=name)
            for n in list(self.live):
                self._advance(n)
            if name not in self.done:
                time.sleep(0.2)
        self._fill()  # the next ones run while the test checks this one
        got = self.done[name]
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        for live in self.live.values():
            _kill(live.procs)
            live.sim.stop()
        self.live.clear()

    def _fill(self, first: str | None = None) -> None:
        order = ([first] if first is not None else []) + [n for n in self.pending if n != first]
        for name in order:
            if len(self.live) >= self.parallel:
                return
            if name in self.live or name in self.done:
                continue
            if name in self.pending:
                self.pending.remove(name)
            try:
                self.live[name] = _start(self.specs[name], self.base / name)
            except Exception as e:  # noqa: BLE001 - kept for the test that asks for this run
                self.done[name] = e

    def _end(self, name: str, outcome: Ended | BaseException) -> None:
        live = self.live.pop(name)
        _kill(live.procs)
        live.sim.stop()
        self.done[name] = outcome

    def _fail(self, name: str, why: str) -> None:
        live = self.live[name]
        tails = "\n".join(
            f"--- {p.name}:\n{p.read_text(errors='replace')[-3000:]}" for p in live.logs if p.exists()
        )
        self._end(name, AssertionError(f"{name}: {why}\n{tails}"))

    def _ready(self, live: _Live) -> bool:
        if get_json(live.sim.url + "/_sim/stats")["served"] < SERVED:
            return False
        return not live.spec.study or live.logs[0].read_text(errors="replace").count(SHAPE_LINE) >= 4

    def _signal(self, live: _Live) -> None:
        master, how = live.procs[0], live.spec.how
        if how == "SIGINT group":
            os.killpg(master.pid, signal.SIGINT)
        else:
            master.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
        live.signalled = time.monotonic()

    def _advance(self, name: str) -> None:
        live = self.live[name]
        try:
            now, master = time.monotonic(), live.procs[0]
            if live.signalled is None:
                if master.poll() is not None:
                    self._fail(name, f"locust exited {master.returncode} before its signal")
                elif live.signal_at is None and self._ready(live):
                    live.signal_at = now + (INTO_STAGE_S if live.spec.study else 0.0)
                elif live.signal_at is None and now - live.started > START_S:
                    self._fail(
                        name,
                        f"the simulator did not serve {SERVED} requests (a study: reach its fourth "
                        f"stage) within {START_S} s: the run did not start",
                    )
                if name in self.live and live.signal_at is not None and now >= live.signal_at:
                    self._signal(live)
            elif live.master_exit is None:
                if master.poll() is not None:
                    live.master_exit = now
                elif now - live.signalled > EXIT_S:
                    self._fail(name, f"locust did not exit within {EXIT_S} s of its signal ({live.spec.how})")
            if name in self.live and live.master_exit is not None:
                if all(p.poll() is not None for p in live.procs[1:]):
                    stats = get_json(live.sim.url + "/_sim/stats")
                    self._end(
                        name,
                        Ended(live.spec, [p.returncode for p in live.procs], live.logs, live.report, stats),
                    )
                elif now - live.master_exit > WORKER_EXIT_S:
                    self._fail(name, f"a worker did not exit within {WORKER_EXIT_S} s of the master")
        except Exception as e:  # noqa: BLE001 - kept for the test that asks for this run
            if name in self.live:
                self._end(name, e)


def _local(sig: signal.Signals, client: str) -> str:
    return f"local-{sig.name}-{client}"


def _distributed(setup: str, how: str, client: str) -> str:
    return f"{setup}-{how.replace(' ', '_')}-{client}"


def _study(how: str, client: str) -> str:
    return f"study-{how.replace(' ', '_')}-{client}"


# SDK mode for a signal to the master and Ctrl-C to the whole group per distributed set-up
# (a group signal also stops the SDK's requests in the workers themselves)
DISTRIBUTED = [
    ("SIGTERM master", "raw"),
    ("SIGINT master", "raw"),
    ("SIGINT group", "raw"),
    ("SIGTERM master", "sdk"),
    ("SIGINT group", "sdk"),
]
STUDIES = [("SIGTERM local", "raw"), ("SIGTERM processes", "sdk"), ("SIGINT processes", "raw")]


def _specs() -> dict[str, Spec]:
    out = {
        _local(sig, client): Spec("local", sig.name, client)
        for sig in (signal.SIGTERM, signal.SIGINT)
        for client in CLIENT_ARGS
    }
    for setup in ("processes", "workers"):
        out |= {_distributed(setup, how, client): Spec(setup, how, client) for how, client in DISTRIBUTED}
    out |= {_study(how, client): Spec(how.split()[1], how, client, study=True) for how, client in STUDIES}
    return out


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_local_run_stops_cleanly_on_a_signal": lambda: [_local(p["sig"], p["client"])],
        "test_processes_2_stops_cleanly_on_a_signal": lambda: [
            _distributed("processes", p["how"], p["client"])
        ],
        "test_master_and_workers_stop_cleanly_on_a_signal": lambda: [
            _distributed("workers", p["how"], p["client"])
        ],
        "test_a_study_stopped_by_a_signal_reports_every_finished_stage_exactly": lambda: [
            _study(p["how"], p["client"])
        ],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conductor]:
    """Every run the module's selected tests need, each once, three at a time."""
    conductor = Conductor(_specs(), tmp_path_factory.mktemp("signals"), wanted(request, _needs))
    try:
        yield conductor
    finally:
        conductor.close()


def _check(run: Ended, client: str = "raw") -> None:
    report, stats = run.report, run.stats
    text = "\n".join(p.read_text() for p in run.logs)
    assert "Traceback" not in text, text[-4000:]
    assert "Bad file descriptor" not in text, text[-4000:]
    assert text.count("LLM summary") == 1, text[-4000:]
    records = read_records(report)
    summary = read_summary(report)
    ov = summary["overall"]
    merged = ov["requests"] + ov["excluded_warmup"] + ov["excluded_cooldown"] + ov["interrupted"]
    interrupted = sum(1 for r in records if r["status"] == "interrupted")
    # every request the simulator saw is one record; those cut by the stop are "interrupted"
    assert len(records) == summary["records"] == merged == stats["started"], (
        len(records),
        summary["records"],
        merged,
        stats,
    )
    assert stats["served"] == len(records) - interrupted == len(records) - ov["interrupted"], (
        f"simulator {stats}; records {len(records)}, interrupted {interrupted}"
    )
    assert summary["workers"]["lost"] == []
    assert len(records) >= 20
    assert {r["client"] for r in records} == {client}
    # the connections the measured requests opened, merged as exactly as their latencies: one per
    # user in raw mode (kept), one per request through the openai SDK (it closes at [DONE])
    measured = [
        r
        for r in records
        if r["status"] not in ("interrupted", "cancelled") and not r["warmup"] and not r["cooldown"]
    ]
    opened = [r["connect_ns"] for r in measured if r["connect_ns"] is not None]
    assert ov["connections_opened"] == ov["connect"]["count"] == len(opened), (
        ov["connections_opened"],
        len(opened),
    )
    if client == "sdk":
        assert len(opened) == len(measured) == ov["requests"]
    else:
        assert len(opened) <= 6  # -u 6: each user's connection opened once (the first requests are warm-up)


@pytest.mark.parametrize("client", ["raw", "sdk"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_local_run_stops_cleanly_on_a_signal(runs, sig, client) -> None:
    run = runs.result(_local(sig, client))
    assert run.returncodes[0] in (0, 1), run.tail()
    _check(run, client)


@pytest.mark.parametrize(("how", "client"), DISTRIBUTED)
def test_processes_2_stops_cleanly_on_a_signal(runs, how, client) -> None:
    run = runs.result(_distributed("processes", how, client))
    assert run.returncodes[0] in (0, 1), run.tail()
    _check(run, client)


@pytest.mark.parametrize(("how", "client"), DISTRIBUTED)
def test_master_and_workers_stop_cleanly_on_a_signal(runs, how, client) -> None:
    run = runs.result(_distributed("workers", how, client))
    assert run.returncodes[0] in (0, 1), run.tail()
    _check(run, client)


@pytest.mark.parametrize(("how", "client"), STUDIES)
def test_a_study_stopped_by_a_signal_reports_every_finished_stage_exactly(runs, how, client) -> None:
    run = runs.result(_study(how, client))
    assert run.returncodes[0] in (0, 1), run.tail()
    _check(run, client)
    report = run.report
    stages, records = read_summary(report)["stages"], read_records(report)
    assert [st["users"] for st in stages] == [3, 4, 3, 4]
    for st in stages[:3]:  # finished before the signal: frozen, then read back
        lo, hi = st["start"] + st["settle_s"], st["start"] + st["settle_s"] + st["measured_s"]
        mine = [
            r
            for r in records
            if r["stage"] == st["index"]
            and lo <= r["start_time"] < hi
            and not r["warmup"]
            and r["status"] != "interrupted"
        ]
        ttft, itl = Distribution(), Distribution()
        for r in mine:
            ttft.add(r["ttft_ns"])
            itl.add_many(r["itl_ns"])
        assert st["requests"] == len(mine), st["index"]
        # the freeze is read back with records in it: the first stage may have none, when the
        # users' start-up took it (CI: SDK workers' first request 4.3 s into a 4-s stage)
        assert len(mine) > 0 or st["index"] == 0, st["index"]
        assert (
            st["ttft"] == {**st["ttft"], **ttft.summary_ms()} and st["itl"]["p99"] == itl.summary_ms()["p99"]
        )
