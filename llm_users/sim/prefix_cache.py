"""A prefix cache model for ``--prefix-cache-block N``: how many leading prompt tokens a server
with automatic prefix caching would find cached, reported the way vLLM (with
``--enable-prompt-tokens-details``) and OpenAI report it: ``usage.prompt_tokens_details.
cached_tokens``.

The prompt's words (the simulator's tokens) are cut into blocks of N; each block is keyed by a
hash chained over every block before it (as vLLM's block hashes are), so a block counts as
cached only when the whole prefix up to it was seen before. Cached = N x the leading blocks
already seen. The newest ``capacity`` block keys are kept (LRU). Latency is not changed.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict


class PrefixCache:
    def __init__(self, block: int, capacity: int = 200_000) -> None:
        self.block = block
        self.capacity = capacity
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def lookup_and_add(self, prompt: str) -> int:
        """Cached tokens for ``prompt``; its blocks are remembered for the next request."""
        words = prompt.split()
        h = hashlib.blake2b(digest_size=16)
        cached = 0
        hit = True
        for i in range(0, len(words) - len(words) % self.block, self.block):
            h.update(" ".join(words[i:i + self.block]).encode() + b"\x00")
            key = h.digest()
            if hit and key in self._keys:
                cached += self.block
                self._keys.move_to_end(key)
            else:
                hit = False
                self._keys[key] = None
                if len(self._keys) > self.capacity:
                    self._keys.popitem(last=False)
        return cached

    def clear(self) -> None:
        """Forget every block (the server's reset route)."""
        self._keys.clear()
