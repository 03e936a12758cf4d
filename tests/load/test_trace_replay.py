"""Trace files: Mooncake's shape, shared prefix blocks, worker split, one-line errors."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.load.trace_replay import BLOCK_TOKENS, TraceSource, load_trace, prompt_text


def test_load_sort_and_split(tmp_path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n\n'
                 '{"timestamp": 0, "input_length": 3, "output_length": 7}\n'
                 '{"offset_ms": 1000, "input_tokens": 520, "output_tokens": 2, "hash_ids": [1, 9]}\n')
    rows = load_trace(str(p))
    assert [r.offset_s for r in rows] == [0.0, 1.0, 2.0]
    src = TraceSource(rows, speedup=2.0)
    mine = list(src.rows(0, 2))
    assert [(o, it.max_tokens) for o, it in mine] == [(0.0, 7), (1.0, 5)]
    assert [(o, it.max_tokens, it.prefix_id) for o, it in src.rows(1, 2)] == [(0.5, 2, 1)]
    assert mine[1][1].target_input_tokens == 600
    a, b = prompt_text(rows[2], 2).split(), prompt_text(rows[1], 1).split()
    assert len(a) == 600 and len(b) == 520
    assert a[:BLOCK_TOKENS] == b[:BLOCK_TOKENS]  # block 1 is shared
    assert a[BLOCK_TOKENS:] != b[BLOCK_TOKENS:]


@pytest.mark.parametrize(("line", "msg"), [
    ("nope", "line 1"), ('{"timestamp": -1, "input_length": 1, "output_length": 1}', "timestamp"),
    ('{"timestamp": 1, "output_length": 1}', "input_length"), ('{"timestamp": 1, "input_length": 1, '
                                                               '"output_length": 0}', "output_length"),
    ('{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": "x"}', "hash_ids"), ("[1]", "object")])
def test_bad_lines(tmp_path, line, msg) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(ConfigError, match=msg):
        load_trace(str(p))


def test_missing_or_empty(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_trace(str(tmp_path / "none.jsonl"))
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="no requests"):
        load_trace(str(tmp_path / "e.jsonl"))
