"""Real ``locust`` runs shared by the tests of a module (issue 55): each scenario runs once, a
few at a time, and every test that checks it reads its finished run.

A module names its scenarios (:class:`Scenario`: a locustfile, its options, the simulator it
talks to) and gets a :class:`Pool` from a module-scoped fixture (:func:`pool_in`, which runs
ahead the scenarios the module's selected tests need, in the order they run). ``pool.run(name)``
returns the scenario's :class:`Run` (its ``proc`` like :func:`tests.helpers.run_locust`'s, its
report dir), starting it first if it has not started yet; meanwhile the next wanted scenarios
run beside it, ``parallel`` at most. A scenario marked ``alone`` (a timing bound) runs with no
other run of the pool at once. Simulators are shared by the scenarios that start them with the
same arguments, one per argument list, stopped when the pool closes.

No threads (the pytest process may be gevent-patched): the pool advances while a test waits in
``run``; the runs' outputs go to files.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_users.sim.launcher import SimProcess, start_simulator
from tests.helpers import LOCUST, ROOT, get_json, locust_env
from tests.real.servers import die_with_parent

#: An argument computed when the run starts (a free port: one taken at import may be gone by then).
LateArg = Callable[[], Sequence[str]]


@dataclass(frozen=True)
class Scenario:
    """One ``locust`` run, as :func:`tests.helpers.run_locust` would start it: ``locustfile``
    with ``args`` (a callable among them gives its arguments at start), ``--llm-report`` into the
    run's own dir when ``report``, ``env`` added to the environment. ``sim``: the simulator's
    arguments; the run gets ``--host`` of the pool's simulator started with them. ``trace``: keep
    that simulator's ``/_sim/trace`` as read once the run has ended. ``only_summary``,
    ``loglevel``: Locust's options; ``merge_output``: stderr into ``proc.stdout`` (``proc.stderr``
    empty), interleaved as a terminal shows them."""

    locustfile: str
    args: tuple[str | LateArg, ...]
    sim: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = None
    report: bool = True
    timeout: float = 120
    alone: bool = False
    trace: bool = False
    only_summary: bool = True
    loglevel: str = "WARNING"
    merge_output: bool = False  # stderr into stdout, in the order a terminal shows them


@dataclass
class Run:
    """A finished run: ``proc`` (``returncode``, ``stdout``, ``stderr``), ``report`` (its
    ``--llm-report`` dir), ``trace`` (with ``Scenario.trace``), ``sim_url``, ``seconds``."""

    proc: subprocess.CompletedProcess[str]
    report: Path
    trace: list[dict[str, Any]] | None
    sim_url: str | None
    seconds: float

    def tail(self) -> str:
        """The ends of its stdout and stderr, for an assertion's message."""
        return f"stdout tail:\n{self.proc.stdout[-3000:]}\nstderr tail:\n{self.proc.stderr[-3000:]}"


@dataclass
class _Started:
    popen: subprocess.Popen[bytes]
    cmd: list[str]
    started: float
    out: Path
    err: Path
    report: Path
    sim: SimProcess | None
    files: list[Any] = field(default_factory=list)


