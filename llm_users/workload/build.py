"""From the ``--llm-*`` workload options to one request source per process (cached), and the
options themselves (registered by :func:`llm_users.options.add_arguments`, parsed by
:func:`workload_options` into the configuration's ``workload``)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, replace
from typing import Any

from llm_users.durations import parse_duration_s
from llm_users.errors import ConfigError
from llm_users.workload.dataset_source import DatasetSource
from llm_users.workload.datasets import DEFAULT_DATASET, load_dataset
from llm_users.workload.images import DEFAULT_SIZE, ImageSource, SyntheticImages, parse_count, parse_size
from llm_users.workload.lengths import Lengths, parse_lengths
from llm_users.workload.sessions import SessionSource
from llm_users.workload.source import Lane, RequestSource, WorkItem, WrappedSource
from llm_users.workload.synthetic import SyntheticSource


def add_arguments(opt: Any) -> None:
    """``opt(name, help, **kw)`` registers one option (see options.add_arguments)."""
    opt("--llm-dataset", "dataset: a prompts JSON, JSONL or ShareGPT file, or a shipped one by name "
        "(short, conversations; see docs/prompts.md). --llm-prompts is the same option")
    opt("--llm-input-tokens", "synthetic prompts of this many input tokens (server-counted): 512, 128:2048 "
        "(uniform) or normal:512,64")
    opt("--llm-output-tokens", "max output tokens per request drawn from 256, 64:512 or normal:256,32 "
        "(with ignore_eos where the backend has it)")
    opt("--llm-prefix-tokens", "synthetic prompts start with one of --llm-prefix-count shared prefixes of "
        "this many tokens", type=int)
    opt("--llm-prefix-count", "how many distinct shared prefixes (default 1 with --llm-prefix-tokens)", type=int)
    opt("--llm-turns", "multi-turn sessions of N turns: each turn sends the whole history", type=int)
    opt("--llm-think-time", "wait between a session's turns, e.g. 2s or 500ms (default 0)")
    opt("--llm-tokenizer", "a Hugging Face tokenizer.json (or its directory) of the served model: exact-length "
        "prompts are fitted on this machine, not by the server's /tokenize (needs the tokenizers package)")
    opt("--llm-responses-chain", "how a session's later turns reach --llm-endpoint responses: full (default: the "
        "whole history as input) or previous_id (previous_response_id + the new message; the server keeps the rest)")
    opt("--llm-workload-seed", "seed of the synthetic text and length draws (default 0)", type=int)
    opt("--llm-images", "N synthetic images in every request, sent inline in the backend's format (PNG, "
        "unique per request; see docs/prompts.md)")
    opt("--llm-image-size", "WIDTHxHEIGHT of the --llm-images images in pixels (default 512x512)")


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    dataset: str | None = None
    input_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    prefix_tokens: int = 0
    prefix_count: int = 0
    turns: int = 0
    think_s: float = 0.0
    seed: int = 0
    tokenizer: str | None = None  # --llm-tokenizer: a local tokenizer.json fits synthetic prompts
    chain: str = "full"  # --llm-responses-chain: "full" | "previous_id"
    images: int = 0  # --llm-images: synthetic images per request
    image_size: tuple[int, int] = DEFAULT_SIZE

    def for_class(self, user_cls: Any) -> WorkloadOptions:
        """The workload of one User class: its own ``prompts`` where no dataset was given."""
        own = getattr(user_cls, "prompts", None) if user_cls is not None else None
        return self if self.dataset or not own else replace(self, dataset=own)


def workload_options(options: Any) -> WorkloadOptions:
    def get(name: str) -> Any:
        v = getattr(options, name, None) if options is not None else None
        return None if v is None or v == "" else v

    dataset = get("llm_dataset") or get("llm_prompts")
    inp = get("llm_input_tokens")
    out = get("llm_output_tokens")
    prefix_tokens = int(get("llm_prefix_tokens") or 0)
    prefix_count = int(get("llm_prefix_count") or (1 if prefix_tokens else 0))
    if prefix_tokens < 0 or prefix_count < 0:
        raise ConfigError("--llm-prefix-tokens and --llm-prefix-count must be >= 0")
    if prefix_tokens and inp is None:
        raise ConfigError("--llm-prefix-tokens needs --llm-input-tokens (the prefix is part of a synthetic prompt)")
    if inp is not None and get("llm_dataset"):
        raise ConfigError("give --llm-dataset or --llm-input-tokens, not both")
    tokenizer = get("llm_tokenizer")
    if tokenizer is not None:
        _check_tokenizer(str(tokenizer), inp is not None or get("llm_trace") is not None)
    turns = int(get("llm_turns") or 0)
    if turns < 0:
        raise ConfigError(f"--llm-turns must be >= 1, got {turns}")
    size = get("llm_image_size")
    images = parse_count(get("llm_images") or 0)
    if size is not None and not images:
        raise ConfigError("--llm-image-size needs --llm-images N (how many images per request)")
    return WorkloadOptions(
        dataset=dataset,
        input_tokens=parse_lengths(inp, "--llm-input-tokens") if inp is not None else None,
        output_tokens=parse_lengths(out, "--llm-output-tokens") if out is not None else None,
        prefix_tokens=prefix_tokens,
        prefix_count=prefix_count,
        turns=turns,
        think_s=parse_duration_s(think, "--llm-think-time") if (think := get("llm_think_time")) else 0.0,
        seed=_seed(get("llm_workload_seed") or get("llm_seed") or 0),
        tokenizer=str(tokenizer) if tokenizer is not None else None,
        chain=_chain(get("llm_responses_chain")),
        images=images,
        image_size=parse_size(size) if size is not None else DEFAULT_SIZE,
    )


CHAINS = ("full", "previous_id")


def _chain(value: Any) -> str:
    chain = str(value or "full").strip().lower()
    if chain not in CHAINS:
        raise ConfigError(f"--llm-responses-chain must be full or previous_id, got {value!r}")
    return chain


def _check_tokenizer(path: str, used: bool) -> None:
    """--llm-tokenizer at start: the file is there, the package importable, and prompts to fit."""
    import importlib.util
    from pathlib import Path

    from llm_users.workload.local_tokenizer import INSTALL_HINT

    if not used:
        raise ConfigError("--llm-tokenizer fits synthetic prompts: give --llm-input-tokens (or --llm-trace) with it")
    p = Path(path)
    if not (p / "tokenizer.json" if p.is_dir() else p).is_file():
        raise ConfigError(f"--llm-tokenizer: no tokenizer file at {path} (give a tokenizer.json or the directory holding it)")
    if importlib.util.find_spec("tokenizers") is None:
        raise ConfigError(f"--llm-tokenizer needs the tokenizers package: {INSTALL_HINT}")


def _seed(value: Any) -> int:
    try:
        return int(value)
    except ValueError:  # --llm-workload-seed is an int to argparse: the value is --llm-seed's
        raise ConfigError(f"--llm-seed must be a whole number, got {value!r}") from None


def build_source(w: WorkloadOptions) -> RequestSource:
    source: RequestSource
    if w.input_tokens is not None:
        source = SyntheticSource(w.input_tokens, w.seed, w.prefix_tokens, w.prefix_count, w.tokenizer)
    else:
        dataset = load_dataset(w.dataset or DEFAULT_DATASET)
        if w.images and any(item.images for item in dataset.items):
            raise ConfigError(f"--llm-images: dataset {dataset.path} names its own images; give one or the other")
        source = DatasetSource(dataset)
    if w.images:  # before sessions: a session's first turn carries the images
        source = ImageSource(source, SyntheticImages(w.images, w.image_size, w.seed))
    if w.turns > 1:
        source = SessionSource(source, w.turns, w.think_s, chain=w.chain == "previous_id")
    if w.output_tokens is not None:
        source = OutputLengths(source, w.output_tokens, w.seed)
    return source


class OutputLengths(WrappedSource):
    """Sets every item's max output tokens from a distribution."""

    def __init__(self, inner: RequestSource, lengths: Lengths, seed: int) -> None:
        super().__init__(inner)
        self.lengths = lengths
        self.seed = seed

    def lane(self, index: int) -> Lane:
        return _OutputLane(self.inner.lane(index), self.lengths, random.Random(f"{self.seed}:out:{index}"))

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "output_tokens": self.lengths.describe()}


