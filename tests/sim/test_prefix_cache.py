"""sim/prefix_cache.py: chained block keys, like vLLM's automatic prefix caching."""

from __future__ import annotations

from llm_users.sim.prefix_cache import PrefixCache


def test_leading_blocks_seen_before_are_cached() -> None:
    c = PrefixCache(4)
    a = "a b c d e f g h i j"  # two full blocks + 2 words
    assert c.lookup_and_add(a) == 0
    assert c.lookup_and_add(a) == 8
    assert c.lookup_and_add("a b c d X f g h") == 4  # the second block differs
    assert c.lookup_and_add("X b c d e f g h") == 0  # a block is cached only after the same prefix
    small = PrefixCache(2, capacity=2)
    small.lookup_and_add("a b c d e f")  # three keys, the first evicted
    assert small.lookup_and_add("a b c d e f") == 0
