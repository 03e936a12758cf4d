"""Issue 54 item 6: a dataset that is no regular file, cannot be read, or holds a line over the
bound is one ConfigError naming --llm-dataset and why (workload/datasets.py), and the bound is
kept while reading: a longer line is never read whole."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from llm_users.errors import ConfigError
from llm_users.workload import datasets
from llm_users.workload.datasets import MAX_LINE_BYTES, load_dataset


def _refusal(name: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_dataset(name)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"--llm-dataset {name}: "), line
    return line


def test_a_directory_is_not_a_dataset_file(tmp_path: Path) -> None:
    assert "a directory, not a dataset file" in _refusal(str(tmp_path))


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_a_device_or_pipe_is_refused_unopened(tmp_path: Path, path: str) -> None:
    if path == "fifo":  # opening it would wait for a writer
        path = str(tmp_path / "prompts.jsonl")
        os.mkfifo(path)
    assert "a device, pipe or socket, not a dataset file" in _refusal(path)


def test_a_file_that_cannot_be_read() -> None:
    """/proc/self/mem is a regular file no one reads at offset 0 (EIO), root included."""
    assert _refusal("/proc/self/mem").endswith("cannot read it (Input/output error)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod-000 file (the /proc/self/mem case covers it)")
def test_a_file_without_read_permission(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hi"}\n')
    f.chmod(0)
    assert _refusal(str(f)).endswith("cannot read it (Permission denied)")


def test_a_line_over_the_bound_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    f = tmp_path / "big.jsonl"
    with f.open("wb") as out:
        out.write(b'{"prompt": "short"}\n{"prompt": "')
        out.write(b"word " * (MAX_LINE_BYTES // 2))  # 40 MiB on line 2
        out.write(b'"}\n')
    tracemalloc.start()
    try:
        line = _refusal(str(f))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "line 2 is over 16 MiB" in line and "HTTP 413" in line, line
    assert peak < MAX_LINE_BYTES * 1.5, peak  # the bound and a chunk, not the 40 MiB line


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096])
def test_the_bound_holds_across_chunk_edges(tmp_path: Path, monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(datasets, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(datasets, "_CHUNK", chunk)
    item = b'{"prompt": "' + b"x" * (100 - 14) + b'"}'  # exactly 100 bytes
    f = tmp_path / "p.jsonl"
    f.write_bytes(item + b"\n" + item + b"\n\n" + item)
    assert len(load_dataset(str(f)).items) == 3
    f.write_bytes(item + b"\n\n" + item + b" \n" + item)
    assert "line 3 is over 0 MiB" in _refusal(str(f))
    f.write_bytes(item + b"\n" + item + b" ")  # the last line, no newline after it
    assert "line 2 is over" in _refusal(str(f))
