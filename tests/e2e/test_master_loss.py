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
machine."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.test_disk_faults import leftover
from tests.helpers import (
    LOCUSTFILES,
    free_port,
    get_json,
    master_args,
    processes_args,
    start_locust,
    wait_served,
    worker_args,
)

EXIT_GUARD_S = 120.0  # a hang guard: the exit comes 5-10 s after the kill (5 s of silence, the probe, the file)
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


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_master_sigkill_workers_keep_their_records_and_exit_1(sim_factory, tmp_path: Path, client: str) -> None:
    sim = sim_factory("--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "20", "--seed", "3")
    port = free_port()
    report = tmp_path / "r"
    locustfile, env = LOCUSTFILES[client], {"OPENAI_API_KEY": "sk-test"}
    master = start_locust([*master_args(port), "--headless", "--only-summary", "-u", "6", "-r", "6", "-t", "600s",
                    "--stop-timeout", "10", "--host", sim.url, "--llm-report", str(report), "--llm-client", client,
                    "--llm-preflight", "off"], tmp_path / "master.log", locustfile=locustfile, cwd=tmp_path, env=env)
    logs = [tmp_path / f"w{i}.log" for i in range(2)]
    workers = [start_locust(worker_args(port), log, locustfile=locustfile, cwd=tmp_path, env=env)
               for log in logs]
    try:
        wait_served(sim.url, 60)
        time.sleep(3.3)  # mid-interval: some records shipped and confirmed, some not yet shipped
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        codes = [w.wait(EXIT_GUARD_S) for w in workers]
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
    texts = [log.read_text() for log in logs]
    assert codes == [1, 1], [t[-2000:] for t in texts]
    kept_ids: list[str] = []
    confirmed = 0
    for text in texts:
        assert "Traceback" not in text, text[-3000:]
        assert len(lost_after(text)) == 1, text[-2000:]
        m = re.search(r"locust-llm: \S+: the master confirmed (\d+) records; the (\d+) it did not are in (\S+)", text)
        assert m, text[-2000:]
        confirmed += int(m.group(1))
        path = Path(m.group(3))
        assert path.parent == tmp_path  # the worker's own directory (no --llm-report on the worker)
        kept = ids(path)
        assert len(kept) == int(m.group(2))
        kept_ids += kept
    stats = get_json(sim.url + "/_sim/stats")
    assert stats["started"] == stats["served"]  # the workers' users finished what they had started
    master_ids = ids(report / "requests.jsonl")  # written as payloads arrived: a SIGKILL keeps them
    assert kept_ids, "the workers had records the master never confirmed"
    assert confirmed + len(kept_ids) == stats["served"]  # every request: confirmed, or in a worker's file
    assert len(set(master_ids) | set(kept_ids)) == stats["served"]  # nothing lost
    assert len(master_ids) >= confirmed  # what the master confirmed is in its file
    assert len(set(kept_ids)) == len(kept_ids)
    assert not leftover(str(tmp_path))


def test_processes_2_master_sigkill_leaves_nothing(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory("--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "20")
    report = tmp_path / "r"
    master = start_locust([*processes_args(2), "--headless", "--only-summary", "-u", "4", "-r", "4", "-t", "600s",
                    "--host", sim.url, "--llm-report", str(report), "--llm-preflight", "off"], tmp_path / "master.log", cwd=tmp_path)
    try:
        wait_served(sim.url, 20)
        children = [p for p in leftover(str(report)) if p != master.pid]
        assert len(children) == 2, children
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        killed = time.monotonic()
        while leftover(str(report)) and time.monotonic() - killed < EXIT_GUARD_S:
            time.sleep(0.2)
        left = leftover(str(report))
    finally:
        for pid in leftover(str(report)):
            os.kill(pid, signal.SIGKILL)
    assert left == [], left  # every forked worker exited (our watch: the lines below), none hung
    text = (tmp_path / "master.log").read_text()
    assert len(lost_after(text)) == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
