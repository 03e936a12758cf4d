"""Issue 33 item 3: the master dies (SIGKILL) mid-run.

Workers notice within seconds (no heartbeat for 5 s and the master's port refuses), stop their
users, write the records the master never confirmed to their own file named in one line, and
exit 1. Every request the simulator served is in the master's requests.jsonl (written as
payloads arrived) or in a worker's file, none lost. With ``--processes 2`` the forked workers of
a killed master exit within seconds: nothing of the run is left.

"Within seconds" is told by what the workers say, not by the clock: each says it lost the
master through our watch's 5 s rule (no heartbeat, and the port refuses), after a silence of
5 s or more and under Locust's own heartbeat timeout (60 s, which says nothing of the kind). The
runs ask for ``-t 600s`` and the test waits up to :data:`EXIT_GUARD_S` for the exits, so
neither a worker that waited out its run nor one that hung can pass, however loaded the
machine.

The three runs go side by side, each with its own simulator, ports and directory
(tests.e2e.locust_pool.Driven): the kill comes on events (requests served, both workers' records
at the master), the exits are awaited by polling."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llm_users.sim.launcher import start_simulator
from tests.e2e.locust_pool import Driven, driven_in
from tests.e2e.test_disk_faults import leftover
from tests.helpers import (
    LOCUSTFILES,
    free_port,
    get_json,
    master_args,
    processes_args,
    start_locust,
    worker_args,
)

#: a hang guard: the exit comes 5-10 s after the kill (5 s of silence, the probe, the file)
EXIT_GUARD_S = 120.0
#: A worker's line when our watch, on its 5 s rule (silent, and the port refuses), lost the master
LOST = r"locust-llm: \S+: lost the master \(no heartbeat from the master for (\d+) s and \S+ refuses connections\)"


def lost_after(text: str) -> list[int]:
    """The silence (s) each "lost the master" line of ``text`` gives, each checked: 5 s or more
    (our rule), under Locust's own 60 s."""
    silences = [int(s) for s in re.findall(LOST, text)]
    assert all(5 <= s < 60 for s in silences), silences
    return silences


def ids(path: Path) -> list[str]:
    return [json.loads(ln)["request_id"] for ln in path.read_text().splitlines() if ln.strip()]


