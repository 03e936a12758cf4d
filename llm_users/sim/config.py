"""The simulator's settings: one frozen dataclass, filled from the command line or by hand.

Times are milliseconds here (what a person types); the engine converts them to nanoseconds
once. ``output_tokens=None`` means "as many as the request allows" (its max tokens, or the
protocol's default when it gives none).
"""

from __future__ import annotations

from dataclasses import dataclass

DISTRIBUTIONS = ("fixed", "normal", "lognormal")

FAULT_KINDS = (
    "http_429",
    "http_500",
    "http_503",
    "reset",
    "malformed",
    "stall",
    "truncate",
    "midstream_error",
    "empty_200",
    "reset_after_read",
    "big_frame",
    "hang",
)

USAGE_ZERO = ("output", "input", "both")

REASONING_STREAM = ("full", "summary", "hidden")

DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True, slots=True)
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "sim-model"
    seed: int = 0

    ttft_ms: float = 50.0
    ttft_dist: str = "fixed"
    ttft_sd_ms: float = 0.0
    itl_ms: float = 10.0
    itl_dist: str = "fixed"
    itl_sd_ms: float = 0.0

    output_tokens: int | None = None
    tokens_per_chunk: int = 1
    gemini_tokens_per_chunk: int = 4

    max_batch: int = 256
    itl_slope_ms: float = 0.0
    max_queue: int | None = None
    cold_start_ms: float = 0.0
    prefill_us_per_token: float = 0.0  # TTFT grows by this per uncached prompt token (images included)

    # embeddings and rerank (routes_embed.py): base + per-token x batch tokens, in their own slots
    embed_base_ms: float = 5.0
    embed_token_ms: float = 0.01
    embed_max_batch: int = 32
    embed_dim: int = 384

    fault_rate: float = 0.0
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    fault_after: int | None = None  # drawn faults strike after this many chunks; None: drawn too
    stall_ms: float = 1000.0
    retry_after_s: int = 1

    require_api_key: str | None = None

    reasoning_tokens: int = 0  # of each answer's tokens, the first ones: streamed as reasoning and reported in usage
    reasoning_stream: str = "full"  # how much of it streams: "full", "summary", "hidden" (base.py show_reasoning)
    ignore_max_tokens: int | None = None  # ignore the request's max-token field: write N tokens
    answer_model: str | None = None  # report this model, whatever the request asked for
    usage_zero: str | None = None  # usage reports 0 "output", "input" or "both" token counts (the trace keeps the truth)

    trace_file: str | None = None
    trace_limit: int = 2_000  # a small ring by default; tests and benches that read traces ask for more
    trace_prompts: bool = False

    template_tokens: int = 0
    tokenizer: str | None = None  # a Hugging Face tokenizer.json counts prompt tokens (default: words)
    prefix_cache_block: int = 0
    timings: bool = False  # OpenAI-route usage chunks carry vLLM's per-request ``metrics`` (queue, prefill, decode)
    cache_reset_routes: str = "vllm,sglang"  # which reset routes answer (the others 404): vllm, sglang, none

    uvloop: bool = True
    exit_with_parent: bool = False
    tls_cert: str | None = None  # serve HTTPS with this certificate (PEM) and --tls-key
    tls_key: str | None = None
    #: route modules to serve besides the built-in backends' (each has ``add_routes(app)``)
    routes: tuple[str, ...] = ()
    only_backends: tuple[str, ...] = ()  # serve only these backends' routes (empty: all)

    def __post_init__(self) -> None:
        for name in ("ttft_dist", "itl_dist"):
            if getattr(self, name) not in DISTRIBUTIONS:
                raise ValueError(f"{name} must be one of {', '.join(DISTRIBUTIONS)}")
        for name in ("ttft_ms", "ttft_sd_ms", "itl_ms", "itl_sd_ms", "itl_slope_ms", "cold_start_ms", "stall_ms",
                     "prefill_us_per_token"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.output_tokens is not None and self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")
        if self.tokens_per_chunk < 1 or self.gemini_tokens_per_chunk < 1:
            raise ValueError("tokens per chunk must be >= 1")
        if self.embed_max_batch < 1 or self.embed_dim < 1:
            raise ValueError("embed_max_batch and embed_dim must be >= 1")
        if self.embed_base_ms < 0 or self.embed_token_ms < 0:
            raise ValueError("embed_base_ms and embed_token_ms must be >= 0")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.max_queue is not None and self.max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {self.max_queue}")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1], got {self.fault_rate}")
        unknown = [k for k in self.fault_kinds if k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}: choose from {', '.join(FAULT_KINDS)}")
        if self.fault_rate > 0 and not self.fault_kinds:
            raise ValueError("fault_rate > 0 needs at least one fault kind")
        if self.reasoning_stream not in REASONING_STREAM:
            raise ValueError(f"reasoning_stream must be one of {', '.join(REASONING_STREAM)}, "
                             f"got {self.reasoning_stream!r}")
        if self.usage_zero is not None and self.usage_zero not in USAGE_ZERO:
            raise ValueError(f"usage_zero must be one of {', '.join(USAGE_ZERO)}, got {self.usage_zero!r}")
        if not set(self.cache_reset_routes.split(",")) <= {"vllm", "sglang", "none", ""}:
            raise ValueError("cache_reset_routes must list vllm, sglang or none")
        if self.prefix_cache_block < 0:
            raise ValueError("prefix_cache_block must be >= 0")
        if self.template_tokens < 0:
            raise ValueError("template_tokens must be >= 0")
        if self.trace_limit < 0:
            raise ValueError("trace_limit must be >= 0")
        if any(not m or not all(p.isidentifier() for p in m.split(".")) for m in self.routes):
            raise ValueError(f"routes must be module names, got {', '.join(map(repr, self.routes))}")
