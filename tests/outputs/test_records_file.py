"""requests.jsonl written from the writer thread (``background=True``, a local run): a write(2)
that waits does not hold the caller, and every line still reaches the file, in order."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from gevent import monkey

from llm_users.metrics import RequestRecord
from llm_users.outputs import records_file
from llm_users.outputs.records_file import RecordWriter

_sleep = monkey.get_original("time", "sleep")  # a real wait, whatever gevent patched


def _record(i: int) -> RequestRecord:
    return RequestRecord(f"r{i:04d}", "/v1/chat/completions", "vllm", "m", ttft_ns=1_000_000 + i,
                         e2e_ns=9_000_000, itl_ns=[20_000_000 + i] * 100, output_tokens=101)


def test_lines_reach_the_file_within_the_flush_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No flush, no close: the writer thread's own next turn writes the line (a SIGKILL from
    then on keeps it). Counted in the thread's turns, not in seconds: at most one of its
    FLUSH_S sleeps begins between the write() and the line being in the file."""
    path = tmp_path / "requests.jsonl"
    written = [False]
    turns: list[float] = []  # sleeps the thread began after the write(), the line not yet in the file

    def sleep(seconds: float) -> None:
        if written[0] and not path.read_bytes():
            turns.append(seconds)
        _sleep(seconds)

    monkeypatch.setattr(records_file, "_sleep", sleep)
    w = RecordWriter(tmp_path, background=True)
    w.write(_record(1))
    written[0] = True
    deadline = time.monotonic() + 10
    while not path.read_bytes() and time.monotonic() < deadline:
        _sleep(0.01)
    assert json.loads(path.read_text())["request_id"] == "r0001"
    assert turns in ([], [RecordWriter.FLUSH_S]), turns  # its next turn wrote it
    assert w.written == 1
    w.close()


@pytest.mark.serial  # the caller held under a few ms: a loaded machine's scheduling alone passes it (CI r41)
def test_a_write_that_waits_does_not_hold_the_caller_and_loses_nothing(tmp_path: Path) -> None:
    """The records file is a FIFO nobody reads yet: the writer thread's write(2) blocks once the
    pipe's 64 KB are full, as a write waiting for the disk does. The caller's writes (300 lines,
    about 1 MB) go on at their own speed; then the reader drains the pipe and gets every line,
    in order."""
    os.mkfifo(tmp_path / "requests.jsonl")
    reader = os.open(tmp_path / "requests.jsonl", os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open returns
    w = RecordWriter(tmp_path, background=True)
    slowest = 0.0
    for i in range(300):
        t0 = time.perf_counter()
        w.write(_record(i))
        slowest = max(slowest, time.perf_counter() - t0)
        if i % 20 == 0:
            _sleep(RecordWriter.FLUSH_S / 5)  # let the thread take what is queued
    assert w.written * 3_000 < 2 * 65_536, w.written  # the thread is stuck in write(2): the pipe is full
    assert slowest < 0.005, slowest  # no caller's write waited for it (each is a dumps and an append)
    got = bytearray()
    deadline = time.monotonic() + 20
    while got.count(b"\n") < 300 and time.monotonic() < deadline:
        try:
            chunk = os.read(reader, 1 << 16)
        except BlockingIOError:
            _sleep(0.005)
            continue
        got += chunk
    w.close()
    os.close(reader)
    ids = [json.loads(line)["request_id"] for line in got.splitlines()]
    assert ids == [f"r{i:04d}" for i in range(300)]
    assert (w.written, w.lost, w.error) == (300, 0, None)


def test_close_writes_what_is_queued_and_ends_the_thread(tmp_path: Path) -> None:
    w = RecordWriter(tmp_path, background=True)
    for i in range(50):
        w.write(_record(i))
    w.close()  # at once: the lines queued for the thread are written by close itself
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert [json.loads(x)["request_id"] for x in lines] == [f"r{i:04d}" for i in range(50)]
    assert w.state()["written"] == 50 and w.state()["not_written"] == 0
    w.write(_record(99))  # after the stop: counted, never written to a closed descriptor
    w.flush()
    assert (w.written, w.lost) == (50, 1)


@pytest.mark.parametrize("background", [False, True], ids=["on-the-loop", "writer-thread"])
def test_failed_write_says_one_line_keeps_whole_lines_and_counts(tmp_path: Path, monkeypatch, capsys,
                                                                  background: bool) -> None:
    w = RecordWriter(tmp_path, background=background)
    w.write({"request_id": "a"})
    w.flush()
    real_write = os.write
    calls = {"n": 0}

    def full_disk(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:  # a partial line, then ENOSPC: as a filling disk does
            return real_write(fd, data[:5])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    for i in range(3):
        w.write({"request_id": f"b{i}"})
    w.flush()  # the writer thread's write meets the full disk too
    monkeypatch.setattr(os, "write", real_write)
    w.write({"request_id": "c"})  # space again: still not written (the file would have a hole)
    w.flush()
    out = capsys.readouterr().out.splitlines()
    assert out == [f"locust-llm: cannot write {tmp_path}/requests.jsonl (No space left on device); the run goes "
                   "on, its statistics are kept in memory, and records from now on are not in the file"]
    assert (tmp_path / "requests.jsonl").read_bytes() == b'{"request_id":"a"}\n'
    assert (w.written, w.lost) == (1, 4)
    assert w.check() == out[0]
    w.close()


@pytest.mark.parametrize("background", [False, True], ids=["on-the-loop", "writer-thread"])
def test_a_failed_batch_loses_all_its_records_and_no_half_line(tmp_path: Path, monkeypatch, capsys,
                                                               background: bool) -> None:
    """The master writes a worker payload's records as one batch: a disk that fills during it
    keeps the whole lines before the batch and counts every record of the batch lost."""
    w = RecordWriter(tmp_path, background=background)
    with w.batch():
        w.write({"request_id": "a"})
        w.write({"request_id": "b"})
    w.flush()
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:30]))  # the disk fills mid-batch
    with w.batch():
        for i in range(4):
            w.write({"request_id": f"c{i}"})
    w.flush()
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / "requests.jsonl").read_bytes() == b'{"request_id":"a"}\n{"request_id":"b"}\n'
    assert (w.written, w.lost) == (2, 4)
    assert capsys.readouterr().out.count("locust-llm: cannot write") == 1
    with w.batch():
        w.write({"request_id": "d"})
    assert (w.written, w.lost) == (2, 5)
    w.close()


@pytest.mark.parametrize("background", [False, True], ids=["on-the-loop", "writer-thread"])
def test_removed_file_is_noticed(tmp_path: Path, capsys, background: bool) -> None:
    d = tmp_path / "r"
    w = RecordWriter(d, background=background)
    w.write({"request_id": "a"})
    assert w.check() is None
    shutil.rmtree(d)
    line = w.check()
    assert line == (f"locust-llm: {d}/requests.jsonl was removed during the run (report directory deleted?): "
                    "the records written to it are gone; statistics are kept in memory")
    assert capsys.readouterr().out.splitlines() == [line]
    assert w.check() == line  # said once
    assert capsys.readouterr().out == ""
    w.close()
