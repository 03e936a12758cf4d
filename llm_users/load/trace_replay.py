"""Trace replay: ``--llm-trace FILE`` sends the requests of a recorded trace on its own schedule.

The file is one of the formats in :mod:`.trace_formats` (Mooncake JSONL, BurstGPT CSV, Azure
LLM inference CSV, or today's lenient JSONL), read by ``--llm-trace-format`` (``auto``: by
extension and header). Times are rebased to the trace's first request, cut to
``--llm-trace-window START:END`` (seconds of trace time, shifted to start at 0) and divided by
``--llm-trace-speedup``. Workers take every n-th row (worker i: rows i, i+n, ...). Each row is
one open-loop request with ``scheduled_ns``, so the schedule lag is reported as for
``--llm-rate``; its ``max_tokens`` is the row's output length.

Prompts are built to the row's input length: :meth:`TraceSource.prepare` measures the server
the way synthetic prompts do (:class:`~llm_users.workload.synthetic.Fitter`: the server's
``/tokenize`` and chat-template overhead, else a calibrated words-to-tokens line), so on the
tokenizer path a prompt counts exactly ``input_length`` tokens as the server reports them. A
row's ``hash_ids`` are prefix blocks of :data:`BLOCK_TOKENS` tokens: each id's block text is
fixed (seeded by the id, fitted to 512 tokens on its own), so requests sharing ids share that
prefix text and a server's prefix cache sees the trace's sharing; as many whole blocks as fit
lead the prompt, then the next id's block words (a partial block, shared as far as it goes),
then words of the row's own. Without a prepared server (unit use) a word is a token.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llm_users.errors import ConfigError
from llm_users.load.trace_formats import BLOCK_TOKENS, TraceFormatError, TraceRow, parse
from llm_users.workload.source import Probe, WorkItem
from llm_users.workload.synthetic import WORDS, Fitter

__all__ = ["BLOCK_TOKENS", "TraceRow", "TraceSource", "load_trace", "prompt_text", "read_trace"]


def read_trace(path: str, fmt: str = "auto", window: tuple[float, float] | None = None) -> tuple[str, list[TraceRow], int]:
    """(format used, rows, rows skipped) of a trace; a bad line is a one-line ConfigError naming it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--llm-trace: no such file {path}")
    try:
        name, parsed = parse(path, p.read_text(encoding="utf-8", errors="replace"), fmt, window)
    except TraceFormatError as e:
        where = f", line {e.line}" if e.line else ""
        raise ConfigError(f"--llm-trace {path}{where}: {e}") from None
    if not parsed.rows:
        inside = " inside --llm-trace-window" if window else ""
        raise ConfigError(f"--llm-trace {path}: no requests{inside} in the file ({name} format)")
    return name, parsed.rows, parsed.skipped


def load_trace(path: str, fmt: str = "auto", window: tuple[float, float] | None = None) -> list[TraceRow]:
    """The rows of a trace (see :func:`read_trace`)."""
    return read_trace(path, fmt, window)[1]


def _block_words(h: int) -> list[str]:
    rng = random.Random(f"trace-block:{h}")
    return [rng.choice(WORDS) for _ in range(BLOCK_TOKENS)]


def prompt_text(row: TraceRow, index: int) -> str:
    """Unprepared (a word is a token): ``input_tokens`` words, whole blocks per hash id first."""
    return TraceSource([row]).content(row, index)


