"""The files written to ``--llm-report DIR``: requests.jsonl (as the run goes, so a crash keeps
every record: :mod:`llm_users.outputs.records_file`), and at the stop the ``summary`` output
(summary.json, summary.csv) and the ``timeseries`` output (timeseries.csv), each whole or absent
(:mod:`llm_users.outputs.atomic`). Schema: docs/report.md.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import orjson

from llm_users.metrics import LATENCY_METRICS, PERCENTILES
from llm_users.outputs.atomic import atomic_open, write_atomic
from llm_users.outputs.final import FinalData

SCHEMA = "locust-llm/summary/1"


def check_report_dir(directory: str | Path) -> None:
    """At start: the report directory can be made and written (ConfigError naming --llm-report)."""
    from llm_users.errors import ConfigError

    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise ConfigError(f"--llm-report must name a directory; {str(d)!r} is an existing file")
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".locust-llm-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"--llm-report: cannot write to {str(d)!r} ({e.strerror or e})") from None


def write_summary(directory: str | Path, summary: dict[str, Any]) -> tuple[Path, Path]:
    """Write summary.json and summary.csv; returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    jpath = d / "summary.json"
    write_atomic(jpath, orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    cpath = d / "summary.csv"
    write_atomic(cpath, summary_csv(summary))
    return jpath, cpath


def write_timeseries(directory: str | Path, rows: list[dict[str, Any]]) -> Path:
    """timeseries.csv: one row per second (client figures plus any scraped server/GPU series)."""
    from llm_users.outputs.timeline import COLUMNS

    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    path = Path(directory) / "timeseries.csv"
    with atomic_open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS + extra)
        for r in rows:
            w.writerow([_fmt(r.get(c)) for c in COLUMNS + extra])
    return path


def csv_columns() -> list[str]:
    cols = ["name", "requests", "successes", "failures", "excluded_warmup"]
    for m in LATENCY_METRICS:
        cols += [f"{m}_{k}_ms" for k in (*PERCENTILES, "mean", "min", "max")]
    cols += ["input_tokens", "output_tokens", "output_tokens_per_s", "requests_per_s", "duration_s"]
    return cols


def summary_csv(summary: dict[str, Any]) -> str:
    cols = csv_columns()
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(cols)
    rows = [(name, s) for name, s in summary["by_name"].items()] + [("Aggregated", summary["overall"])]
    for name, s in rows:
        row: list[Any] = [name, s["requests"], s["successes"], s["failures"], s["excluded_warmup"]]
        for m in LATENCY_METRICS:
            row += [_fmt(s[m].get(k)) for k in (*PERCENTILES, "mean", "min", "max")]
        row += [s["input_tokens"], s["output_tokens"], _fmt(s["output_tokens_per_s"]),
                _fmt(s["requests_per_s"]), _fmt(s["duration_s"])]
        w.writerow(row)
    return out.getvalue()


def _fmt(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


class SummaryFiles:
    """The ``summary`` output: summary.json and summary.csv."""

    name = "summary"

    def write(self, final: FinalData, directory: str | None) -> None:
        if directory:
            write_summary(directory, final.summary)


class Timeseries:
    """The ``timeseries`` output: timeseries.csv."""

    name = "timeseries"

    def write(self, final: FinalData, directory: str | None) -> None:
        if directory:
            write_timeseries(directory, final.timeline_rows)


SUMMARY, TIMESERIES = SummaryFiles(), Timeseries()
