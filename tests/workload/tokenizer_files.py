"""A real Hugging Face tokenizer.json for tests, trained here (no download): byte-pair merges over
the synthetic prompts' words, small enough that a fifth of them take 2-5 tokens, as a served
model's tokenizer splits rarer words."""

from __future__ import annotations

import random
from pathlib import Path


def train_tokenizer(path: Path, vocab_size: int = 400) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from llm_users.workload.synthetic import WORDS

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(50)) for _ in range(200)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]", "<s>"],
                                                        show_progress=False))
    tok.save(str(path))
    return path
