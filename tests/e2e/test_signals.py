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
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from llm_users.metrics import Distribution
from tests.helpers import (
    LOCUSTFILES,
    free_port,
    get_json,
    master_args,
    processes_args,
    read_records,
    read_summary,
    start_locust,
    wait_served,
    worker_args,
)

pytestmark = pytest.mark.slow

SIM_ARGS = ("--ttft-ms", "20", "--itl-ms", "4", "--output-tokens", "25", "--seed", "3")
# --llm-preflight off: every request the simulator counts is a record (the preflight's is none)
COMMON = ["--headless", "--only-summary", "-u", "6", "-r", "6", "-t", "60s", "--stop-timeout", "10",
          "--llm-prometheus-port", "0", "--llm-preflight", "off"]


# Workers get --llm-client from the master (tests.helpers.LOCUSTFILES: each mode's locustfile).
CLIENT_ARGS = {"raw": [], "sdk": ["--llm-client", "sdk"]}



def _locust(args: list[str], log: Path, client: str = "raw", **kw: object) -> subprocess.Popen:
    return start_locust(args, log, locustfile=LOCUSTFILES[client], env={"OPENAI_API_KEY": "sk-test"}, **kw)


def _check(report: Path, sim_url: str, logs: list[Path], client: str = "raw") -> None:
    text = "\n".join(p.read_text() for p in logs)
    assert "Traceback" not in text, text[-4000:]
    assert "Bad file descriptor" not in text, text[-4000:]
    assert text.count("LLM summary") == 1, text[-4000:]
    records = read_records(report)
    summary = read_summary(report)
    ov = summary["overall"]
    stats = get_json(sim_url + "/_sim/stats")
    merged = ov["requests"] + ov["excluded_warmup"] + ov["excluded_cooldown"] + ov["interrupted"]
    interrupted = sum(1 for r in records if r["status"] == "interrupted")
    # every request the simulator saw is one record; those cut by the stop are "interrupted"
    assert len(records) == summary["records"] == merged == stats["started"], (len(records), summary["records"],
                                                                              merged, stats)
    assert stats["served"] == len(records) - interrupted == len(records) - ov["interrupted"], (
        f"simulator {stats}; records {len(records)}, interrupted {interrupted}")
    assert summary["workers"]["lost"] == []
    assert len(records) >= 20
    assert {r["client"] for r in records} == {client}
    # the connections the measured requests opened, merged as exactly as their latencies: one per
    # user in raw mode (kept), one per request through the openai SDK (it closes at [DONE])
    measured = [r for r in records if r["status"] not in ("interrupted", "cancelled") and not r["warmup"]
                and not r["cooldown"]]
    opened = [r["connect_ns"] for r in measured if r["connect_ns"] is not None]
    assert ov["connections_opened"] == ov["connect"]["count"] == len(opened), (ov["connections_opened"], len(opened))
    if client == "sdk":
        assert len(opened) == len(measured) == ov["requests"]
    else:
        assert len(opened) <= 6  # -u 6: each user's connection opened once (the first requests are warm-up)


