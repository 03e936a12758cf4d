"""Every output of a run, in one place: the console table, summary.json/.csv, timeseries.csv,
report.html (and requests.jsonl, written as the run goes by :class:`RecordWriter`).

:func:`write_outputs` is the one entry point for the end of a run: it takes the final merged
data (:class:`FinalData`) and writes everything from it. Nothing here reads the live run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_users.metrics import StatsByName
from llm_users.outputs.console import summary_table
from llm_users.outputs.files import SCHEMA, RecordWriter, write_summary, write_timeseries

__all__ = ["SCHEMA", "FinalData", "RecordWriter", "write_outputs"]


@dataclass(frozen=True, slots=True)
class FinalData:
    """The merged result of a run: its summary dict, per-second rows and statistics."""

    summary: dict[str, Any]
    timeline_rows: list[dict[str, Any]]
    stats: StatsByName


def write_outputs(final: FinalData, report_dir: str | None) -> None:
    """Print the LLM summary table; with a report directory, write every file into it."""
    print(summary_table(final.summary), flush=True)
    if not report_dir:
        return
    write_summary(report_dir, final.summary)
    write_timeseries(report_dir, final.timeline_rows)
    try:
        from llm_users.outputs.html_report import write_html
    except ImportError as e:  # matplotlib is the optional 'report' extra
        print(f"locust-llm: report.html skipped ({e}); pip install 'locust-llm[report]'", flush=True)
    else:
        write_html(report_dir, final.summary, final.timeline_rows, final.stats)
    print(f"locust-llm: report written to {report_dir}/", flush=True)