class TraceSource:
    """The rows a worker sends, as workload items (messages, max output tokens)."""

    def __init__(self, rows: list[TraceRow], speedup: float = 1.0, tokenizer: str | None = None) -> None:
        self._rows = rows
        self.speedup = speedup
        self.tokenizer = tokenizer  # --llm-tokenizer: a local tokenizer.json counts the prompts
        self.fitter = Fitter()
        self._blocks: OrderedDict[int, tuple[str, int]] = OrderedDict()  # id -> (text, words), LRU
        self.prepared = False

    def __len__(self) -> int:
        return len(self._rows)

    def prepare(self, probe: Probe) -> None:
        """Measure the server once (tokenizer and template overhead, or calibration)."""
        if not self.prepared:
            local = None
            if self.tokenizer:
                from llm_users.workload.local_tokenizer import LocalTokenizer

                local = LocalTokenizer(self.tokenizer)
            self.fitter.prepare(probe, random.Random("trace:calibration"), local)
            self.prepared = True

    # prompts ------------------------------------------------------------------------------------
    def _count(self, text: str) -> int:
        f = self.fitter
        if f.method in ("tokenizer", "local_tokenizer") and f.count is not None:
            n = f.count(text)
            f.tokenize_calls += f.method == "tokenizer"
            if n is not None:
                return n
        if f.method == "calibration":
            return round(len(text.split()) * f.tokens_per_word)
        return len(text.split())

    def _block(self, h: int) -> tuple[str, int]:
        """Block ``h``'s text, fitted to BLOCK_TOKENS tokens on its own, and its word count."""
        hit = self._blocks.get(h)
        if hit is not None:
            self._blocks.move_to_end(h)
            return hit
        text = self._fit([], _block_words(h) + _block_words(-1 - h), BLOCK_TOKENS)
        out = (text, len(text.split()))
        self._blocks[h] = out
        if len(self._blocks) > 4096:
            self._blocks.popitem(last=False)
        return out

    def _fit(self, head: list[str], pool: list[str], want: int) -> str:
        """``head`` + the fewest-off prefix of ``pool`` whose text counts ``want`` tokens."""
        tpw = self.fitter.tokens_per_word or 1.0
        head_n = self._count(" ".join(head)) if head else 0
        n = max(1, min(len(pool), round((want - head_n) / tpw)))
        best: tuple[int, int] | None = None
        seen: set[int] = set()
        for _ in range(12):
            got = self._count(" ".join(head + pool[:n]))
            if best is None or abs(got - want) < best[0]:
                best = (abs(got - want), n)
            if got == want or n in seen:
                break
            seen.add(n)
            step = (want - got) if abs(want - got) <= 2 else round((want - got) / tpw)
            n = max(1, min(len(pool), n + (step or (1 if want > got else -1))))
        n = best[1] if best else n
        if best and best[0] and self.fitter.method == "local_tokenizer":  # counting is cheap: land on it
            return self.fitter.finish_local(" ".join(head) + " " if head else "", pool[:n], want, random.Random(want))
        return " ".join(head + pool[:n])

    def content(self, row: TraceRow, index: int) -> str:
        """The prompt's content: the prompt, as sent, counts ``row.input_tokens`` tokens."""
        want = max(1, row.input_tokens - self.fitter.overhead)
        head: list[str] = []
        used = 0
        ids = list(row.hash_ids)
        while ids and used + BLOCK_TOKENS < want:  # whole blocks, leaving room for one more word
            text, _ = self._block(ids.pop(0))
            head += text.split()
            used += BLOCK_TOKENS
        rng = random.Random(f"trace-row:{index}")
        pool = (self._block(ids[0])[0].split() if ids else []) + \
            [rng.choice(WORDS) for _ in range(int((want - used) / (self.fitter.tokens_per_word or 1.0)) + 64)]
        return self._fit(head, pool, want)

    def rows(self, index: int, n: int) -> Iterator[tuple[float, WorkItem]]:
        """(offset s after the speed-up, the request) of worker ``index`` of ``n``."""
        for i in range(index, len(self._rows), max(n, 1)):
            r = self._rows[i]
            item = WorkItem(messages=[{"role": "user", "content": self.content(r, i)}], max_tokens=r.output_tokens,
                            target_input_tokens=r.input_tokens, prefix_id=r.hash_ids[0] if r.hash_ids else None)
            yield r.offset_s / self.speedup, item

    def describe(self) -> dict[str, Any]:
        """How prompts were sized (summary.json's ``arrivals.trace_prompts``; a master: on each worker)."""
        return self.fitter.describe()

    def prepare_for(self, user: Any) -> None:
        """:meth:`prepare` with ``user``'s server (the scheduler's template user); a server that
        cannot be measured leaves prompts sized by words, with one error line."""
        import logging

        from llm_users.errors import LLMRequestError
        from llm_users.workload.tokenizer import ServerProbe

        try:
            self.prepare(ServerProbe(user))
        except (LLMRequestError, ConfigError) as e:
            logging.getLogger(__name__).error(
                "locust-llm: trace replay could not measure the server's prompt tokens (%s); prompts are sized by "
                "word count, their lengths will not be exact", e)
            self.fitter.method = "words"
            self.prepared = True
