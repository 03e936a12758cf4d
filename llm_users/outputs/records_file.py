"""requests.jsonl: one JSON line per record, appended as the run goes, so a crash keeps every
record that reached the file (schema: docs/report.md).

Where the run measures (a local run: the users stream on this process's loop), the lines go
to the file from a thread of their own (``background=True``). A ``write(2)`` to a file waits
when the kernel makes it wait (writeback of the page it appends to, a busy disk): 15 ms at
worst in 2,944 writes beside a test suite, and the ceiling bench named the records file as
the cause of late first-token stamps at its top steps (docs/benchmarks.md, issue 34). On the
loop that wait held every stream's next chunk. The thread takes what was queued every
:data:`RecordWriter.FLUSH_S` and writes it in one call; a line waits in memory at most that
long (plus any write before it), which is what a SIGKILL can lose. A master writes on its own
loop (``background=False``): it confirms a worker's records only once they are in the file.

A full disk or a report directory removed mid-run does not stop the run (docs/report.md,
"When the disk fills"): the first failed write truncates the file back to its last whole line
and says one ``locust-llm:`` line naming the file and the error; later records are counted
(``lost``) but not written. A records file removed while open (``rm -rf`` of the report
directory) is noticed within :data:`RecordWriter.CHECK_EVERY_S` of the next write, or at the
stop (:meth:`RecordWriter.check`). ``error`` then holds the line; the run exits non-zero.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from array import array
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from gevent import monkey

from llm_users.health.lagtrace import span
from llm_users.metrics import RequestRecord

# The writer thread is an OS thread, whatever gevent patched: its waits (the disk, its sleep)
# must not be the loop's.
_start_thread, _new_lock, _sleep = (monkey.get_original("_thread", "start_new_thread"),
                                    monkey.get_original("_thread", "allocate_lock"),
                                    monkey.get_original("time", "sleep"))


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
    """Appends one JSON line per record (module docstring: when, from which thread, and what a
    failed write does). Counters: ``written`` lines in the file, ``lost`` records not written."""

    CHECK_EVERY_S = 1.0
    #: How long a line may wait in memory for the writer thread (``background=True``).
    FLUSH_S = 0.05

    def __init__(self, directory: str | Path, *, background: bool = False) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "requests.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._size = 0  # bytes of whole lines written
        self._next_check = time.monotonic() + self.CHECK_EVERY_S
        self.written = 0
        self._lost_here = 0  # counted by the caller's thread (after a failed write)
        self._lost_io = 0  # counted where lines are written (the writer thread, or the caller's)
        self.error: str | None = None
        self._held: list[bytes] | None = None  # lines of a batch (:meth:`batch`), written at its end
        self._io = _new_lock()  # held while lines go to the file
        self._queue: deque[tuple[bytes, int]] | None = None
        self._closed = False
        if background:
            self._queue = deque()
            _start_thread(self._flusher, ())

    @property
    def lost(self) -> int:
        return self._lost_here + self._lost_io

    def write(self, record: RequestRecord | dict[str, Any]) -> None:
        with span("records"):
            if self.error is not None:
                self._lost_here += 1
                return
            d = record.to_dict(plain_gaps=False) if isinstance(record, RequestRecord) else record
            data = orjson.dumps(d, default=_json_default, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)
            if self._held is not None:
                self._held.append(data)
            else:
                self._put(data, 1)

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
                self._put(b"".join(held), len(held))

    def _put(self, data: bytes, lines: int) -> None:
        if self._queue is not None:
            self._queue.append((data, lines))  # the writer thread takes it within FLUSH_S
        else:
            self._write_lines(data, lines)

    def _flusher(self) -> None:
        """The writer thread: every FLUSH_S, what was queued goes to the file in one write."""
        while not self._closed:
            _sleep(self.FLUSH_S)
            self.flush()

    def flush(self) -> None:
        """Every line queued so far is in the file (or counted lost) when this returns."""
        queue = self._queue
        if not queue:
            return
        with self._io:
            parts: list[bytes] = []
            lines = 0
            while queue:
                data, n = queue.popleft()
                parts.append(data)
                lines += n
            if parts:
                self._write_lines(b"".join(parts), lines)

    def _write_lines(self, data: bytes, lines: int) -> None:
        if self.error is not None or self._fd < 0:
            self._lost_io += lines
            return
        try:
            n = os.write(self._fd, data)
            if n != len(data):  # a partial line: the disk filled during this write
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as e:
            self._fail(e)
            self._lost_io += lines
            return
        self._size += n
        self.written += lines
        if time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + self.CHECK_EVERY_S
            self._check_removed()

    def _fail(self, e: OSError) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)  # no half line at the end
        self._say(f"cannot write {self.path} ({e.strerror or e}); the run goes on, its statistics "
                  f"are kept in memory, and records from now on are not in the file")

    def check(self) -> str | None:
        """The line saying why the records file is not whole (None when it is): a failed write,
        or the file removed while the run wrote to it. Queued lines are written first."""
        self.flush()
        with self._io:
            self._check_removed()
        return self.error

    def _check_removed(self) -> None:
        if self.error is None and self._fd >= 0:
            try:
                removed = os.fstat(self._fd).st_nlink == 0
            except OSError:
                removed = False
            if removed:
                self._say(f"{self.path} was removed during the run (report directory deleted?): "
                          f"the records written to it are gone; statistics are kept in memory")

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
        self._closed = True  # the writer thread ends at its next wake-up
        self.flush()
        with self._io:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
