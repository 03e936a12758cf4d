"""tests/sharding.py: files dealt to shards by their seconds, the real tier kept whole, the
serial tests' files found without collecting the suite."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from tests.sharding import (
    ALONE_MARK,
    CLAIMS_ENV,
    ENV,
    RECORD_ENV,
    bytecode_written,
    deal,
    group_of,
    serial_args,
)


def _unsharded() -> dict[str, str]:
    """This process's environment without the shard's own settings (under ``make test`` a test
    runs in a shard that claims its groups: a pytest it starts must not join that shard)."""
    import os

    return {k: v for k, v in os.environ.items() if k not in (ENV, CLAIMS_ENV, RECORD_ENV)}


def test_groups_are_files_and_the_real_tier_is_one() -> None:
    assert group_of("tests/e2e/test_a.py::test_x[raw]") == "tests/e2e/test_a.py"
    assert group_of("tests/real/test_llamacpp.py::test_y") == group_of("tests/real/test_litellm.py::t") == "tests/real"
    # the network rig's namespaces are one set per machine: its files never in two shards at once
    assert group_of("tests/e2e/test_multihost.py::t") == group_of("tests/e2e/test_degraded_network.py::u")


def test_every_file_that_builds_the_network_rig_is_in_its_group() -> None:
    from pathlib import Path

    from tests.sharding import NETNS_FILES

    needle = "from tests.e2e import " + "netns"  # split: this file is not a user
    users = sorted(str(p) for p in Path("tests").rglob("test_*.py") if needle in p.read_text())
    assert users == sorted(NETNS_FILES)


def test_longest_first_to_the_least_loaded_shard() -> None:
    groups = {"a": 100.0, "b": 60.0, "c": 50.0, "d": 40.0, "e": 10.0}
    where = deal(groups, 2)
    load = [sum(s for g, s in groups.items() if where[g] == k) for k in range(2)]
    assert where == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1} and load == [140.0, 120.0]
    assert deal(groups, 2) == where  # every shard process computes the same deal
    assert set(deal(groups, 3).values()) == {0, 1, 2}


def test_serial_args_keep_options_and_name_only_marked_files(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("import pytest\npytestmark = pytest.mark.serial\n")
    (tmp_path / "test_b.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_c.py").write_text("@pytest.mark.serial\ndef test_c():\n    pass\n")
    assert serial_args([str(tmp_path), "-k", "x"]) == [str(tmp_path / "sub" / "test_c.py"),
                                                       str(tmp_path / "test_a.py"), "-k", "x"]



def test_shards_at_once_then_the_serial_lanes_together(tmp_path: Path) -> None:
    """``python -m tests.sharding`` starts the shards at once and the serial lanes (one per file
    that marks a test ``serial``, at most ``--serial-lanes``) together after every shard ended; each
    run's output is printed and kept, and the summary line counts the runs. (The files lie outside
    this checkout, so the plugin that deals tests does not load: every run runs both tests.)"""
    import os
    import subprocess
    import sys

    for name in ("where", "there"):
        (tmp_path / f"test_{name}.py").write_text(
            "import os, time  # mark.serial: tests.sharding.serial_args picks this file\n"
            f"def test_{name}():\n"
            f"    with open({str(tmp_path / 'seen')!r}, 'a') as f:\n"
            "        f.write(f\"{os.environ['LLM_TEST_SHARD']} {time.monotonic()} \")\n"
            "        time.sleep(1)\n"
            "        f.write(f\"{time.monotonic()}\\n\")\n")
    logs = tmp_path / "logs"
    proc = subprocess.run([sys.executable, "-m", "tests.sharding", "-j", "2", "--serial-lanes", "3", str(tmp_path)],
                          env={**os.environ, "LLM_TEST_LOGS": str(logs)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen: dict[str, list[tuple[float, float]]] = {}
    for spec, t0, t1 in (ln.split() for ln in (tmp_path / "seen").read_text().splitlines()):
        seen.setdefault(spec, []).append((float(t0), float(t1)))
    assert set(seen) == {"0/2", "1/2", "serial/0/2", "serial/1/2"}  # two files: two lanes, not three

    def span(spec: str) -> tuple[float, float]:
        return min(t for t, _ in seen[spec]), max(t for _, t in seen[spec])

    assert span("0/2")[0] < span("1/2")[1] and span("1/2")[0] < span("0/2")[1]  # the shards overlap
    assert span("serial/0/2")[0] < span("serial/1/2")[1] and span("serial/1/2")[0] < span("serial/0/2")[1]
    assert min(span("serial/0/2")[0], span("serial/1/2")[0]) > max(span("0/2")[1], span("1/2")[1])
    assert proc.stdout.count("2 passed") == 4
    assert "serial: the timing-bound tests in 2 lane(s)" in proc.stdout
    assert "make test: 4 pytest runs in" in proc.stdout and "all passed" in proc.stdout
    assert re.search(r"make test: CPU shards \d+ s in \d+ s \(\d\.\d\d of \d+ cores\), serial lanes ", proc.stdout)
    assert sorted(p.name for p in logs.glob("*.log")) == ["serial0.log", "serial1.log", "shard0.log", "shard1.log"]


SLEEPER = '''
import os
import time
from pathlib import Path

from tests.real.servers import _spawn


def test_sleeper(tmp_path):
    server = _spawn("sleep", ["sleep", "300"], tmp_path / "log")  # its own session, as a real server's
    Path(os.environ["SLEEPER_PIDS"]).write_text(f"{os.getpid()} {server.pid}")
    time.sleep(300)
'''


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (a container's init may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "parent-gone"])
def test_a_stopped_run_leaves_nothing_running(tmp_path: Path, how: str) -> None:
    """Issue 55 item 6: ``make test`` stopped from outside (``timeout``'s SIGTERM, a kill -9, its
    parent gone) ends its shards and what their tests started, a server in its own session too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_sleeper.py").write_text(SLEEPER)
    pids = tmp_path / "pids"
    env = {**os.environ, "LLM_TEST_LOGS": str(tmp_path / "logs"), "SLEEPER_PIDS": str(pids)}
    cmd = [sys.executable, "-m", "tests.sharding", "-j", "1", str(tmp_path / "t")]
    if how == "parent-gone":  # as `timeout make test` ends make alone
        cmd = ["sh", "-c", " ".join(cmd) + " & wait"]
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() or len(pids.read_text().split()) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the sleeper test never started"
            time.sleep(0.1)
        shard, server = (int(p) for p in pids.read_text().split())
        assert not _gone(shard) and not _gone(server)
        proc.send_signal(signal.SIGKILL if how != "SIGTERM" else signal.SIGTERM)
        proc.wait(30)
        deadline = time.monotonic() + 20
        while not (_gone(shard) and _gone(server)):
            assert time.monotonic() < deadline, f"left running: shard {not _gone(shard)}, server {not _gone(server)}"
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


