"""Issue 33 item 4: the disk fills (a 64 KiB tmpfs) or the report directory vanishes mid-run.

Each: one ``locust-llm:`` line naming the file and the error, the console LLM summary still
printed, exit code non-zero, no traceback, and the run keeps going to its end (its requests
keep being served while the file cannot be written). Issue 54 item 6: every file left in the
report directory is whole (summary.json parses; no 0-byte or cut file, no temporary file).

Each run (a fault, a client mode) is a :class:`tests.e2e.locust_pool.Driven` scenario with a
simulator of its own (its counts are the run's), run once, two at a time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llm_users.sim.launcher import start_simulator
from tests.e2e.locust_pool import Driven, driven_in, params
from tests.helpers import LOCUST, LOCUSTFILES, ROOT, get_json

CLIENTS = ["raw", "sdk"]
SIM = ["--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "20"]


def _locust(sim_url: str, report: Path, seconds: int, client: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")} | {"OPENAI_API_KEY": "sk-test"}
    cmd = [LOCUST, "-f", str(ROOT / "locustfiles" / LOCUSTFILES[client]), "--headless", "--only-summary",
           "--loglevel", "WARNING", "-u", "4", "-r", "4", "-t", f"{seconds}s", "--host", sim_url,
           "--llm-report", str(report), "--llm-preflight", "off", "--llm-client", client]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def leftover(marker: str) -> list[int]:
    """PIDs whose command line holds ``marker`` (a test's tmp path): the run's processes."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def _assert_clean_failure(out: str, rc: int, needle: str) -> None:
    lines = [ln for ln in out.splitlines() if needle in ln]
    assert len(lines) == 1, out[-3000:]
    assert lines[0].startswith("locust-llm: "), lines
    assert "LLM summary" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert rc != 0, out[-3000:]


def assert_whole_or_absent(report: Path) -> None:
    """Every file the run left is complete: JSON parses, each JSONL line does, CSV and HTML end
    where they end; a file that could not be written is absent, and so is its temporary file."""
    for path in report.iterdir():
        data = path.read_bytes()
        assert not path.name.startswith("."), f"a temporary file was left: {path.name}"
        assert data, f"{path.name} is empty"
        if path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".jsonl":
            assert data.endswith(b"\n"), path.name
            for line in data.splitlines():
                json.loads(line)
        elif path.suffix == ".csv":
            assert data.endswith(b"\n"), path.name
        elif path.suffix == ".html":
            assert data.rstrip().endswith(b"</html>"), path.name


def _ended(p: subprocess.Popen[bytes]) -> bool:
    return p.poll() is not None


def _disk_full(base: Path, client: str, mounts: list[Path]) -> Iterator[Any]:
    """A run whose report directory is on a 64 KiB tmpfs (None: no tmpfs can be mounted here):
    returns its output, exit code, the simulator's count, what is left of its processes."""
    mnt = base / "tiny"
    mnt.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}"
    mounts.append(mnt)  # unmounted when the module ends, after its test has read the files
    report, log = mnt / "r", base / "log"
    sim = start_simulator(SIM)
    p = None
    try:
        p = _locust(sim.url, report, 4, client, log)
        yield (lambda: _ended(p), 90, "locust's exit", 0.1)
        served = get_json(sim.url + "/_sim/stats")["served"]
        left = leftover(str(report))
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        sim.stop()
    return SimpleNamespace(out=log.read_text(errors="replace"), rc=p.returncode, served=served, report=report,
                           left=left)


def _dir_removed(base: Path, client: str) -> Iterator[Any]:
    """A run whose report directory is removed once requests.jsonl has a record: returns its
    output, exit code, the simulator's counts at the removal and at the end, what is left."""
    base.mkdir(parents=True)
    report, log = base / "r", base / "log"
    sim = start_simulator(SIM)
    p = None
    try:
        p = _locust(sim.url, report, 5, client, log)

        def written() -> bool:
            assert p.poll() is None, log.read_text(errors="replace")[-3000:]  # still running
            return (report / "requests.jsonl").exists() and (report / "requests.jsonl").stat().st_size > 0

        yield (written, 30, "requests.jsonl written", 0.1)
        shutil.rmtree(report)
        before = get_json(sim.url + "/_sim/stats")["served"]
        yield (lambda: _ended(p), 90, "locust's exit", 0.1)
        stats = get_json(sim.url + "/_sim/stats")
        left = leftover(str(report))
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        sim.stop()
    return SimpleNamespace(out=log.read_text(errors="replace"), rc=p.returncode, before=before, served=stats["served"],
                           started=stats["started"], report=report, left=left)


def _needs(item: Any) -> list[str]:
    kind = {"test_disk_full_mid_run": "full", "test_report_dir_removed_mid_run": "removed"}[item.originalname]
    return [f"{kind}-{params(item)['client']}"]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    base = tmp_path_factory.mktemp("disk_faults")
    mounts: list[Path] = []
    makers = {f"full-{c}": (lambda c=c: _disk_full(base / f"full-{c}", c, mounts)) for c in CLIENTS}
    makers |= {f"removed-{c}": (lambda c=c: _dir_removed(base / f"removed-{c}", c)) for c in CLIENTS}
    try:
        yield from driven_in(request, makers, _needs, parallel=2)
    finally:
        for mnt in mounts:
            subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("client", CLIENTS)
def test_disk_full_mid_run(runs, client: str) -> None:
    got = runs.get(f"full-{client}")
    if isinstance(got, str):
        pytest.skip(got)
    out, report, served = got.out, got.report, got.served
    path = f"{report}/requests.jsonl"
    _assert_clean_failure(out, got.rc, f"cannot write {path} (No space left on device)")
    lines = (report / "requests.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"", "the file ends with a whole line"
    written = len(lines) - 1
    print(f"{client}: {written} records written of {served} served")
    # the file filled (64 KiB: about 45 records) and the run went on to its end, its requests served
    # but not written (not a share of them: beside two busy loops SDK mode served 64 in its 4 s)
    assert 0 < written < served, (written, served)
    assert len(lines[0]) * written <= 2 * 64 * 1024, (written, len(lines[0]))  # stopped at the disk's size
    for ln in lines[:-1]:
        assert ln.startswith(b"{") and ln.endswith(b"}")
    # the statistics in memory still counted every request: Locust's table's total is what the
    # simulator served, less at most the 4 users' requests cut by the stop (served, not recorded)
    total = int(re.search(r"^\s+Aggregated\s+(\d+)\s", out, re.M).group(1))
    assert served - 4 <= total <= served, (total, served)
    assert_whole_or_absent(report)
    assert not got.left


@pytest.mark.parametrize("client", CLIENTS)
def test_report_dir_removed_mid_run(runs, client: str) -> None:
    got = runs.get(f"removed-{client}")
    out, report = got.out, got.report
    _assert_clean_failure(out, got.rc, f"{report}/requests.jsonl was removed during the run")
    assert got.served > got.before * 1.5, (got.before, got.served)  # the run kept going after the removal
    summary = json.loads((report / "summary.json").read_text())  # the directory is made again at the stop
    assert summary["records_file"]["error"].startswith(f"{report}/requests.jsonl was removed during the run")
    assert summary["records_file"]["written"] > 0
    # every request the simulator started is a record (those cut by the stop as `interrupted`)
    assert summary["records"] == got.started
    assert_whole_or_absent(report)
    assert not got.left
