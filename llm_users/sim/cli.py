"""``llm-sim``: run the simulator from the command line.

When the socket is listening it prints exactly one line to stdout,
``llm-sim: serving on http://HOST:PORT``, and flushes (``--port 0`` picks a free port; the line
says which). SIGTERM or SIGINT stop it. uvloop is used when installed (``--no-uvloop`` to
refuse it); otherwise the standard asyncio loop, silently.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Sequence
from typing import Any

from llm_users.errors import ConfigError
from llm_users.health.heap import fix_mmap_threshold
from llm_users.sim.config import (
    DEFAULT_MAX_TOKENS,
    DISTRIBUTIONS,
    FAULT_KINDS,
    REASONING_STREAM,
    USAGE_ZERO,
    SimConfig,
)
from llm_users.sim.routes import route_modules
from llm_users.workload.local_tokenizer import LocalTokenizer

DESCRIPTION = """\
Embedded LLM inference server simulator: one process speaks the OpenAI/vLLM, TGI, Ollama,
Anthropic and Gemini streaming protocols on one port, with seeded timing, a batch-capacity
model, ground truth per request (GET /_sim/trace) and fault injection."""

EPILOG = """\
routes: POST /v1/chat/completions /v1/completions (GET /v1/models); POST /generate_stream
/generate / (GET /info); POST /api/chat /api/generate (GET /api/tags /api/version);
POST /v1/messages; POST /v1beta|v1/models/MODEL:streamGenerateContent|:generateContent;
POST /v1/embeddings /v1/rerank /rerank /api/embed /embed, MODEL:embedContent|:batchEmbedContents;
GET /metrics /health /_sim/stats /_sim/config; GET|DELETE /_sim/trace[?request_id=X].
Per-request header X-Sim-Fault: KIND[;after=N] forces a fault; X-Request-Id turns on ground
truth for that request. See docs/simulator.md."""


def _nonneg(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in FAULT_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown fault kind(s) {', '.join(bad)}; choose from {', '.join(FAULT_KINDS)}")
    return kinds


def _modules(text: str) -> list[str]:
    return [m.strip() for m in text.split(",") if m.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-sim", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    g.add_argument("--port", type=_nonneg(int), default=8000, help="port to bind; 0 picks a free one (default 8000)")
    g.add_argument("--model", default="sim-model", help="model name listed by /v1/models, /api/tags, /info and "
                   "used as the metrics label (default sim-model); answers echo the request's model")
    g.add_argument("--seed", type=int, default=0, help="seed of the text, timing and fault draws (default 0)")
    g.add_argument("--no-uvloop", dest="uvloop", action="store_false", help="use asyncio's loop even if uvloop "
                   "is installed")
    g.add_argument("--tls-cert", default=None, metavar="PEM", help="serve HTTPS with this certificate chain "
                   "(with --tls-key): to measure a client's TLS path")
    g.add_argument("--tls-key", default=None, metavar="PEM", help="the private key of --tls-cert")
    g.add_argument("--exit-with-parent", action="store_true", help="exit when the parent process goes away "
                   "(the launcher sets it)")
    g.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    g.add_argument("--routes", type=_modules, action="extend", default=None, metavar="MODULE[,MODULE]",
                   help="also serve the routes of these modules (each defines add_routes(app)): a backend's "
                   "simulator routes from outside the package (its descriptor's sim_routes); repeatable")
    g.add_argument("--only-backends", type=_modules, default=None, metavar="NAME[,NAME]",
                   help="serve only these backends' routes (e.g. tgi: a server that speaks one dialect; "
                   "names as in the backend registry: vllm, openai, tgi, ollama, claude, gemini); default all")

    g = p.add_argument_group("timing (milliseconds)")
    g.add_argument("--ttft-ms", type=_nonneg(float), default=50.0, help="time to first token: the first chunk is "
                   "due at arrival + queue wait + this (default 50)")
    g.add_argument("--ttft-dist", choices=DISTRIBUTIONS, default="fixed", help="TTFT distribution (default fixed)")
    g.add_argument("--ttft-sd-ms", type=_nonneg(float), default=0.0, help="TTFT standard deviation (default 0)")
    g.add_argument("--itl-ms", type=_nonneg(float), default=10.0, help="gap between consecutive chunks, what a "
                   "client measures as ITL (default 10)")
    g.add_argument("--itl-dist", choices=DISTRIBUTIONS, default="fixed", help="chunk-gap distribution "
                   "(default fixed)")
    g.add_argument("--itl-sd-ms", type=_nonneg(float), default=0.0, help="chunk-gap standard deviation (default 0)")
    g.add_argument("--cold-start-ms", type=_nonneg(float), default=0.0, help="extra TTFT for the first request "
                   "on each new TCP connection (default 0)")
    g.add_argument("--prefill-us-per-token", type=_nonneg(float), default=0.0, help="prefill: TTFT grows by this "
                   "many MICROseconds per prompt token not found in the prefix cache, image tokens included "
                   "(default 0: TTFT does not depend on the prompt)")

    g = p.add_argument_group("output")
    g.add_argument("--output-tokens", type=_positive_int, default=None, help="tokens per answer, as if "
                   "ignore_eos: min(N, the request's max tokens); fewer than the max ends with a stop/EOS. "
                   f"Default: the request's max (or {DEFAULT_MAX_TOKENS}; vLLM /v1/completions 16)")
    g.add_argument("--tokens-per-chunk", type=_positive_int, default=1, help="tokens in each chunk (default 1)")
    g.add_argument("--gemini-tokens-per-chunk", type=_positive_int, default=4, help="tokens per chunk on the "
                   "Gemini routes (default 4, as Gemini streams)")

    g.add_argument("--template-tokens", type=_nonneg(int), default=0, help="prompt tokens a chat template adds "
                   "per message on chat routes, counted in usage and by /tokenize with messages (default 0)")

    g.add_argument("--tokenizer", default=None, metavar="PATH", help="count prompt tokens (usage, /tokenize) with "
                   "this Hugging Face tokenizer.json instead of one per word, special tokens excluded (needs the "
                   "tokenizers package); the template tokens are added on top")
    g.add_argument("--reasoning-tokens", type=_nonneg(int), default=0, help="of each answer's tokens, the first N "
                   "are reasoning: streamed first as each dialect's reasoning text (OpenAI-compatible delta.reasoning, "
                   "Anthropic thinking_delta, Gemini thought parts, Ollama thinking) and reported in usage (OpenAI "
                   "completion_tokens_details.reasoning_tokens, Anthropic "
                   "output_tokens_details.thinking_tokens, Gemini thoughtsTokenCount; default 0)")
    g.add_argument("--reasoning-stream", choices=REASONING_STREAM, default="full", help="how much of the "
                   "--reasoning-tokens streams: full (default); hidden: decoded on the clock, counted in usage, never "
                   "streamed (OpenAI o-series chat completions and Responses, Gemini without includeThoughts); summary: "
                   "only the last quarter streams, as a summary (Responses reasoning_summary_text, Claude's summarised "
                   "thinking, Gemini thought summaries). Chat has no summary (hidden instead), Claude no hidden "
                   "(summary instead); Ollama always streams it in full")
    g.add_argument("--ignore-max-tokens", type=_positive_int, default=None, metavar="N", help="ignore the "
                   "request's max-token field and answer N tokens, as servers that do not know the field do "
                   "(llama.cpp and max_completion_tokens); default honour it")
    g.add_argument("--answer-model", default=None, metavar="NAME", help="report NAME as the model in every "
                   "answer, whatever the request asked for (a server serving one fixed model)")
    g.add_argument("--usage-zero", choices=USAGE_ZERO, default=None, help="report 0 output tokens, 0 input "
                   "tokens or both in every answer's usage (streamed and not, every protocol) while the text "
                   "streams as usual, as LiteLLM's Gemini bridge reports usageMetadata counts of 0 in every "
                   "chunk; the ground truth keeps the true counts (default off)")

    g.add_argument("--prefix-cache-block", type=_nonneg(int), default=0, help="model automatic prefix "
                   "caching in blocks of N tokens: OpenAI-route usage reports prompt_tokens_details.cached_tokens "
                   "(default 0: off)")
    g.add_argument("--timings", action="store_true", help="OpenAI-route usage chunks carry the server's own "
                   "per-request timings as vLLM does with --enable-per-request-metrics (metrics: queue_time_ms, "
                   "time_to_first_token_ms = prefill, generation_time_ms = decode), from the engine's ground truth; "
                   "the Ollama route always reports its durations (default off)")
    g.add_argument("--cache-reset-routes", default="vllm,sglang", help="the prefix-cache reset routes served: "
                   "vllm (POST /reset_prefix_cache), sglang (/flush_cache), comma-separated, or none "
                   "(default vllm,sglang)")

    g = p.add_argument_group("capacity")
    g.add_argument("--max-batch", type=_positive_int, default=256, help="streams decoding at once; more wait in "
                   "a FIFO queue and the wait adds to TTFT (default 256)")
    g.add_argument("--itl-slope-ms", type=_nonneg(float), default=0.0, help="chunk gap grows by this per other "
                   "running stream: itl + slope*(running-1) (default 0)")
    g.add_argument("--max-queue", type=_nonneg(int), default=None, help="queue length beyond which requests are "
                   "refused like the real server when overloaded (vLLM 503, TGI 429, Anthropic 529, Gemini 503, "
                   "Ollama 503); default unlimited")

    g = p.add_argument_group("embeddings and rerank (their own slots and queue)")
    g.add_argument("--embed-base-ms", type=_nonneg(float), default=5.0, help="an embeddings/rerank request takes "
                   "base + per-token x its batch's input tokens (default 5)")
    g.add_argument("--embed-token-ms", type=_nonneg(float), default=0.01, help="milliseconds per input token of "
                   "the batch (a rerank pair counts query + document; default 0.01)")
    g.add_argument("--embed-max-batch", type=_positive_int, default=32, help="embeddings/rerank requests served "
                   "at once; more wait in a FIFO queue (default 32)")
    g.add_argument("--embed-dim", type=_positive_int, default=384, help="numbers per embedding vector (default 384)")

    g = p.add_argument_group("faults")
    g.add_argument("--fault-rate", type=float, default=0.0, help="probability that a request gets a fault "
                   "(seeded; default 0)")
    g.add_argument("--fault-kinds", type=_kinds, default=FAULT_KINDS, help="comma list drawn from: "
                   + ",".join(FAULT_KINDS) + " (default all)")
    g.add_argument("--fault-after", type=_nonneg(int), default=None, metavar="N", help="drawn faults strike "
                   "after N token-bearing chunks, every time at the same point (default: a point drawn per request)")
    g.add_argument("--stall-ms", type=_nonneg(float), default=1000.0, help="pause of the stall fault (default 1000)")
    g.add_argument("--retry-after-s", type=_nonneg(int), default=1, help="Retry-After on 429 answers (default 1)")
    g.add_argument("--require-api-key", default=None, metavar="KEY", help="answer 401 unless the request "
                   "carries KEY (Bearer, x-api-key, x-goog-api-key or ?key=); default accept anything")

    g = p.add_argument_group("ground truth")
    g.add_argument("--trace-file", default=None, metavar="FILE", help="append one JSON line per finished "
                   "request that carried X-Request-Id")
    g.add_argument("--trace-prompts", action="store_true", help="keep each request's prompt text and message "
                   "count in its trace record (for checking what was sent, e.g. session history)")
    g.add_argument("--trace-limit", type=_nonneg(int), default=2_000, help="finished records kept in memory "
                   "for /_sim/trace, newest first out last (default 2000: a small ring; a bench that reads "
                   "every trace asks for more)")
    return p


def config_from_args(argv: Sequence[str] | None = None) -> tuple[SimConfig, argparse.Namespace]:
    parser = build_parser()
    ns = parser.parse_args(argv)
    fields = {k: v for k, v in vars(ns).items() if k != "log_level"}
    fields["routes"] = tuple(dict.fromkeys(ns.routes or ()))
    fields["only_backends"] = tuple(ns.only_backends or ())
    if (ns.tls_cert is None) != (ns.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    try:
        cfg = SimConfig(**fields)
        route_modules(cfg)  # a module that is not there stops here, with its name
        if cfg.tokenizer:
            LocalTokenizer(cfg.tokenizer, "--tokenizer")  # a bad file or no package stops here too
        _tls_context(cfg)  # a missing or unreadable certificate stops here
    except (ValueError, ImportError, ConfigError) as e:
        parser.error(str(e))
    except (OSError, ssl.SSLError) as e:
        parser.error(f"--tls-cert/--tls-key: {e}")
    return cfg, ns


def _url(host: str, port: int, scheme: str = "http") -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _tls_context(cfg: SimConfig) -> ssl.SSLContext | None:
    if cfg.tls_cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    return ctx


async def serve(cfg: SimConfig, ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGTERM/SIGINT. ``ready(url)`` is called once the socket listens."""
    from aiohttp import web

    from llm_users.sim.app import build_app

    app = build_app(cfg)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((cfg.host, cfg.port))
    tls = _tls_context(cfg)
    site = web.SockSite(runner, sock, backlog=4096, ssl_context=tls)
    await site.start()
    url = _url(cfg.host, sock.getsockname()[1], "https" if tls else "http")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    fix_mmap_threshold()  # large transient buffers go back to the system (llm_users/health/heap.py)
    gc.collect()
    gc.freeze()  # startup objects out of the collector's way: shorter pauses on the chunk clock
    if ready is not None:
        ready(url)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _loop_factory(want_uvloop: bool) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if not want_uvloop:
        return None
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    cfg, ns = config_from_args(argv)
    logging.basicConfig(level=getattr(logging, str(ns.log_level).upper(), logging.WARNING), stream=sys.stderr,
                        format="llm-sim %(levelname)s %(name)s: %(message)s")

    def ready(url: str) -> None:
        sys.stdout.write(f"llm-sim: serving on {url}\n")
        sys.stdout.flush()

    try:
        with asyncio.Runner(loop_factory=_loop_factory(cfg.uvloop)) as runner:
            runner.run(serve(cfg, ready))
    except OSError as e:
        print(f"llm-sim: cannot serve on {cfg.host}:{cfg.port}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
