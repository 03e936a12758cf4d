"""The suite in parallel shards on one machine: ``make test`` runs ``python -m tests.sharding``.

Most of the suite's time is spent waiting: real ``locust`` runs of a fixed ``-t``, a simulator
pacing its tokens, a master waiting for its workers. Run one after another, those waits added
up to 52-90 minutes on a 2-core machine; shards overlap them.

Every shard is a separate ``pytest`` process that collects the whole suite (``LLM_TEST_SHARD=k/N``)
and takes its part as it goes: whole files (``tests/real`` as one group, so its session-wide
servers start once; the network rig's files as one), longest first by the seconds each file last
took (``tests/durations.json``, refreshed with ``--record``; a file not there counts
:data:`UNKNOWN_S` a test), each shard claiming the next group nobody took when it is free (an
exclusive file in ``LLM_TEST_CLAIMS``), so the shards end together however wrong the recorded
seconds are. Without ``LLM_TEST_CLAIMS`` a shard keeps a fixed deal of the groups instead.

Tests marked ``serial`` (their bounds are timing: a latency measured to a millisecond, a send
lag) run after the shards, in ``--serial-lanes`` lanes of their own (``LLM_TEST_SHARD=serial/k/N``,
shared the same way): a lane waits far more than it computes, so three of them (1.1 cores on
average) load the 2 cores less than the one busy loop beside which the quiet lane must still pass
(``make test-loaded``). Tests marked ``serial(alone=True)`` need the machine to themselves and run
last, in a lane of their own (``LLM_TEST_SHARD=alone``): test_overloaded_client_is_flagged must
make the client the bottleneck, and beside two other lanes (ci8) its simulator, saturated too,
fell behind first (TTFT p50 420 ms) and the client was rightly called healthy.

pytest's own gevent can't run under pytest-xdist (its workers' threads meet Locust's monkey
patching: ``LoopExit``), hence processes of our own. A shard that collects nothing fails, as
``make test``'s own exit 5 does.

At the end it prints each lane's wall time and the 20 slowest tests. Stopped from outside
(Ctrl-C, SIGTERM from ``timeout`` or CI's time limit, its parent gone, even SIGKILL) it leaves
nothing running: the shards die with it (``PR_SET_PDEATHSIG``, tests/real/servers.py's
``die_with_parent``), and so do the servers and ``locust`` processes each test started.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.real.servers import die_with_parent

DURATIONS = Path(__file__).with_name("durations.json")
#: Seconds a test counts for when its file is not in DURATIONS.
UNKNOWN_S = 3.0
SLOWEST = 20  # the slowest tests named at the end
ALONE_MARK = "serial(alone=True)"  # how a test file asks for the machine to itself
ENV = "LLM_TEST_SHARD"
CLAIMS_ENV = "LLM_TEST_CLAIMS"  # a folder: the lanes of a phase claim groups in it
RECORD_ENV = "LLM_TEST_DURATIONS_OUT"


#: Files that build the network rig (tests/e2e/netns.py): its namespaces have one name per
#: checkout and each test's set-up removes any left, killing what runs in them, so two shards
#: must never run these at once (CI: a master SIGKILLed mid-run by the other shard's set-up).
NETNS_FILES = ("tests/e2e/test_multihost.py", "tests/e2e/test_degraded_network.py")


def group_of(nodeid: str) -> str:
    """The unit dealt to shards: a test's file; the real-server tier as one, the network rig's
    files as one."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/real/"):
        return "tests/real"
    return "tests/e2e/netns" if path in NETNS_FILES else path


def deal(groups: dict[str, float], shards: int) -> dict[str, int]:
    """Each group's shard: longest first, to the least loaded shard (ties: the lowest index)."""
    load = [0.0] * shards
    out: dict[str, int] = {}
    for g in sorted(groups, key=lambda g: (-groups[g], g)):
        k = min(range(shards), key=lambda i: (load[i], i))
        out[g] = k
        load[k] += groups[g]
    return out


def known_seconds() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "serial: timing-bound test, run alone after the parallel shards; "
                            "serial(alone=True): the machine to itself, after the serial lanes")


