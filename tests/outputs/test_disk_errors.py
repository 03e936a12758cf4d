"""A full disk or a vanished report directory (issue 33 item 4), without processes: the records
file's one line and whole lines, and write_outputs going on without the directory."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from llm_users.outputs import registry
from llm_users.outputs.final import FinalData
from llm_users.outputs.records_file import RecordWriter


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


class _Out:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.dirs = name, fail, []

    def write(self, final: Any, directory: str | None) -> None:
        self.dirs.append(directory)
        if self.fail and directory:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{directory}/x.json")


def test_write_outputs_goes_on_without_the_directory(monkeypatch, capsys, tmp_path: Path) -> None:
    a, bad, c = _Out("a"), _Out("bad", fail=True), _Out("c")
    monkeypatch.setattr(registry, "OUTPUTS", [a, bad, c])
    line = registry.write_outputs(FinalData({}, [], None), str(tmp_path))
    assert line == f"locust-llm: cannot write {tmp_path}/x.json (No space left on device); the files after it were not written"
    assert (a.dirs, bad.dirs, c.dirs) == ([str(tmp_path)], [str(tmp_path)], [None])
    out = capsys.readouterr().out
    assert line in out and "report written" not in out
    assert registry.write_outputs(FinalData({}, [], None), str(tmp_path / "ok")) is not None  # bad fails again
    monkeypatch.setattr(registry, "OUTPUTS", [a, c])
    assert registry.write_outputs(FinalData({}, [], None), str(tmp_path)) is None
    assert f"locust-llm: report written to {tmp_path}/" in capsys.readouterr().out


@pytest.fixture(autouse=True)
def _console_not_held() -> None:
    registry.CONSOLE.hold = False
