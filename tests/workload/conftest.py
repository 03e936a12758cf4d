"""The workload tests' shared fixture: a real tokenizer.json trained here (tests/workload/tokenizer_files.py)."""

from __future__ import annotations

import pytest

from tests.workload.tokenizer_files import train_tokenizer


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")
