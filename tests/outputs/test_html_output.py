"""outputs/html_output.py: the ``html`` output writes report.html into the report directory,
nothing without one, and one line instead of the page when matplotlib (the ``report`` extra)
is missing."""

from __future__ import annotations

import sys
from pathlib import Path

from llm_users.metrics import StatsByName
from llm_users.outputs.final import FinalData
from llm_users.outputs.html_output import HTML
from tests.outputs.run_summary import rows, summary


def test_report_html_in_the_directory_and_nothing_without_one(tmp_path: Path, monkeypatch) -> None:
    final = FinalData(summary(), rows(), StatsByName())
    monkeypatch.chdir(tmp_path)
    HTML.write(final, None)
    assert list(tmp_path.iterdir()) == []
    HTML.write(final, str(tmp_path))  # the registry made the directory
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "8 users, spawned at 2/s" in page
    assert HTML.name == "html"


def test_without_matplotlib_one_line_says_the_page_was_skipped(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "llm_users.outputs.html_report", None)  # its import fails
    HTML.write(FinalData(summary(), rows(), StatsByName()), str(tmp_path))
    out = capsys.readouterr().out
    assert out.startswith("locust-llm: report.html skipped (") and "pip install 'locust-llm[report]'" in out
    assert list(tmp_path.iterdir()) == []