@pytest.mark.parametrize("client", ["raw", "sdk"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_local_run_stops_cleanly_on_a_signal(sim_factory, tmp_path, sig, client) -> None:
    sim = sim_factory(*SIM_ARGS)
    report = tmp_path / "r"
    log = tmp_path / "local.log"
    proc = _locust([*COMMON, *CLIENT_ARGS[client], "--host", sim.url, "--llm-report", str(report)], log, client)
    wait_served(sim.url, 20, 30)
    proc.send_signal(sig)
    assert proc.wait(60) in (0, 1), log.read_text()[-3000:]
    _check(report, sim.url, [log], client)


# SDK mode for a signal to the master and Ctrl-C to the whole group per distributed set-up
# (a group signal also stops the SDK's requests in the workers themselves)
DISTRIBUTED = [("SIGTERM master", "raw"), ("SIGINT master", "raw"), ("SIGINT group", "raw"),
               ("SIGTERM master", "sdk"), ("SIGINT group", "sdk")]


@pytest.mark.parametrize(("how", "client"), DISTRIBUTED)
def test_processes_2_stops_cleanly_on_a_signal(sim_factory, tmp_path, how, client) -> None:
    sim = sim_factory(*SIM_ARGS)
    report = tmp_path / "r"
    log = tmp_path / "master.log"
    proc = _locust([*COMMON, *CLIENT_ARGS[client], *processes_args(2), "--host", sim.url, "--llm-report", str(report)], log, client, start_new_session=True)
    wait_served(sim.url, 20, 30)
    if how == "SIGINT group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
    assert proc.wait(60) in (0, 1), log.read_text()[-3000:]
    _check(report, sim.url, [log], client)


@pytest.mark.parametrize(("how", "client"), DISTRIBUTED)
def test_master_and_workers_stop_cleanly_on_a_signal(sim_factory, tmp_path, how, client) -> None:
    sim = sim_factory(*SIM_ARGS)
    port = free_port()
    report = tmp_path / "r"
    master = _locust([*COMMON, *CLIENT_ARGS[client], *master_args(port), "--host", sim.url, "--llm-report",
                      str(report)], tmp_path / "master.log", client, process_group=0)
    workers = [_locust(worker_args(port),
                       tmp_path / f"w{i}.log", client, process_group=master.pid) for i in range(2)]
    try:
        wait_served(sim.url, 20, 30)
        if how == "SIGINT group":
            os.killpg(master.pid, signal.SIGINT)
        else:
            master.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
        assert master.wait(60) in (0, 1), (tmp_path / "master.log").read_text()[-3000:]
        for w in workers:
            w.wait(30)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
    _check(report, sim.url, [tmp_path / "master.log", tmp_path / "w0.log", tmp_path / "w1.log"], client)


# A study stopped by a signal: its finished stages are kept frozen (one compressed block each,
# stages.py) and read back for the report; every one must say exactly what its records say.
# SIGTERM during a headless shape run killed the process before (Locust's handler comes after
# the shape's run: plugin._route_signals_to_main).
# no warm-up: SDK users' first requests (1-2 s on a loaded machine) took CI's whole first stage
STUDY = ["--llm-stages", "3:4s,4:4s,3:4s,4:30s", "--llm-settle", "0.2s", "--llm-warmup", "0"]


@pytest.mark.parametrize(("how", "client"), [("SIGTERM local", "raw"), ("SIGTERM processes", "sdk"),
                                             ("SIGINT processes", "raw")])
def test_a_study_stopped_by_a_signal_reports_every_finished_stage_exactly(sim_factory, tmp_path, how,
                                                                          client) -> None:
    sim = sim_factory(*SIM_ARGS)
    report, log = tmp_path / "r", tmp_path / "locust.log"
    extra = processes_args(2) if how.endswith("processes") else []
    proc = _locust([*COMMON, *STUDY, *CLIENT_ARGS[client], *extra, "--host", sim.url, "--llm-report", str(report)],
                   log, client)
    wait_served(sim.url, 20, 30)
    time.sleep(12.5)  # into the fourth stage: the first two are frozen (the stage two back, at each begin)
    proc.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
    assert proc.wait(60) in (0, 1), log.read_text()[-3000:]
    _check(report, sim.url, [log], client)
    stages, records = read_summary(report)["stages"], read_records(report)
    assert [st["users"] for st in stages] == [3, 4, 3, 4]
    for st in stages[:3]:  # finished before the signal: frozen, then read back
        lo, hi = st["start"] + st["settle_s"], st["start"] + st["settle_s"] + st["measured_s"]
        mine = [r for r in records if r["stage"] == st["index"] and lo <= r["start_time"] < hi and not r["warmup"]
                and r["status"] != "interrupted"]
        ttft, itl = Distribution(), Distribution()
        for r in mine:
            ttft.add(r["ttft_ns"])
            itl.add_many(r["itl_ns"])
        assert st["requests"] == len(mine), st["index"]
        # the freeze is read back with records in it: the first stage may have none, when the
        # users' start-up took it (CI: SDK workers' first request 4.3 s into a 4-s stage)
        assert len(mine) > 0 or st["index"] == 0, st["index"]
        assert st["ttft"] == {**st["ttft"], **ttft.summary_ms()} and st["itl"]["p99"] == itl.summary_ms()["p99"]