BUSY_COUNTER = '''
import os
from pathlib import Path


def test_count_the_busy_loops():
    mine = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getppid() and b"while 1: pass" in cmd:
            mine.append(stat.parent.name)
    with open(os.environ["BUSY_SEEN"], "a") as f:
        f.write(os.environ["LLM_TEST_SHARD"] + " " + ",".join(mine) + "\\n")
'''


def test_loaded_lanes_run_beside_busy_loops_that_end_with_them(tmp_path: Path) -> None:
    """Issue 55 item 3: ``make test-loaded``'s ``--busy 2 --busy-serial 1``: two busy loops beside
    the shards, one beside the serial lane (the shards' ended first), none left at the end."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_busy.py").write_text(BUSY_COUNTER)
    seen = tmp_path / "seen"
    env = {**os.environ, "LLM_TEST_LOGS": str(tmp_path / "logs"), "BUSY_SEEN": str(seen)}
    proc = subprocess.run([sys.executable, "-m", "tests.sharding", "-j", "1", "--busy", "2", "--busy-serial", "1",
                           str(tmp_path / "test_busy.py")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 busy loop(s) beside the shards, 1 beside the serial lanes" in proc.stdout
    lanes = dict(line.split(" ") for line in seen.read_text().splitlines())
    shard, serial = lanes["0/1"].split(","), lanes["serial/0/1"].split(",")
    assert len(shard) == 2 and len(serial) == 1 and not set(shard) & set(serial)
    assert all(_gone(int(pid)) for pid in shard + serial)


def test_serial_lanes_split_the_serial_tests_by_group(tmp_path: Path) -> None:
    """``LLM_TEST_SHARD=serial/k/N``: each lane keeps only ``serial`` tests, every one of them in
    exactly one lane, the network rig's files in the same lane; ``k/N`` keeps none of them."""
    import subprocess
    import sys

    files = ["tests/e2e/test_multihost.py", "tests/e2e/test_degraded_network.py",
             "tests/e2e/test_study_windows.py", "tests/e2e/test_cancel.py"]

    def kept(spec: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                              env={**_unsharded(), "LLM_TEST_SHARD": spec}, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:]
        return {ln for ln in proc.stdout.splitlines() if "::" in ln}

    every, lanes, shard = kept("serial"), [kept("serial/0/2"), kept("serial/1/2")], kept("0/1")
    assert every and all(lanes) and not lanes[0] & lanes[1] and lanes[0] | lanes[1] == every
    assert not every & shard and shard  # the shards keep what the lanes do not
    rig = {i for i in every if group_of(i) == "tests/e2e/netns"}
    assert rig and any(rig <= lane for lane in lanes)


