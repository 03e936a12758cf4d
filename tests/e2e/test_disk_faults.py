"""Issue 33 item 4: the disk fills (a 64 KiB tmpfs) or the report directory vanishes mid-run.

Each: one ``locust-llm:`` line naming the file and the error, the console LLM summary still
printed, exit code non-zero, no traceback, and the run keeps going to its end (its requests
keep being served while the file cannot be written). Issue 54 item 6: every file left in the
report directory is whole (summary.json parses; no 0-byte or cut file, no temporary file)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import LOCUST, LOCUSTFILES, ROOT, get_json


def _locust(sim_url: str, report: Path, seconds: int, client: str = "raw") -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")} | {"OPENAI_API_KEY": "sk-test"}
    cmd = [LOCUST, "-f", str(ROOT / "locustfiles" / LOCUSTFILES[client]), "--headless", "--only-summary",
           "--loglevel", "WARNING", "-u", "4", "-r", "4", "-t", f"{seconds}s", "--host", sim_url,
           "--llm-report", str(report), "--llm-preflight", "off", "--llm-client", client]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_disk_full_mid_run(sim_factory, tiny_tmpfs: Path, client: str) -> None:
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "20")
    report = tiny_tmpfs / "r"
    p = _locust(sim.url, report, 4, client)
    out, _ = p.communicate(timeout=90)
    path = f"{report}/requests.jsonl"
    _assert_clean_failure(out, p.returncode, f"cannot write {path} (No space left on device)")
    served = get_json(sim.url + "/_sim/stats")["served"]
    lines = (report / "requests.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"", "the file ends with a whole line"
    written = len(lines) - 1
    assert 0 < written < served / 2, (written, served)  # the file filled early; the run went on to its end
    for ln in lines[:-1]:
        assert ln.startswith(b"{") and ln.endswith(b"}")
    # the statistics in memory still counted every request: Locust's table's total is what the
    # simulator served, less at most the 4 users' requests cut by the stop (served, not recorded)
    total = int(re.search(r"^\s+Aggregated\s+(\d+)\s", out, re.M).group(1))
    assert served - 4 <= total <= served, (total, served)
    assert_whole_or_absent(report)
    assert not leftover(str(report))


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_report_dir_removed_mid_run(sim_factory, tmp_path: Path, client: str) -> None:
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "20")
    report = tmp_path / "r"
    p = _locust(sim.url, report, 5, client)
    deadline = time.monotonic() + 30
    while not (report / "requests.jsonl").exists() or (report / "requests.jsonl").stat().st_size == 0:
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.1)
    shutil.rmtree(report)
    before = get_json(sim.url + "/_sim/stats")["served"]
    out, _ = p.communicate(timeout=90)
    _assert_clean_failure(out, p.returncode, f"{report}/requests.jsonl was removed during the run")
    served = get_json(sim.url + "/_sim/stats")["served"]
    assert served > before * 1.5, (before, served)  # the run kept going after the removal
    summary = json.loads((report / "summary.json").read_text())  # the directory is made again at the stop
    assert summary["records_file"]["error"].startswith(f"{report}/requests.jsonl was removed during the run")
    assert summary["records_file"]["written"] > 0
    # every request the simulator started is a record (those cut by the stop as `interrupted`)
    assert summary["records"] == get_json(sim.url + "/_sim/stats")["started"]
    assert_whole_or_absent(report)
    assert not leftover(str(report))