class Pool:
    """Runs ``scenarios`` (by name) once each; ``wanted``: the names to run ahead, in order."""

    def __init__(self, scenarios: Mapping[str, Scenario], base: Path, wanted: Sequence[str] = (),
                 parallel: int = 4) -> None:
        self.scenarios = scenarios
        self.base = base
        self.parallel = parallel
        self.pending = [n for n in wanted if n in scenarios]
        self.running: dict[str, _Started] = {}
        self.done: dict[str, Run | BaseException] = {}
        self.sims: dict[tuple[str, ...], SimProcess] = {}
        self.starts = 0

    def run(self, name: str) -> Run:
        """The scenario's finished run (started now if it was not); raises what the run raised
        (a timeout: TimeoutError with the output's tail)."""
        if name not in self.scenarios:
            raise KeyError(f"no scenario {name!r}")
        while name not in self.done:
            self._reap()
            self._fill(first=name)
            if name not in self.done:
                time.sleep(0.1)
        self._fill()  # the next ones run while the test checks this one
        got = self.done[name]
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        for started in self.running.values():
            if started.popen.poll() is None:
                started.popen.terminate()
                try:
                    started.popen.wait(5)
                except subprocess.TimeoutExpired:
                    started.popen.kill()
                    started.popen.wait()
            for f in started.files:
                f.close()
        self.running.clear()
        for sim in self.sims.values():
            sim.stop()
        self.sims.clear()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self, first: str | None = None) -> None:
        """Start what may start now: ``first`` ahead of the pending ones, in order; an ``alone``
        scenario only when nothing runs (and nothing starts behind it until it ends)."""
        if any(self.scenarios[n].alone for n in self.running):
            return
        order = ([first] if first is not None else []) + [n for n in self.pending if n != first]
        for name in order:
            if name in self.running or name in self.done:
                continue
            if self.scenarios[name].alone:
                if not self.running:
                    self._start(name)
                return
            if len(self.running) >= self.parallel:
                return
            self._start(name)

    def _start(self, name: str) -> None:
        """Start ``name``; what goes wrong is its test's to report, not the test that waits."""
        try:
            self._launch(name)
        except Exception as e:  # noqa: BLE001 - kept for the test that asks for this run
            self.done[name] = e

    def _sim(self, args: tuple[str, ...]) -> SimProcess:
        if args not in self.sims:
            self.sims[args] = start_simulator(list(args))
        return self.sims[args]

    def _launch(self, name: str) -> None:
        if name in self.pending:
            self.pending.remove(name)
        sc = self.scenarios[name]
        where = self.base / name
        where.mkdir(parents=True, exist_ok=True)
        sim = self._sim(sc.sim) if sc.sim is not None else None
        args = [a for arg in sc.args for a in ([arg] if isinstance(arg, str) else arg())]
        # the command tests.helpers.run_locust runs (only_summary, no csv_prefix)
        cmd = [LOCUST, "-f", str(ROOT / "locustfiles" / sc.locustfile), "--headless",
               *(["--only-summary"] if sc.only_summary else []), "--loglevel", sc.loglevel,
               *(["--host", sim.url] if sim is not None else []), *args]
        report = where / "r"
        if sc.report:
            cmd += ["--llm-report", str(report)]
        out, err = where / "stdout.txt", where / "stderr.txt"
        files = [out.open("wb"), err.open("wb")]
        popen = subprocess.Popen(cmd, cwd=ROOT, env=locust_env(dict(sc.env or {})), stdin=subprocess.DEVNULL,
                                 stdout=files[0], stderr=subprocess.STDOUT if sc.merge_output else files[1],
                                 preexec_fn=die_with_parent())
        self.starts += 1
        self.running[name] = _Started(popen, cmd, time.monotonic(), out, err, report, sim, files)

    def _reap(self) -> None:
        for name, st in list(self.running.items()):
            timeout = self.scenarios[name].timeout
            if st.popen.poll() is None:
                if time.monotonic() - st.started <= timeout:
                    continue
                st.popen.kill()
                st.popen.wait()
                timed_out = True
            else:
                timed_out = False
            for f in st.files:
                f.close()
            del self.running[name]
            seconds = time.monotonic() - st.started
            stdout = st.out.read_text(errors="replace")
            stderr = st.err.read_text(errors="replace")
            if timed_out:
                self.done[name] = TimeoutError(
                    f"{name}: locust did not end within {timeout:g} s: {' '.join(st.cmd)}\n"
                    f"stdout tail:\n{stdout[-2000:]}\nstderr tail:\n{stderr[-3000:]}")
                continue
            proc = subprocess.CompletedProcess(st.cmd, st.popen.returncode, stdout, stderr)
            try:
                trace = get_json(st.sim.url + "/_sim/trace") if self.scenarios[name].trace and st.sim else None
            except Exception as e:  # noqa: BLE001 - kept for the test that asks for this run
                self.done[name] = RuntimeError(f"{name}: the simulator's trace: {e!r}; locust exited "
                                               f"{proc.returncode}, stderr tail:\n{stderr[-3000:]}")
                continue
            self.done[name] = Run(proc, st.report, trace, st.sim.url if st.sim else None, seconds)


def wanted(request: Any, needs: Callable[[Any], Sequence[str]]) -> list[str]:
    """The scenarios the selected tests of the requesting module need (``needs(item)``), in the
    order those tests run."""
    out: list[str] = []
    for item in request.session.items:
        if getattr(item, "module", None) is request.module:
            out += [n for n in needs(item) if n not in out]
    return out


def pool_in(request: Any, base: Path, scenarios: Mapping[str, Scenario], needs: Callable[[Any], Sequence[str]],
            parallel: int = 4) -> Iterator[Pool]:
    """For a module-scoped fixture: ``yield from pool_in(...)``."""
    with Pool(scenarios, base, wanted(request, needs), parallel) as pool:
        yield pool


def params(item: Any) -> dict[str, Any]:
    """A test item's parameters (none: {})."""
    spec = getattr(item, "callspec", None)
    return dict(spec.params) if spec is not None else {}


