"""The files written to ``--llm-report DIR``: requests.jsonl (as the run goes, so a crash keeps
every record), and at the stop the ``summary`` output (summary.json, summary.csv) and the
``timeseries`` output (timeseries.csv). Schema: docs/report.md.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from llm_users.health.lagtrace import span
from llm_users.metrics import LATENCY_METRICS, PERCENTILES, RequestRecord
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


def _json_default(obj: Any) -> Any:
    """What orjson cannot write itself: a merged record's ``array("q")`` of gaps, as a numpy
    view of it (the ``fast`` extra: no Python integer per gap), else a list."""
    if type(obj) is not array:
        raise TypeError(f"not JSON serializable: {type(obj).__name__}")
    try:
        import numpy as np
    except ImportError:
        return obj.tolist()
    return np.frombuffer(obj, dtype=np.int64)


class RecordWriter:
    """Appends one JSON line per record, so a crash keeps every record so far.

    A full disk or a report directory removed mid-run does not stop the run (docs/report.md,
    "When the disk fills"): the first failed write truncates the file back to its last whole
    line and says one ``locust-llm:`` line naming the file and the error; later records are
    counted (``lost``) but not written. A records file removed while open (``rm -rf`` of the
    report directory) is noticed within :data:`CHECK_EVERY_S` of the next write, or at the
    stop (:meth:`check`). ``error`` then holds the line; the run exits non-zero."""

    CHECK_EVERY_S = 1.0

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "requests.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._size = 0  # bytes of whole lines written
        self._next_check = time.monotonic() + self.CHECK_EVERY_S
        self.written = 0
        self.lost = 0
        self.error: str | None = None
        self._held: list[bytes] | None = None  # lines of a batch (:meth:`batch`), written at its end

    def write(self, record: RequestRecord | dict[str, Any]) -> None:
        with span("records"):
            if self.error is not None:
                self.lost += 1
                return
            d = record.to_dict(plain_gaps=False) if isinstance(record, RequestRecord) else record
            data = orjson.dumps(d, default=_json_default, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)
            if self._held is not None:
                self._held.append(data)
            else:
                self._write_lines(data, 1)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The lines of the records written inside go to the file together, in one system call
        at the end (the master's merge of a worker payload: one write for its 40 records, not
        40). A failed write loses the whole batch (counted ``lost``), never half a line."""
        if self._held is not None:  # already batching
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held:
                self._write_lines(b"".join(held), len(held))

    def _write_lines(self, data: bytes, lines: int) -> None:
        if self.error is not None:
            self.lost += lines
            return
        try:
            n = os.write(self._fd, data)
            if n != len(data):  # a partial line: the disk filled during this write
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as e:
            self._fail(e)
            self.lost += lines
            return
        self._size += n
        self.written += lines
        if time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + self.CHECK_EVERY_S
            self.check()

    def _fail(self, e: OSError) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)  # no half line at the end
        self._say(f"cannot write {self.path} ({e.strerror or e}); the run goes on, its statistics "
                  f"are kept in memory, and records from now on are not in the file")

    def check(self) -> str | None:
        """The line saying why the records file is not whole (None when it is): a failed write,
        or the file removed while the run wrote to it."""
        if self.error is None and self._fd >= 0:
            try:
                removed = os.fstat(self._fd).st_nlink == 0
            except OSError:
                removed = False
            if removed:
                self._say(f"{self.path} was removed during the run (report directory deleted?): "
                          f"the records written to it are gone; statistics are kept in memory")
        return self.error

    def state(self) -> dict[str, Any]:
        """summary.json's ``records_file``: lines written, records not written, and why (``error``
        None: the file is whole)."""
        error = self.check()
        return {"path": str(self.path), "written": self.written, "not_written": self.lost,
                "error": error.removeprefix("locust-llm: ") if error else None}

    def _say(self, what: str) -> None:
        self.error = f"locust-llm: {what}"
        print(self.error, flush=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def write_summary(directory: str | Path, summary: dict[str, Any]) -> tuple[Path, Path]:
    """Write summary.json and summary.csv; returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    jpath = d / "summary.json"
    jpath.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    cpath = d / "summary.csv"
    cpath.write_text(summary_csv(summary))
    return jpath, cpath


def write_timeseries(directory: str | Path, rows: list[dict[str, Any]]) -> Path:
    """timeseries.csv: one row per second (client figures plus any scraped server/GPU series)."""
    from llm_users.outputs.timeline import COLUMNS

    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    path = Path(directory) / "timeseries.csv"
    with path.open("w", newline="") as f:
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