SIM = ["--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "20"]


def _shipped_by_both(report: Path) -> bool:
    """The master's requests.jsonl holds records of both workers: each has shipped, and been confirmed."""
    try:
        lines = (report / "requests.jsonl").read_text().splitlines()
    except OSError:
        return False
    # the last line may be half-written
    return len({json.loads(ln)["worker"] for ln in lines[:-1] if ln.strip()}) == 2


def _sigkill_master(base: Path, client: str) -> Iterator[Any]:
    """Master and two workers; the master SIGKILLed mid-run (a :class:`tests.e2e.locust_pool.Driven`
    scenario): returns the exit codes, the workers' logs, the simulator's stats, what is left."""
    base.mkdir(parents=True, exist_ok=True)
    sim = start_simulator([*SIM, "--seed", "3"])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        report = base / "r"
        locustfile, env = LOCUSTFILES[client], {"OPENAI_API_KEY": "sk-test"}
        args = [*master_args(port), "--headless", "--only-summary", "-u", "6", "-r", "6", "-t", "600s",
                "--stop-timeout", "10", "--host", sim.url, "--llm-report", str(report), "--llm-client", client,
                "--llm-preflight", "off"]  # fmt: skip
        procs.append(start_locust(args, base / "master.log", locustfile=locustfile, cwd=base, env=env))
        logs = [base / f"w{i}.log" for i in range(2)]
        procs += [
            start_locust(worker_args(port), log, locustfile=locustfile, cwd=base, env=env) for log in logs
        ]
        master, workers = procs[0], procs[1:]
        yield (lambda: get_json(sim.url + "/_sim/stats")["served"] >= 60, 60, "60 requests served")
        # both workers have shipped (and the master confirmed) records; then mid-interval (2 s): some
        # records shipped and confirmed, some not yet shipped
        yield (lambda: _shipped_by_both(report), 60, "records of both workers in the master's requests.jsonl")
        yield 1.0
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        yield (lambda: all(w.poll() is not None for w in workers), EXIT_GUARD_S, "the workers' exits")
        codes = [w.returncode for w in workers]
        stats = get_json(sim.url + "/_sim/stats")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sim.stop()
    return SimpleNamespace(
        codes=codes,
        texts=[log.read_text() for log in logs],
        stats=stats,
        report=report,
        left=leftover(str(base)),
    )


def _processes_sigkill(base: Path) -> Iterator[Any]:
    """``--processes 2``, the master SIGKILLed mid-run: returns its forked workers before the kill,
    what is left after it, the log."""
    base.mkdir(parents=True, exist_ok=True)
    sim = start_simulator(SIM)
    report = base / "r"
    master = None
    try:
        args = [*processes_args(2), "--headless", "--only-summary", "-u", "4", "-r", "4", "-t", "600s",
                "--host", sim.url, "--llm-report", str(report), "--llm-preflight", "off"]  # fmt: skip
        master = start_locust(args, base / "master.log", cwd=base)
        yield (lambda: get_json(sim.url + "/_sim/stats")["served"] >= 20, 60, "20 requests served")
        children = [p for p in leftover(str(report)) if p != master.pid]
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        yield (lambda: not leftover(str(report)), EXIT_GUARD_S, "the forked workers' exits")
        left = leftover(str(report))
    finally:
        if master is not None and master.poll() is None:
            master.kill()
            master.wait()
        for pid in leftover(str(report)):
            os.kill(pid, signal.SIGKILL)
        sim.stop()
    return SimpleNamespace(children=children, left=left, text=(base / "master.log").read_text())


@pytest.fixture(scope="module")
def kills(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    """Every scenario of the module, side by side (each its own simulator, ports and directory)."""
    base = tmp_path_factory.mktemp("loss")
    makers = {
        "raw": partial(_sigkill_master, base / "raw", "raw"),
        "sdk": partial(_sigkill_master, base / "sdk", "sdk"),
        "processes-2": partial(_processes_sigkill, base / "processes-2"),
    }
    needs = {
        "test_master_sigkill_workers_keep_their_records_and_exit_1": lambda item: [
            item.callspec.params["client"]
        ],
        "test_processes_2_master_sigkill_leaves_nothing": lambda item: ["processes-2"],
    }
    yield from driven_in(request, makers, lambda item: needs[item.originalname](item), parallel=3)


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_master_sigkill_workers_keep_their_records_and_exit_1(kills: Driven, client: str) -> None:
    got = kills.get(client)
    texts, stats, report = got.texts, got.stats, got.report
    tmp_path = report.parent
    assert got.codes == [1, 1], [t[-2000:] for t in texts]
    kept_ids: list[str] = []
    confirmed = 0
    for text in texts:
        assert "Traceback" not in text, text[-3000:]
        assert len(lost_after(text)) == 1, text[-2000:]
        m = re.search(
            r"locust-llm: \S+: the master confirmed (\d+) records; the (\d+) it did not are in (\S+)", text
        )
        assert m, text[-2000:]
        confirmed += int(m.group(1))
        path = Path(m.group(3))
        assert path.parent == tmp_path  # the worker's own directory (no --llm-report on the worker)
        kept = ids(path)
        assert len(kept) == int(m.group(2))
        kept_ids += kept
    assert stats["started"] == stats["served"]  # the workers' users finished what they had started
    master_ids = ids(report / "requests.jsonl")  # written as payloads arrived: a SIGKILL keeps them
    assert kept_ids, "the workers had records the master never confirmed"
    assert confirmed + len(kept_ids) == stats["served"]  # every request: confirmed, or in a worker's file
    assert len(set(master_ids) | set(kept_ids)) == stats["served"]  # nothing lost
    assert len(master_ids) >= confirmed  # what the master confirmed is in its file
    assert len(set(kept_ids)) == len(kept_ids)
    assert not got.left


def test_processes_2_master_sigkill_leaves_nothing(kills: Driven) -> None:
    got = kills.get("processes-2")
    assert len(got.children) == 2, got.children
    assert got.left == [], got.left  # every forked worker exited (our watch: the lines below), none hung
    text = got.text
    assert len(lost_after(text)) == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
