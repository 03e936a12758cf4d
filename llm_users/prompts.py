"""Prompt sources: load a prompts file into chat messages and hand them out in turn.

File format (JSON), documented in docs/prompts.md: either a list or an object with a
``"prompts"`` list. Each item is one of

- a string: one user message;
- ``{"prompt": "...", "system": "..."}`` (``system`` optional);
- ``{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .errors import ConfigError

Messages = list[dict[str, str]]

#: The prompts file shipped with the project, used when none is given.
DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "prompts" / "short.json"
_ROLES = {"system", "user", "assistant"}


def load_prompts(path: str | Path | None = None) -> list[Messages]:
    """Read and validate a prompts file. Raises ConfigError naming the file and the item."""
    p = Path(path) if path else DEFAULT_PROMPTS
    try:
        data = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"prompts file not found: {p}") from None
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"prompts file {p} is not valid JSON: {e}") from None
    items = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise ConfigError(f"prompts file {p} must hold a non-empty list (or an object with a 'prompts' list)")
    return [_messages(item, p, i) for i, item in enumerate(items)]


def _messages(item: Any, path: Path, i: int) -> Messages:
    where = f"prompts file {path}, item {i}"
    if isinstance(item, str):
        if not item.strip():
            raise ConfigError(f"{where}: empty prompt")
        return [{"role": "user", "content": item}]
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a string or an object, got {type(item).__name__}")
    if "messages" in item:
        msgs = item["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise ConfigError(f"{where}: 'messages' must be a non-empty list")
        out: Messages = []
        for m in msgs:
            if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
                raise ConfigError(f"{where}: each message needs a role in {sorted(_ROLES)} and a string content")
            out.append({"role": m["role"], "content": m["content"]})
        if out[-1]["role"] != "user":
            raise ConfigError(f"{where}: the last message must be from the user")
        return out
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"{where}: needs a non-empty 'prompt' string or a 'messages' list")
    system = item.get("system")
    if system is not None and not isinstance(system, str):
        raise ConfigError(f"{where}: 'system' must be a string")
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": prompt})
    return msgs


class PromptCycle:
    """Hands out prompts in order, each user starting at its own offset."""

    __slots__ = ("_prompts", "_i")

    def __init__(self, prompts: list[Messages], start: int = 0) -> None:
        if not prompts:
            raise ConfigError("no prompts to send")
        self._prompts = prompts
        self._i = start % len(prompts)

    def next(self) -> Messages:
        msgs = self._prompts[self._i]
        self._i = (self._i + 1) % len(self._prompts)
        return msgs