def phase_of(item: pytest.Item) -> str:
    """``"shards"``, ``"serial"`` (a quiet lane) or ``"alone"`` (the machine to itself)."""
    marks = list(item.iter_markers("serial"))  # a module's, a function's, a parameter's
    if not marks:
        return "shards"
    return "alone" if any(m.kwargs.get("alone") for m in marks) else "serial"


def parse_spec(spec: str) -> tuple[str, int, int]:
    """``"k/N"``: shard k of N; ``"serial"`` or ``"serial/k/N"``: a quiet lane; ``"alone"``."""
    if spec == "alone":
        return "alone", 0, 1
    phase = "serial" if spec.startswith("serial") else "shards"
    k, n = (int(x) for x in (spec.removeprefix("serial").strip("/") or "0/1").split("/"))
    return phase, k, n


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    phase, k, n = parse_spec(spec)
    wanted = [i for i in items if phase_of(i) == phase]
    known = known_seconds()
    groups: dict[str, float] = defaultdict(float)
    for item in wanted:
        groups[group_of(item.nodeid)] += known.get(item.nodeid, UNKNOWN_S)
    if os.environ.get(CLAIMS_ENV):  # every lane keeps the phase's tests and claims them a group at a time
        order = {g: i for i, g in enumerate(sorted(groups, key=lambda g: (-groups[g], g)))}
        keep = sorted(wanted, key=lambda i: order[group_of(i.nodeid)])  # stable: a group's own order kept
    else:
        where = deal(groups, n)
        keep = [i for i in wanted if where[group_of(i.nodeid)] == k]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def claim(claims: Path, group: str, who: str) -> bool:
    """Whether this lane is the first to ask for ``group`` (an exclusive create: one winner)."""
    try:
        fd = os.open(claims / hashlib.sha1(group.encode()).hexdigest(), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{who} {group}\n")
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """With ``LLM_TEST_CLAIMS``: the lanes of a phase share its groups as they go, longest first,
    each lane taking the next group nobody took when it is free (pytest's own loop otherwise).
    The next group is claimed as the current one's last test starts, so its module and session
    fixtures are torn down only when the next group does not share them."""
    claims = os.environ.get(CLAIMS_ENV)
    if not claims or session.config.option.collectonly or session.testsfailed:
        return None
    groups: dict[str, list[pytest.Item]] = {}
    for item in session.items:
        groups.setdefault(group_of(item.nodeid), []).append(item)
    pending = iter(groups.items())
    who = os.environ.get(ENV, "?")

    def take() -> list[pytest.Item]:
        for group, members in pending:
            if claim(Path(claims), group, who):
                return members
        return []

    current = take()
    while current:
        upcoming: list[pytest.Item] = []
        for i, item in enumerate(current):
            if i + 1 == len(current):
                upcoming = take()
            nextitem = current[i + 1] if i + 1 < len(current) else (upcoming[0] if upcoming else None)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        current = upcoming
    return True


_durations: dict[str, float] = {}
_cpu: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(RECORD_ENV):
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201
    """Each test's CPU seconds: its own process's and those of the processes it reaped
    (``locust`` runs, simulators); a module fixture's children count for the test that ends it."""
    if not os.environ.get(RECORD_ENV):
        yield
        return
    before = own_and_children_cpu_s()
    yield
    _cpu[item.nodeid] = own_and_children_cpu_s() - before


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(RECORD_ENV)
    if out and _durations:
        Path(out).write_text(json.dumps({k: round(v, 2) for k, v in sorted(_durations.items())}))
        Path(out).with_suffix(".cpu.json").write_text(json.dumps({k: round(v, 2) for k, v in sorted(_cpu.items())}))


def own_and_children_cpu_s() -> float:
    """CPU seconds (user and system) of this process and of every child it reaped."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def serial_args(args: list[str], needle: str = "mark.serial") -> list[str]:
    """``args`` with each directory replaced by its test files that mark a test ``serial``
    (a file that mentions ``needle``: collecting the whole suite again costs 20-60 s)."""
    out: list[str] = []
    for arg in args:
        path = Path(arg)
        if arg.startswith("-") or not path.is_dir():
            out.append(arg)
            continue
        out += sorted(str(f) for f in path.rglob("test_*.py") if needle in f.read_text(errors="replace"))
    return out


def bytecode_written(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for the test processes, without ``PYTHONDONTWRITEBYTECODE`` (set on this
    project's CI machines): with it every ``locust``, worker and simulator a test starts compiled
    the project's modules again, 0.2-0.4 s of CPU each (a refused ``locust`` start: 0.7-1.0 s, 0.5 s
    cached), and every pytest rewrote every test file's asserts. The bytecode goes where Python
    puts it (``__pycache__``, ignored by git); site-packages already has pip's. (A cache of its own,
    ``PYTHONPYCACHEPREFIX``, made every shard compile all of site-packages and the real servers'
    venv again, 146 MB: ci13's shards took as much CPU as before.)"""
    return {k: v for k, v in environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Stopped(Exception):
    """``make test`` was stopped from outside: a signal, or its parent went away."""


def _stop_on_signals() -> None:
    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)


def _end(procs: list[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """Stop every pytest still running (SIGTERM, then SIGKILL): their children die with them."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in live:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that each keep a core busy (``while 1: pass``) until ended: the load of a
    shared CI machine, for ``make test-loaded``. They die with this process."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"], preexec_fn=die_with_parent())
            for _ in range(n)]


def children_cpu_s() -> float:
    """CPU seconds (user and system) of every process this one started and reaped, and of the
    processes each of them reaped in turn: pytest, its ``locust`` runs, simulators and servers."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def slowest(durations: dict[str, float], n: int = SLOWEST) -> list[str]:
    """The ``n`` slowest tests, one line each: seconds and node id."""
    top = sorted(durations.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [f"{s:8.1f} s  {nodeid}" for nodeid, s in top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sharding", description=__doc__.split("\n\n")[0])
    ap.add_argument("-j", "--shards", type=int, default=3, help="pytest processes at once (default 3)")
    ap.add_argument("--record", action="store_true", help=f"write each test's seconds to {DURATIONS.name}")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N busy loops beside the shards, as on a loaded machine (make test-loaded)")
    ap.add_argument("--serial-lanes", type=int, default=3, metavar="N",
                    help="serial (timing-bound) lanes at once, after the shards (default 3)")
    ap.add_argument("--busy-serial", type=int, default=0, metavar="N", help="N busy loops beside the serial lanes")
    ap.add_argument("pytest_args", nargs="*", default=["tests"], help="passed to every pytest (default: tests)")
    a = ap.parse_args(argv)
    logs = Path(os.environ.get("LLM_TEST_LOGS", ".test-shards"))
    logs.mkdir(exist_ok=True)
    for old in [*logs.glob("*.durations.json"), *logs.glob("*.durations.cpu.json"), *logs.glob("claims/*/*")]:
        old.unlink()
    base = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider"]
    t0 = time.monotonic()
    parent = os.getppid()
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, spec: str, args: list[str], out: subprocess._FILE) -> subprocess.Popen[bytes]:
        phase = logs / "claims" / parse_spec(spec)[0]
        phase.mkdir(parents=True, exist_ok=True)
        env = {**bytecode_written(os.environ), ENV: spec, CLAIMS_ENV: str(phase),
               RECORD_ENV: str(logs / f"{name}.durations.json")}
        proc = subprocess.Popen([*base, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent())
        procs.append(proc)
        return proc

    def wait(proc: subprocess.Popen[bytes]) -> int | None:
        """One second of waiting; Stopped when this process's parent went away."""
        if os.getppid() != parent:
            raise Stopped("its parent went away")
        try:
            return proc.wait(1)
        except subprocess.TimeoutExpired:
            return None

    def collect(lanes_now: list[tuple[str, subprocess.Popen[bytes]]], since: float) -> None:
        """Wait for every lane of ``lanes_now``; each one's output as soon as it ends."""
        while not all(name in codes for name, _ in lanes_now):
            for name, proc in lanes_now:
                if name not in codes and (wait(proc) if proc.poll() is None else proc.returncode) is not None:
                    codes[name] = proc.returncode
                    lanes[name] = time.monotonic() - since
                    sys.stdout.write(f"\n===== {name}: exit {codes[name]} after {lanes[name]:.0f} s =====\n")
                    sys.stdout.write((logs / f"{name}.log").read_text(errors="replace"))
                    sys.stdout.flush()

    _stop_on_signals()
    if a.busy or a.busy_serial:
        sys.stdout.write(f"make test: {a.busy} busy loop(s) beside the shards, {a.busy_serial} beside the serial lanes\n")
    lanes: dict[str, float] = {}
    codes: dict[str, int] = {}
    cpu0 = children_cpu_s()
    try:
        loops = busy_loops(a.busy)
        procs += loops
        shards = [(f"shard{k}", start(f"shard{k}", f"{k}/{a.shards}", a.pytest_args,
                                      (logs / f"shard{k}.log").open("wb"))) for k in range(a.shards)]
        collect(shards, t0)
        _end(loops)
        shards_cpu = children_cpu_s() - cpu0  # the busy loops' too: reaped by _end
        loops = busy_loops(a.busy_serial)
        procs += loops
        begun = time.monotonic()
        files = serial_args(a.pytest_args)
        n = max(1, min(a.serial_lanes, len({group_of(f) for f in files if not f.startswith("-")})))
        quiet = [(f"serial{k}", start(f"serial{k}", f"serial/{k}/{n}", files, (logs / f"serial{k}.log").open("wb")))
                 for k in range(n)]
        sys.stdout.write(f"\n===== serial: the timing-bound tests in {n} lane(s), from {begun - t0:.0f} s =====\n")
        sys.stdout.flush()
        collect(quiet, begun)
        serial_cpu = children_cpu_s() - cpu0 - shards_cpu
        phases = {"shards": (shards_cpu, max(lanes[n] for n, _ in shards)),
                  "serial lanes": (serial_cpu, max(lanes[n] for n, _ in quiet))}
        alone_files = serial_args(a.pytest_args, ALONE_MARK)
        if any(not f.startswith("-") for f in alone_files):  # no lane beside them (the busy loops stay)
            begun = time.monotonic()
            sys.stdout.write(f"\n===== alone: the tests that need the machine to themselves, from {begun - t0:.0f} s =====\n")
            sys.stdout.flush()
            alone = [("alone", start("alone", "alone", alone_files, (logs / "alone.log").open("wb")))]
            collect(alone, begun)
            phases["alone"] = (children_cpu_s() - cpu0 - shards_cpu - serial_cpu, lanes["alone"])
        _end(loops)
    except Stopped as e:
        sys.stdout.write(f"\nmake test: stopped ({e}): ending every test process\n")
        sys.stdout.flush()
        _end(procs)
        return 1
    merged: dict[str, float] = {}
    for f in logs.glob("*.durations.json"):
        merged.update(json.loads(f.read_text()))
    cpu: dict[str, float] = {}
    for f in logs.glob("*.durations.cpu.json"):
        cpu.update(json.loads(f.read_text()))
    if a.record:
        DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
    sys.stdout.write(f"\nmake test: the {SLOWEST} slowest tests\n" + "".join(f"{line}\n" for line in slowest(merged)))
    sys.stdout.write(f"make test: the {SLOWEST} tests that took the most CPU (with their processes')\n"
                     + "".join(f"{line}\n" for line in slowest(cpu)))
    sys.stdout.write("make test: lanes " + ", ".join(f"{k} {s:.0f} s" for k, s in lanes.items()) + "\n")
    sys.stdout.write("make test: CPU " + ", ".join(f"{k} {c:.0f} s in {w:.0f} s ({c / w:.2f} of {os.cpu_count()} cores)"
                                                   for k, (c, w) in phases.items() if w > 0)
                     + (" (the busy loops' included)" if a.busy or a.busy_serial else "") + "\n")
    bad = {k: c for k, c in codes.items() if c != 0}
    for k, c in bad.items():
        why = "collected no tests" if c == 5 else "failed"
        sys.stdout.write(f"make test: {k} {why} (pytest exit {c}; its output: above, and in {logs / f'{k}.log'})\n")
    sys.stdout.write(f"make test: {len(codes)} pytest runs in {time.monotonic() - t0:.0f} s, "
                     f"{'all passed' if not bad else f'{len(bad)} not passed'}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
