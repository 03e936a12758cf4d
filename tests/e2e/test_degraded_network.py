"""Issue 33 item 2: a distributed run over a degraded network, in the multi-host test's rig
(tests/e2e/netns.py: the simulator, the master and two workers each in their own network
namespace). This kernel has no netem qdisc, so the network is degraded the two ways it can be:

- latency and jitter by the TCP relay (tests/e2e/relay.py: 20 ms each way plus 0-10 ms);
- packet loss and partitions by the kernel's own packet filter (iptables DROP rules inside a
  namespace: ``-m statistic --mode random`` for 1% and 5% loss on the simulator's link, every
  packet between one worker and the server, or one worker and the master, for a few seconds).

After each: the master's merge is exact (merged percentiles == those of the union of the records,
no request counted twice), every request the simulator started is a record (none lost, none
resent), the filter really dropped packets, and nothing is left behind. A worker cut off from the
master past the master's heartbeat limit is re-admitted when it comes back (Locust's "self-healed");
its records, queued while cut off, arrive and merge once.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import netns
from tests.e2e.test_multihost import SIM_PORT, exact_merge, finish, p50, start_run, start_sim, wait_for
from tests.helpers import locust_request_count

pytestmark = pytest.mark.slow

DELAY_MS, JITTER_MS = 20, 10


@pytest.fixture
def net() -> Iterator[netns.TestNet]:
    with netns.fresh_net(netns.filter_unavailable) as n:  # CI installs iptables (.ci/run): fails there if absent
        yield n


def sim_counts(net: netns.TestNet) -> dict[str, Any]:
    url = f"http://{net.hosts['sim']}:{SIM_PORT}/_sim/stats"
    code = f"import urllib.request;print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
    return json.loads(net.run("sim", [sys.executable, "-c", code]))


def spawned(log: Path) -> bool:
    text = log.read_text()
    return any(s in text for s in ("All users spawned", "Ramping to", "Spawning is complete"))


def run_exact(net: netns.TestNet, run_dir: Path, target: str, seconds: int = 6, users: int = 8,
              during: Any = None, client: str = "raw") -> list[dict[str, Any]]:
    """One distributed run; ``during(master_log, master)`` acts on the network mid-run (and may stop
    the master itself). Returns the records, checked: merged exactly, each request once, as many as
    the simulator started."""
    run_dir.mkdir()
    before = sim_counts(net)["started"]
    master, workers = start_run(net, run_dir, target, users=users, seconds=seconds, client=client)
    if during is not None:
        during(run_dir / "master.log", master)
    finish(master, workers, run_dir)
    records = exact_merge(run_dir / "report")
    started = sim_counts(net)["started"] - before
    reached = [r for r in records if r["error_category"] not in ("connect_timeout", "connect_error")]
    assert len(reached) == started, (len(reached), started, run_dir)  # none lost, none sent twice
    assert len(records) == locust_request_count(run_dir / "locust")
    return records


@pytest.mark.serial  # the gaps' spread to a few ms: a loaded machine bunches the clean run's tokens as much
def test_latency_with_jitter_is_measured_and_merged_exactly(net, tmp_path) -> None:
    sim = start_sim(net, tmp_path)
    relay = net.add("relay")
    net.popen("relay", [sys.executable, str(Path(__file__).parent / "relay.py"), relay, str(SIM_PORT), sim,
                        str(SIM_PORT), str(DELAY_MS), str(JITTER_MS)], tmp_path / "relay.log")
    wait_for(lambda: "relay: ready" in (tmp_path / "relay.log").read_text(), 10, "relay", tmp_path / "relay.log")
    direct = run_exact(net, tmp_path / "direct", f"http://{sim}:{SIM_PORT}")
    jittered = run_exact(net, tmp_path / "jitter", f"http://{relay}:{SIM_PORT}")
    assert all(r["status"] == "ok" for r in direct + jittered)
    # the round trip adds 2 x 20 ms and on average 2 x 5 ms of jitter to the first byte
    grown = p50(jittered, "ttfb_ns") - p50(direct, "ttfb_ns")
    assert 2 * DELAY_MS + 2 <= grown <= 2 * (DELAY_MS + JITTER_MS) + 8, grown
    # and the gaps now vary: ITL spread grows by about the jitter (p90 - p10 of the gaps)
    gaps = sorted(g for r in jittered if not r["warmup"] for g in r["itl_ns"])
    clean = sorted(g for r in direct if not r["warmup"] for g in r["itl_ns"])
    spread = (gaps[len(gaps) * 9 // 10] - gaps[len(gaps) // 10]) / 1e6
    assert spread > (clean[len(clean) * 9 // 10] - clean[len(clean) // 10]) / 1e6 + JITTER_MS / 3, spread


@pytest.mark.parametrize("loss", [0.01, 0.05], ids=["loss-1pct", "loss-5pct"])
def test_packet_loss_to_the_server_loses_no_record(net, tmp_path, loss: float) -> None:
    sim = start_sim(net, tmp_path)
    for chain in ("INPUT", "OUTPUT"):  # each direction of the simulator's link
        net.drop("sim", "-m", "statistic", "--mode", "random", "--probability", str(loss), chain=chain)
    records = run_exact(net, tmp_path / "run", f"http://{sim}:{SIM_PORT}")
    dropped = net.dropped("sim")
    assert dropped > 0, "the filter dropped nothing"
    # TCP retransmits what was lost: the requests succeed, later
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) >= 0.9 * len(records), {r["error_category"] for r in records}


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_a_worker_cut_off_from_the_server_for_3s_loses_no_record(net, tmp_path, client: str) -> None:
    sim = start_sim(net, tmp_path)
    cut: dict[str, float] = {}

    def partition(log: Path, _master: Any) -> None:
        wait_for(lambda: spawned(log), 40, "run", log)
        time.sleep(2)
        rules = [net.drop("w1", "-s", sim, chain="INPUT"), net.drop("w1", "-d", sim, chain="OUTPUT")]
        cut["at"] = time.time()
        time.sleep(3)
        for rule in rules:
            net.undrop("w1", rule)
        cut["healed"] = time.time()

    records = run_exact(net, tmp_path / "run", f"http://{sim}:{SIM_PORT}", seconds=12, during=partition, client=client)
    assert net.dropped("w1") == 0  # the rules are gone (their counters with them)
    # streams in flight waited and went on: the gap is the first token's (the request or its first
    # chunk was lost; CI's loaded machine put all four of w1's streams there once), a later one's,
    # or the connect's (SDK mode's openai client opens a connection per request: its SYN was lost)
    stalled = [r for r in records if r["status"] == "ok"
               and max([r["connect_ns"] or 0, r["ttft_ns"] or 0, *r["itl_ns"]]) > 2e9]
    assert stalled, "no stream stalled across the partition"
    across = [r for r in records if r["start_time"] < cut["at"] and r["start_time"] + (r["e2e_ns"] or 0) / 1e9 > cut["healed"]]
    assert all(r["status"] == "ok" for r in across), [(r["status"], r["error_category"]) for r in across]
    assert any(r["start_time"] > cut["healed"] + 0.5 and r["status"] == "ok" for r in records)


def test_a_worker_cut_off_from_the_master_comes_back_and_merges_once(net, tmp_path) -> None:
    sim = start_sim(net, tmp_path)
    cut: dict[str, float] = {}

    def partition(log: Path, master_proc: Any) -> None:
        wait_for(lambda: spawned(log), 40, "run", log)
        time.sleep(2)
        master = net.hosts["master"]
        rules = [net.drop("w1", "-s", master, chain="INPUT"), net.drop("w1", "-d", master, chain="OUTPUT")]
        cut["at"] = time.time()
        time.sleep(12)  # past the master's heartbeat limit (10 s, health/locust_costs.py): marked missing
        for rule in rules:
            net.undrop("w1", rule)
        cut["healed"] = time.time()
        # TCP's retransmission timer backed off during the cut (0.2 s doubling: ~6 s apart by its
        # end), so the worker's queued heartbeats reach the master 0-13 s after the heal (r43: the
        # run's -t stop came first and the worker's final data with it was lost). Stop the run
        # once the master has re-admitted it and both workers sent for a few seconds, as
        # Kubernetes stops a master (SIGTERM: the run ends as -t ends it); -t is only a bound.
        wait_for(lambda: "self-healed" in log.read_text(), 40, "the worker's re-admission", log)
        time.sleep(4)
        master_proc.send_signal(signal.SIGTERM)

    records = run_exact(net, tmp_path / "run", f"http://{sim}:{SIM_PORT}", seconds=80, during=partition)
    text = (tmp_path / "run" / "master.log").read_text()
    assert "failed to send heartbeat" in text and "self-healed" in text, text[-3000:]
    from tests.helpers import read_summary

    workers = read_summary(tmp_path / "run" / "report")["workers"]
    assert workers["lost"] == [], workers  # re-admitted: every record it sent arrived
    both = {r["worker"] for r in records if r["start_time"] > cut["healed"] + 1}
    assert len(both) == 2, both  # both workers send again after the partition
