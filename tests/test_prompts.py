"""prompts.py: the shipped file, the formats, and clear errors."""

from __future__ import annotations

import json

import pytest

from llm_users.errors import ConfigError
from llm_users.prompts import DEFAULT_PROMPTS, PromptCycle, load_prompts


def test_shipped_prompts() -> None:
    prompts = load_prompts()
    assert len(prompts) >= 50
    assert len({json.dumps(p) for p in prompts}) == len(prompts)  # varied, no duplicates
    assert DEFAULT_PROMPTS.name == "short.json"


def test_formats(tmp_path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(["hi", {"prompt": "q", "system": "s"},
                             {"messages": [{"role": "user", "content": "a"}]}]))
    assert load_prompts(f) == [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        [{"role": "user", "content": "a"}],
    ]


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "not valid JSON"),
    ("[]", "non-empty list"),
    ('[""]', "item 0: empty prompt"),
    ('[1]', "item 0: expected a string or an object"),
    ('[{"messages": [{"role": "robot", "content": "x"}]}]', "item 0: each message needs a role"),
    ('[{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}]', "last message"),
    ('[{"system": "s"}]', "needs a non-empty 'prompt'"),
])
def test_errors_name_file_and_item(tmp_path, content: str, message: str) -> None:
    f = tmp_path / "p.json"
    f.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_prompts(f)
    assert str(f) in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_prompts("/nonexistent/prompts.json")


def test_cycle_offsets() -> None:
    c = PromptCycle([[{"role": "user", "content": str(i)}] for i in range(3)], start=4)
    assert [c.next()[0]["content"] for _ in range(4)] == ["1", "2", "0", "1"]
