"""Issue 4: report.html is one self-contained file: it parses, references nothing outside itself,
holds the charts, and a headless Chromium renders them."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers import read_summary, run_locust

pytestmark = pytest.mark.slow


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "poster", "data") and v and not v.startswith("#"):
                self.refs.append(v)


@pytest.fixture(scope="module")
def report(tmp_path_factory, request) -> Path:
    from llm_users.sim.launcher import start_simulator

    out = tmp_path_factory.mktemp("report")
    with start_simulator(["--ttft-ms", "50", "--ttft-dist", "lognormal", "--ttft-sd-ms", "15", "--itl-ms", "5",
                          "--itl-dist", "normal", "--itl-sd-ms", "1", "--output-tokens", "40", "--seed", "3"]) as sim:
        proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-u", "8", "-r", "4", "-t", "6s", "--stop-timeout", "10",
                          "--llm-slo", "ttft=60ms", "--llm-input-tokens", "64", "--llm-output-tokens", "40",
                          "--llm-max-tokens", "48", report=out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_outputs_exist_and_agree(report: Path) -> None:
    for name in ("requests.jsonl", "summary.json", "summary.csv", "timeseries.csv", "report.html"):
        assert (report / name).stat().st_size > 0, name
    summary = read_summary(report)
    rows = (report / "timeseries.csv").read_text().splitlines()
    assert rows[0].startswith("time,users,requests_started,requests_finished")
    finished = sum(int(r.split(",")[3]) for r in rows[1:])
    assert finished == summary["overall"]["requests"]  # warm-up excluded from both


def test_html_is_self_contained_and_has_the_charts(report: Path) -> None:
    text = (report / "report.html").read_text()
    p = _Collect()
    p.feed(text)
    p.close()
    assert p.tags[0] == "html" and "body" in p.tags
    assert p.refs == []
    assert not re.search(r"url\(\s*['\"]?https?:", text)
    assert "<script" not in text and "@import" not in text
    assert text.count("<svg") >= 4  # TTFT CDF, ITL CDF, latency over time, throughput over time
    for title in ("TTFT distribution (CDF)", "ITL distribution (CDF)", "Latency over time", "Throughput over time"):
        assert title in text
    assert "Client self-check" in text and "Goodput" in text


def test_first_screen_says_the_configuration_once(report: Path) -> None:
    """Issue 28: the header states users and spawn rate, input and output lengths, max tokens and
    SLOs; host and window appear once; no failures chart when nothing failed."""
    summary = read_summary(report)
    text = (report / "report.html").read_text()
    assert summary["overall"]["failures"] == 0
    setup = summary["setup"]
    assert setup["load_plan"]["text"] == "8 users, spawned at 4/s; for 6 s"
    assert (setup["input_tokens"], setup["output_tokens"], setup["max_tokens"]) == ("64", "40", 48)
    assert setup["slos_ms"] == {"ttft": 60.0}
    first = text[:text.index("Over time")]  # the first screen: headline strip, verdict, header
    for part in ("8 users, spawned at 4/s; for 6 s", "synthetic prompts of 64 input tokens", "40 output tokens",
                 "48 (temperature", "TTFT ≤ 60 ms", "Goodput", "SLO attainment", "Client self-check"):
        assert part in first, part
    assert text.count(summary["host"]) == 1 and text.count("measured window") == 1
    assert "Failures over time" not in text and "failures/s" not in text
    assert "Requests over time vs active users" in text


def test_chromium_renders_the_charts(report: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400",
                    f"--screenshot={shot}", (report / "report.html").as_uri()],
                   check=True, capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # decode the PNG and check that the chart area is not blank: many distinct colours
    import struct
    import zlib

    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2400)
    chunks, pos = [], 8
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            chunks.append(data[pos + 8:pos + 8 + n])
        pos += 12 + n
    raw = zlib.decompress(b"".join(chunks))
    non_white = sum(1 for b in raw[::97] if b < 200)
    assert non_white > 2000, non_white  # text, tables and plotted lines, not an empty page
    shutil.copy(shot, report / "report.png")
