"""workload/datasets.py: the shipped files, the three formats, and errors naming file and line."""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from importlib import resources
from pathlib import Path

import pytest

from llm_users.errors import ConfigError
from llm_users.workload import datasets
from llm_users.workload.datasets import MAX_LINE_BYTES, load_dataset, shipped_names


def test_shipped_datasets() -> None:
    assert {"short.json", "conversations.json"} <= set(shipped_names())
    short = load_dataset()
    assert short.format == "prompts" and short.path.startswith("package:") and len(short.items) >= 50
    assert len({json.dumps(i.first()) for i in short.items}) == len(short.items)  # varied, no duplicates
    shipped = Path(str(resources.files("llm_users.data") / "prompts" / "short.json"))
    assert short.sha256 == hashlib.sha256(shipped.read_bytes()).hexdigest()
    conv = load_dataset("conversations")
    assert conv.format == "sharegpt" and len(conv.items) == 10
    assert all(len(i.followups) == 3 for i in conv.items)
    assert all(i.first()[-1]["role"] == "user" for i in short.items)


def test_prompts_json(tmp_path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(["hi", {"prompt": "q", "system": "s", "max_tokens": 7},
                             {"messages": [{"role": "user", "content": "a"}]}]))
    ds = load_dataset(str(f))
    assert [i.first() for i in ds.items] == [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        [{"role": "user", "content": "a"}],
    ]
    assert [i.max_tokens for i in ds.items] == [None, 7, None]


def test_jsonl(tmp_path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "one", "output_tokens": 64}\n\n{"messages": [{"role": "user", "content": "two"}]}\n')
    ds = load_dataset(str(f))
    assert ds.format == "jsonl"
    assert [(i.first()[-1]["content"], i.max_tokens) for i in ds.items] == [("one", 64), ("two", None)]


def test_sharegpt(tmp_path) -> None:
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "q1"},
                                      {"from": "gpt", "value": "r1"}, {"from": "human", "value": "q2"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "only a reply"}]},
    ]))
    ds = load_dataset(str(f))
    assert ds.format == "sharegpt" and ds.skipped == 1 and len(ds.items) == 1
    assert ds.items[0].first() == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}]
    assert ds.items[0].followups == ("q2",)


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "not valid JSON"),
    ("[]", "non-empty list"),
    ('[\n  "ok",\n  ""\n]', "line 3 (item 1): empty prompt"),
    ('{"prompts": [\n "a",\n\n 1]}', "line 4 (item 1): expected a string or an object"),
    ('[{"messages": [{"role": "robot", "content": "x"}]}]', "line 1 (item 0): each message needs a role"),
    ('[{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}]', "last message"),
    ('[{"system": "s"}]', "needs a non-empty 'prompt'"),
    ('["a", {"prompt": "b", "max_tokens": -1}]', "(item 1): max_tokens/output_tokens must be a positive"),
    ('[{"conversations": [{"from": "alien", "value": "x"}]}]', "unknown speaker"),
])
def test_errors_name_file_and_line(tmp_path, content: str, message: str) -> None:
    f = tmp_path / "p.json"
    f.write_text(content)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_dataset(str(f))
    assert str(f) in str(info.value)


def test_jsonl_error_names_the_line(tmp_path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ConfigError, match=r"p.jsonl, line 3: not valid JSON"):
        load_dataset(str(f))


def test_missing_file_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="not found.*short.json"):
        load_dataset("/nonexistent/prompts.json")


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
