"""A small local tokenizer for the peer tools that want a Hugging Face one (GuideLLM,
inference-perf): a word-level tokenizer.json built from a generated vocabulary, saved with
its tokenizer_config.json so ``AutoTokenizer.from_pretrained(DIR)`` loads it offline. Token
counts only steer the tools' prompt lengths; every figure the table reads is per chunk.

    python bench/peers/make_tokenizer.py DIR    (run with a venv that has ``tokenizers``)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    words = ["[UNK]", "[PAD]", "<s>", "</s>"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    words += [a + b + c for a in letters for b in letters[:10] for c in letters[:10]]
    words += list(letters) + [str(i) for i in range(100)] + list(".,!?;:'\"()-")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]",
        "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 131072}))
    (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
    print(f"peers: tokenizer written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
