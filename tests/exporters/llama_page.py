"""A llama.cpp /metrics page (``--metrics``), its counters and gauges left to ``str.format``."""

from __future__ import annotations

LLAMA = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
llamacpp:tokens_predicted_total {gen}
llamacpp:prompt_seconds_total 1.5
llamacpp:tokens_predicted_seconds_total 3.2
llamacpp:n_decode_total 400
llamacpp:n_busy_slots_per_decode 1.8
llamacpp:prompt_tokens_seconds 850.2
llamacpp:predicted_tokens_seconds 120.5
llamacpp:requests_processing {running}
llamacpp:requests_deferred {deferred}
llamacpp:n_tokens_max 512
"""