def test_lanes_claim_whole_groups_as_they_go_and_each_runs_once(tmp_path: Path) -> None:
    """``LLM_TEST_CLAIMS``: two shards started together on the same files take the groups between
    them as each is free (longest first): every test runs in exactly one shard, a file never in two,
    and each group's claim names the shard that ran it."""
    import subprocess
    import sys

    files = ["tests/test_slo.py", "tests/test_errors.py", "tests/test_events.py", "tests/metrics/test_stats.py",
             "tests/test_key_scope.py", "tests/load/test_search.py"]
    claims = tmp_path / "claims"
    claims.mkdir()

    def start(spec: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *files],
                                env={**_unsharded(), "LLM_TEST_SHARD": spec, "LLM_TEST_CLAIMS": str(claims)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    procs = {spec: start(spec) for spec in ("0/2", "1/2")}
    ran: dict[str, set[str]] = {}
    for spec, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
        ran[spec] = {ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("PASSED ")}
    every = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                           env=_unsharded(), capture_output=True, text=True, timeout=120).stdout
    every_id = {ln for ln in every.splitlines() if "::" in ln}
    assert not ran["0/2"] & ran["1/2"] and ran["0/2"] | ran["1/2"] == every_id
    by_file = {spec: {group_of(t) for t in ids} for spec, ids in ran.items()}
    assert not by_file["0/2"] & by_file["1/2"]
    owners = dict(reversed(p.read_text().split()) for p in claims.iterdir())
    assert owners == {g: spec for spec, groups in by_file.items() for g in groups}


def test_the_alone_tests_run_in_their_own_lane_and_in_no_other(tmp_path: Path) -> None:
    """``serial(alone=True)``: ``LLM_TEST_SHARD=alone`` keeps exactly those tests; the quiet lanes
    and the shards keep none of them; the file is found for the alone lane without collecting."""
    import subprocess
    import sys

    path = "tests/e2e/test_selfcheck.py"

    def kept(spec: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", path],
                              env={**_unsharded(), "LLM_TEST_SHARD": spec}, capture_output=True, text=True, timeout=120)
        assert proc.returncode in (0, 5), proc.stdout[-2000:]
        return {ln.split("::")[1] for ln in proc.stdout.splitlines() if "::" in ln}

    assert kept("alone") == {"test_overloaded_client_is_flagged"}
    serial = kept("serial")
    assert serial and "test_overloaded_client_is_flagged" not in serial and not kept("0/1")
    assert path in serial_args(["tests/e2e"], ALONE_MARK) and "tests/e2e/test_openloop.py" in serial_args(["tests/e2e"], ALONE_MARK)


def test_the_test_processes_write_their_bytecode() -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` every process a test starts compiled the project again:
    the shards' environment drops it and keeps the rest."""
    env = bytecode_written({"PYTHONDONTWRITEBYTECODE": "1", "KEEP": "x"})
    assert env == {"KEEP": "x"}
