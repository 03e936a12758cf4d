"""workload/tokenizer.py: the server probe tries the backend's tokenize shapes in turn and keeps
the first that counts the text."""

from __future__ import annotations

import pytest


def test_tokenizer_probe_skips_a_shape_that_counts_no_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp's server answers vLLM's ``{"prompt"}`` shape with ``{"tokens": []}`` (its field is
    ``content``): a count of 0 for a text is a shape it does not read, so the next one is tried."""
    from llm_users.protocols.openai import TOKENIZERS
    from llm_users.workload.tokenizer import ServerProbe

    probe = ServerProbe.__new__(ServerProbe)
    probe.tokenizers, probe.shape, probe._tried = TOKENIZERS, None, False
    answers = {"vllm": 0, "llama.cpp": 7}
    monkeypatch.setattr(ServerProbe, "_call", lambda self, shape, text, quiet=False: answers.get(shape.name))
    assert probe.tokenize("seven words of text to count here") == 7 and probe.shape.name == "llama.cpp"
