"""Issue 12: llm-compare on real report directories. Two runs against the same seeded simulator
are "no significant difference"; a run with TTFT 120 ms against one with 100 ms is flagged as
regressed and ``--fail-on ttft.p50>+10%`` exits 1; the HTML page is rendered by Chromium.
Issue 28: a 4-user run against an 8-user run is "not comparable" (exit 3) unless
``--allow-config-diff``, which gives the verdicts under a warning.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_locust

pytestmark = pytest.mark.slow
COMPARE = str(Path(sys.executable).parent / "llm-compare")
SIM = "--ttft-dist lognormal --ttft-sd-ms 15 --itl-ms 2 --output-tokens 12 --seed 7"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, ttft, users in (("a", 100, "4"), ("b", 100, "4"), ("slow", 120, "4"), ("u8", 100, "8")):
        report = tmp_path_factory.mktemp(name) / name
        proc = run_locust("vllm.py", "-u", users, "-r", users, "-t", "3s", "--stop-timeout", "10",
                          "--llm-sim-args", f"--ttft-ms {ttft} {SIM}", report=report)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[name] = report
    return out


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMPARE, *args], capture_output=True, text=True, timeout=120)


def test_same_seeded_simulator_is_no_significant_difference(runs) -> None:
    proc = _compare(str(runs["a"]), str(runs["b"]), "--fail-on", "ttft.p50>+10%,failures>0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = re.findall(r"^\s+(ttft|tpot|e2e)\.(p50|p99)\s.*?(regressed|improved|no significant difference|"
                          r"too few requests)", proc.stdout, re.M)
    assert len(verdicts) == 6, proc.stdout
    assert {v[2] for v in verdicts if v[1] == "p50"} == {"no significant difference"}, proc.stdout
    # ~120 requests a run: too few for a p99 verdict (it needs 500), never a false call
    assert {v[2] for v in verdicts if v[1] == "p99"} <= {"no significant difference", "too few requests"}
    assert "every --fail-on rule passed (2)" in proc.stdout
    # the configuration diff comes first and finds nothing that blocks a verdict
    assert proc.stdout.index("configuration") < proc.stdout.index("metric")
    assert "NOT COMPARABLE" not in proc.stdout and not re.search(r"^! ", proc.stdout, re.M)
    assert re.search(r"^  load\s+4 users\s+4 users$", proc.stdout, re.M), proc.stdout


def test_four_users_against_eight_is_not_comparable_unless_allowed(runs, tmp_path) -> None:
    page = tmp_path / "compare.html"
    proc = _compare(str(runs["a"]), str(runs["u8"]), "--fail-on", "ttft.p50>+10%", "--out", str(page))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert re.search(r"^! load\s+4 users\s+8 users$", proc.stdout, re.M), proc.stdout
    assert "NOT COMPARABLE: u8 was not configured as a (load: 4 users vs 8 users)" in proc.stdout
    verdicts = re.findall(r"^\s+(?:ttft|tpot|e2e)\.p50\s.*?(\w[\w ]*)$", proc.stdout, re.M)
    assert verdicts == ["not comparable"] * 3, proc.stdout
    assert "improved" not in proc.stdout and "regressed" not in proc.stdout
    assert "u8 (differs in load)" in proc.stderr and "--fail-on not evaluated" in proc.stderr
    text = page.read_text()
    assert "Not comparable: u8 was not configured as a" in text and "color:#b00" in text
    assert "<tr class='blocking'><td>load</td><td>4 users</td><td>8 users</td></tr>" in text
    allowed = _compare(str(runs["a"]), str(runs["u8"]), "--allow-config-diff", "--out", str(page))
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "WARNING: u8 was not configured as a (load: 4 users vs 8 users)" in allowed.stdout
    got = re.findall(r"^\s+(?:ttft|tpot|e2e)\.p50\s.*?(regressed|improved|no significant difference)$",
                     allowed.stdout, re.M)
    assert len(got) == 3 and "not comparable" not in allowed.stdout, allowed.stdout
    assert "Warning: u8 was not configured as a" in page.read_text()


def test_slower_ttft_is_flagged_and_fails(runs, tmp_path) -> None:
    page = tmp_path / "compare.html"
    proc = _compare(str(runs["a"]), str(runs["slow"]), "--fail-on", "ttft.p50>+10%", "--out", str(page))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    m = re.search(r"^\s+ttft\.p50\s+\+(\d+\.\d+) \(\+(\d+\.\d)%\).*regressed$", proc.stdout, re.M)
    assert m and 10 <= float(m.group(1)) <= 30 and 8 <= float(m.group(2)) <= 30, proc.stdout  # 20 ms, 20%
    assert "llm-compare: FAIL slow: ttft.p50>+10%: +" in proc.stderr
    # the table carries every headline metric side by side with its delta
    assert re.search(r"^ttft\.p50\s+[\d.]+\s+[\d.]+\s+\+", proc.stdout, re.M)
    text = page.read_text()
    assert "<script" not in text and not re.search(r"(src|href)=['\"]?https?:", text)
    assert text.count("<svg") >= 3 and "regressed" in text
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<svg") >= 3 and "<td>regressed</td>" in dom and "ttft.p50" in dom


def test_bad_input_is_one_line(runs, tmp_path) -> None:
    proc = _compare(str(runs["a"]), str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip().startswith("llm-compare: ") and "summary.json" in proc.stderr
    proc = _compare(str(runs["a"]), str(runs["b"]), "--fail-on", "ttft.p50 is big")
    assert proc.returncode == 2 and "cannot read" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
