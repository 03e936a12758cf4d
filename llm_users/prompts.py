"""Prompt files, kept for locustfiles that load one themselves: :func:`load_prompts` reads any
dataset format (see :mod:`llm_users.workload.datasets`) into a list of chat-message lists.
Users draw their prompts from a request source (:mod:`llm_users.workload`), not from here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .workload.datasets import load_dataset
from .workload.source import Messages

#: The prompts file shipped inside the package, used when none is given.
DEFAULT_PROMPTS = Path(str(resources.files("llm_users.data") / "prompts" / "short.json"))


def load_prompts(path: str | Path | None = None) -> list[Messages]:
    """Read and validate a prompts file. Raises ConfigError naming the file and the item."""
    return [item.first() for item in load_dataset(str(path) if path else None).items]


__all__ = ["DEFAULT_PROMPTS", "Messages", "load_prompts"]