#: What a :class:`Driven` scenario yields: seconds to wait, or ``(cond, timeout, what)`` (optionally a
#: 4th item, the polling step in seconds, default 0.2): until ``cond()`` is true, whose value is sent
#: back; past ``timeout`` seconds an AssertionError naming ``what`` is thrown into the scenario.
Wait = float | tuple[Any, ...]


@dataclass
class _Live:
    gen: Any  # the scenario's generator
    wake: float = 0.0  # monotonic: when to poll (or resume) next
    cond: Callable[[], Any] | None = None
    deadline: float = 0.0
    step: float = 0.2
    what: str = ""
    timeout: float = 0.0


class Driven:
    """Scenarios that act on their processes mid-run (a kill, a stall, a restart), several at once
    (issue 55): each is a generator function that starts its processes, yields what it waits for
    (:data:`Wait`) and acts between the waits, and returns its result (or raises). ``get(name)``
    returns that result, advancing every live scenario until that one has ended; meanwhile the
    next wanted ones start, ``parallel`` at most. No threads: nothing advances while a test checks
    a result, so a scenario's waits are lower bounds (a wait may end a little late, never early).
    Closing throws GeneratorExit into the live ones (their ``finally`` clauses stop their processes).
    """

    def __init__(
        self, makers: Mapping[str, Callable[[], Any]], wanted: Sequence[str] = (), parallel: int = 4
    ) -> None:
        self.makers = makers
        self.parallel = parallel
        self.pending = [n for n in wanted if n in makers]
        self.live: dict[str, _Live] = {}
        self.done: dict[str, Any] = {}
        self.failed: dict[str, BaseException] = {}

    def get(self, name: str) -> Any:
        if name not in self.makers:
            raise KeyError(f"no scenario {name!r}")
        while name not in self.done and name not in self.failed:
            self._fill(first=name)
            self._tick()
        self._fill()
        if name in self.failed:
            raise self.failed[name]
        return self.done[name]

    def close(self) -> None:
        for live in self.live.values():
            live.gen.close()
        self.live.clear()

    def __enter__(self) -> Driven:
        self._fill()  # the first ones start now, before any test asks
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self, first: str | None = None) -> None:
        order = ([first] if first is not None else []) + [n for n in self.pending if n != first]
        for name in order:
            if name in self.live or name in self.done or name in self.failed:
                continue
            if len(self.live) >= self.parallel and name != first:
                return
            if name in self.pending:
                self.pending.remove(name)
            live = _Live(None)
            try:
                live.gen = self.makers[name]()
            except Exception as e:  # noqa: BLE001 - kept for the test that asks for this scenario
                self.failed[name] = e
                continue
            self.live[name] = live
            self._resume(name, lambda live=live: live.gen.send(None))

    def _resume(self, name: str, step: Callable[[], Any]) -> None:
        live = self.live[name]
        try:
            wait = step()
        except StopIteration as e:
            self.done[name] = e.value
            del self.live[name]
            return
        except BaseException as e:  # noqa: BLE001 - kept for the test that asks for this scenario
            self.failed[name] = e
            del self.live[name]
            return
        now = time.monotonic()
        if isinstance(wait, int | float):
            live.cond, live.wake = None, now + wait
        else:
            live.cond, live.timeout, live.what = wait[0], wait[1], wait[2]
            live.step = wait[3] if len(wait) > 3 else 0.2
            live.deadline, live.wake = now + live.timeout, now

    def _tick(self) -> None:
        for name, live in list(self.live.items()):
            now = time.monotonic()
            if now < live.wake:
                continue
            if live.cond is None:
                self._resume(name, lambda live=live: live.gen.send(None))
                continue
            try:
                got = live.cond()
            except Exception as e:  # noqa: BLE001 - the scenario's own to handle or raise
                self._resume(name, lambda live=live, e=e: live.gen.throw(e))
                continue
            if got:
                self._resume(name, lambda live=live, got=got: live.gen.send(got))
            elif time.monotonic() > live.deadline:
                err = AssertionError(f"{name}: {live.what}: not within {live.timeout:g} s")
                self._resume(name, lambda live=live, err=err: live.gen.throw(err))
            else:
                live.wake = time.monotonic() + live.step
        if self.live:
            time.sleep(max(0.0, min(0.05, min(v.wake for v in self.live.values()) - time.monotonic())))


def driven_in(
    request: Any,
    makers: Mapping[str, Callable[[], Any]],
    needs: Callable[[Any], Sequence[str]],
    parallel: int = 4,
) -> Iterator[Driven]:
    """For a module-scoped fixture: ``yield from driven_in(...)`` (the selected tests' scenarios, ahead)."""
    with Driven(makers, wanted(request, needs), parallel) as driven:
        yield driven