class _OutputLane(Lane):
    def __init__(self, inner: Lane, lengths: Lengths, rng: random.Random) -> None:
        self.inner = inner
        self.lengths = lengths
        self.rng = rng

    def next(self) -> WorkItem:
        item = self.inner.next()
        item.max_tokens = self.lengths.sample(self.rng)
        return item

    def reply(self, item: WorkItem, text: str | None) -> None:
        self.inner.reply(item, text)


_sources: dict[WorkloadOptions, RequestSource] = {}
_lock = threading.Lock()


def source_for(w: WorkloadOptions) -> RequestSource:
    """The process's source for this workload (one per distinct workload)."""
    with _lock:
        src = _sources.get(w)
        if src is None:
            src = _sources[w] = build_source(w)
    return src


def check(w: WorkloadOptions, descriptor: Any = None, endpoint: str | None = None) -> None:
    """Read the dataset at start (a bad file stops the run there); with images, the route of
    ``descriptor`` and ``endpoint`` must take them (its builder refuses them otherwise)."""
    source = source_for(w)
    if descriptor is not None and has_images(source):
        from llm_users.protocols.backend import RequestSpec
        from llm_users.protocols.images import Image
        from llm_users.protocols.sampling import Sampling

        route = descriptor.route(endpoint)
        if route.kind != "chat":  # embeddings and rerank take texts
            raise ConfigError(f"--llm-images: the {route.endpoint} route ({route.kind}) takes no images")
        one = Image("image/png", "", 1, 1)
        route.build(RequestSpec("m", [{"role": "user", "content": "x"}], Sampling(), images=(one,)))


def has_images(source: RequestSource) -> bool:
    """Whether the requests of ``source`` carry images (synthetic, or named by its dataset)."""
    while source is not None:
        if isinstance(source, ImageSource):
            return True
        if isinstance(source, DatasetSource):
            return any(item.images for item in source.dataset.items)
        source = getattr(source, "inner", None)
    return False
