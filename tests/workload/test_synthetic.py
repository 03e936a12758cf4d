"""workload/synthetic.py against a Probe with a harder tokenizer than the simulator's (a Probe is the
interface ServerProbe implements over HTTP; e2e tests use that). Sessions: tests/workload/test_sessions.py."""

from __future__ import annotations

import pytest

from llm_users.workload.lengths import parse_lengths
from llm_users.workload.synthetic import SyntheticSource


def bpe_like(text: str) -> int:
    """Words of 7+ letters are 2 tokens, the rest 1: a tokenizer that is not one-per-word."""
    return sum(2 if len(w) >= 7 else 1 for w in text.split())


class Probe:
    backend = "test"

    def __init__(self, tokenizer: bool, overhead: int = 9) -> None:
        self.has_tokenizer = tokenizer
        self.overhead = overhead
        self.calls = 0
        self.sent: list[str] = []  # the probe requests' contents

    def prompt_tokens(self, messages) -> int:
        self.calls += 1
        self.sent.append(messages[-1]["content"])
        return bpe_like(messages[-1]["content"]) + self.overhead

    def tokenize(self, text: str) -> int | None:
        return bpe_like(text) if self.has_tokenizer else None


def _achieved(source: SyntheticSource, probe: Probe, n: int = 40) -> list[tuple[int, int]]:
    lane = source.lane(0)
    out = []
    for _ in range(n):
        item = lane.next()
        out.append((probe.prompt_tokens(item.messages), item.target_input_tokens))
    return out


def test_tokenizer_path_is_exact_with_multi_token_words() -> None:
    src = SyntheticSource(parse_lengths("128:2048", "x"), seed=1)
    probe = Probe(tokenizer=True)
    src.prepare(probe)
    assert src.describe()["method"] == "tokenizer" and src.describe()["overhead_tokens"] == 9
    # one probe request, of 16 words: a CPU server's prefill of a long probe came off the run
    assert [len(t.split()) for t in probe.sent] == [16]
    pairs = _achieved(src, probe)
    exact = sum(a == t for a, t in pairs)
    assert exact >= 0.95 * len(pairs), pairs  # a 2-token word can straddle the target by one
    assert all(abs(a - t) <= 1 for a, t in pairs)


@pytest.mark.parametrize(("target", "limit"), [("512", 0.02), ("2048", 0.02), ("128", 0.05)])
def test_calibration_path_error(target: str, limit: float) -> None:
    """Without a tokenizer, against one that splits a fifth of the words (worse than real BPE
    on these common words): within 2% at 512 and 2048 tokens; a 128-token prompt is one part
    of a pass, so its mix of long and short words varies more."""
    worst = 0.0
    for seed in range(10):
        src = SyntheticSource(parse_lengths(target, "x"), seed=seed)
        src._run = "test"  # the per-process salt (a uuid in a real run): the same prompts every time
        probe = Probe(tokenizer=False)
        src.prepare(probe)
        d = src.describe()
        assert d["method"] == "calibration" and 1.0 < d["tokens_per_word"] < 2.0
        worst = max(worst, *(abs(a - t) / t for a, t in _achieved(src, probe, 20)))
    assert worst <= limit, worst
