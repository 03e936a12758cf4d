"""A Hugging Face ``tokenizer.json`` read on this machine (``--llm-tokenizer PATH``): prompt
lengths counted locally, so exact-length prompts are fitted without asking the server.

Read with the ``tokenizers`` library (an optional extra: ``pip install 'locust-llm[tokenizer]'``),
imported only when the option is given. Counts exclude special tokens (BOS, the chat template's
markers): the server adds those around the content, and the synthetic source measures that
overhead once, from one real request (:class:`~llm_users.workload.synthetic.Fitter`). Pure: no
I/O beyond reading the file, no gevent; the simulator counts with the same class
(``llm-sim --tokenizer``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llm_users.errors import ConfigError

INSTALL_HINT = "pip install 'locust-llm[tokenizer]' (the tokenizers package)"


class LocalTokenizer:
    """``count(text)``: the tokens of ``text`` without special tokens; ``ids(text)`` the same ids."""

    def __init__(self, path: str, option: str = "--llm-tokenizer") -> None:
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"  # a model directory, as Hugging Face lays them out
        if not p.is_file():
            raise ConfigError(f"{option}: no tokenizer file at {path} (give a tokenizer.json or the directory holding it)")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(f"{option} needs the tokenizers package: {INSTALL_HINT}") from None
        try:
            self._tok: Any = Tokenizer.from_file(str(p))
        except Exception as e:  # the library raises a bare Exception for a bad file
            raise ConfigError(f"{option}: {p} is not a Hugging Face tokenizer.json ({str(e)[:200]})") from None
        self.path = str(p)
        self.name = p.parent.name + "/" + p.name if p.parent.name else p.name

    def ids(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)
