"""Synthetic prompts of an exact input length, counted by the server.

The text is common English words (each one token in the usual BPE vocabularies) drawn from a
seeded generator, so every prompt is different (no accidental prefix-cache hits) and a run is
reproducible. Length is made exact in one of two ways, chosen in :meth:`SyntheticSource.prepare`:

- **tokenizer** (vLLM, TGI, llama.cpp expose one): each prompt's content is counted by the
  server's own ``/tokenize`` and adjusted word by word until it hits the target; the chat
  template's overhead (the server's reported prompt tokens for a short probe request minus the
  tokenizer's count of its text) is subtracted from every target first;
- **local_tokenizer** (``--llm-tokenizer PATH``, a Hugging Face ``tokenizer.json``): the same
  fitting, counted on this machine (:mod:`.local_tokenizer`), so the run makes no ``/tokenize``
  call per prompt. The chat template's overhead is measured once per process from one short real
  request (the server's reported prompt tokens minus the local count of its content); one
  ``/tokenize`` call, where the server has the endpoint, checks the local count against the
  server's on that text (``verified`` in the workload summary; a warning if they differ);
- **calibration** (no tokenizer endpoint): two probe requests of different lengths give the
  server's prompt tokens as a line in the number of words, ``tokens = a * words + b``, and each
  prompt gets ``round((target - b) / a)`` words.

Shared prefixes (``--llm-prefix-tokens N --llm-prefix-count K``): K fixed texts of N tokens,
each prompt starting with one of them (round robin), the rest unique.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llm_users.errors import ConfigError, LLMRequestError
from llm_users.workload.lengths import Lengths
from llm_users.workload.source import Lane, Probe, RequestSource, WorkItem

if TYPE_CHECKING:
    from llm_users.workload.local_tokenizer import LocalTokenizer

log = logging.getLogger(__name__)

WORDS = tuple(
    ["time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company", "system", "program", "question", "work", "government", "number", "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "name", "team", "minute", "idea", "body", "information", "back", "parent", "face", "others", "level", "office", "door", "health", "person", "art", "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education", "foot", "boy", "age", "policy", "music", "market", "sense", "nation", "plan", "college", "interest", "death", "experience", "effect", "class", "control", "care", "field", "development", "role", "effort", "rate", "heart", "drug", "show", "leader", "light", "voice", "wife", "police", "mind", "price", "report", "decision", "son", "view", "relationship", "town", "road", "arm", "difference", "value", "building", "action", "model", "season", "society", "tax", "director", "position", "player", "record", "paper", "space", "ground", "form", "event", "official", "matter", "center", "couple", "site", "project", "activity", "star", "table", "need", "court", "oil", "situation", "cost", "industry", "figure", "street", "image", "phone", "data", "picture", "practice", "piece", "land", "product", "doctor", "wall", "patient", "worker", "news", "test", "movie"]
)

SHORT_WORDS = tuple(w for w in WORDS if len(w) <= 4)  # one token in any common tokenizer

CALIBRATION_WORDS = (len(WORDS), 3 * len(WORDS))  # whole passes: their token counts are exact
OVERHEAD_PROBE_WORDS = 16  # the tokenizer method's one probe request: its content, in words
SLOW_PREPARE_S = 2.0  # measuring the server longer than this is said as a warning: it took from the run


def _pass(rng: random.Random) -> list[str]:
    """Every word once, in an order where any stretch mixes short and long words in the list's
    proportions: words sorted by length into 8 strata, each shuffled, then dealt one word per
    stratum per round (in a shuffled stratum order)."""
    words = sorted(WORDS, key=len)
    size = -(-len(words) // 8)
    strata = [words[i:i + size] for i in range(0, len(words), size)]
    for st in strata:
        rng.shuffle(st)
    out: list[str] = []
    for i in range(size):
        order = list(range(len(strata)))
        rng.shuffle(order)
        out.extend(strata[j][i] for j in order if i < len(strata[j]))
    return out


def _template_overhead(probe: Probe, count: Callable[[str], int | None], text: str) -> int | None:
    """The chat template's tokens: the server's reported prompt tokens for one probe request of
    ``text``'s first words, less ``count`` of them; None when either is not known. The overhead
    does not depend on the content's length, and a CPU server prefills a 200-word probe in
    seconds, taken from the run."""
    short = " ".join(text.split()[:OVERHEAD_PROBE_WORDS])
    reported = probe.prompt_tokens([{"role": "user", "content": short}])
    counted = count(short)
    return None if reported is None or counted is None else reported - counted


def words_text(rng: random.Random, n: int) -> str:
    """``n`` words drawn as successive passes over the whole list (without replacement, long and
    short words mixed evenly): every full pass has the same token count whatever the tokenizer,
    and a part of a pass is close to its share, so a calibrated words-to-tokens line holds for
    each prompt, not only on average."""
    out: list[str] = []
    while len(out) < n:
        out.extend(_pass(rng))
    return " ".join(out[:max(0, n)])


class Fitter:
    """Turns a target token count into text, by the server's tokenizer or a calibrated line."""

    def __init__(self) -> None:
        self.method = "none"
        self.overhead = 0  # prompt tokens the request adds around the content (chat template, BOS)
        self.tokens_per_word = 1.0
        self.intercept = 0.0  # calibration: tokens = a * words + b
        self.count: Callable[[str], int | None] | None = None
        self.tokenize_calls = 0  # the server's /tokenize, while fitting prompts
        self.tokenizer: str | None = None  # local_tokenizer: the file's name
        self.verified: bool | None = None  # local_tokenizer: the server's /tokenize agreed on the probe text

    def prepare(self, probe: Probe, rng: random.Random, local: LocalTokenizer | None = None) -> None:
        text = words_text(rng, CALIBRATION_WORDS[0])
        if local is not None:
            self._prepare_local(probe, text, local)
            return
        counted = probe.tokenize(text)
        if counted is not None:
            overhead = _template_overhead(probe, probe.tokenize, text)
            if overhead is None:
                raise ConfigError("synthetic prompts: the server reported no prompt tokens for the probe request")
            self.method = "tokenizer"
            self.count = probe.tokenize
            self.overhead = overhead
            self.tokens_per_word = counted / CALIBRATION_WORDS[0]
            return
        points = []
        for n in CALIBRATION_WORDS:
            reported = probe.prompt_tokens([{"role": "user", "content": words_text(rng, n)}])
            if reported is None:
                raise ConfigError("synthetic prompts: the server has no tokenizer endpoint and reported no prompt "
                                  "tokens, so input lengths cannot be calibrated")
            points.append((n, reported))
        (w1, r1), (w2, r2) = points
        self.method = "calibration"
        self.tokens_per_word = (r2 - r1) / (w2 - w1) if r2 != r1 else 1.0
        self.intercept = r1 - self.tokens_per_word * w1
        self.overhead = round(self.intercept)

    def _prepare_local(self, probe: Probe, text: str, local: LocalTokenizer) -> None:
        counted = local.count(text)
        overhead = _template_overhead(probe, local.count, text)
        if overhead is None:
            raise ConfigError("--llm-tokenizer: the server reported no prompt tokens for the probe request, so the "
                              "chat template's tokens cannot be measured")
        self.method, self.count, self.tokenizer = "local_tokenizer", local.count, local.name
        self.overhead = overhead
        self.tokens_per_word = counted / CALIBRATION_WORDS[0]
        server = probe.tokenize(text)
        self.verified = None if server is None else server == counted
        if server is not None and server != counted:
            log.warning("locust-llm: --llm-tokenizer %s counts %d tokens where the server's /tokenize counts %d on "
                        "the same text: prompt lengths will be off (is it the served model's tokenizer?)",
                        local.name, counted, server)

    def content(self, target: int, rng: random.Random, head: str = "") -> str:
        """Text (``head`` + words) whose prompt, as sent, counts ``target`` tokens."""
        if self.method == "calibration":
            n = round((target - self.intercept) / self.tokens_per_word) - self._words(head)
            return (head + words_text(rng, max(1, n))).strip()
        want = target - self.overhead
        words = [rng.choice(WORDS) for _ in range(max(1, round((want - self._head_tokens(head)) / self.tokens_per_word)))]
        if self.count is None:  # not prepared: word count only
            return (head + " ".join(words)).strip()
        best: tuple[int, str] | None = None
        for _ in range(8):
            text = (head + " ".join(words)).strip()
            n = self.count(text)
            self.tokenize_calls += self.method == "tokenizer"
            if n is None:
                break
            if best is None or abs(n - want) < best[0]:
                best = (abs(n - want), text)
            if n == want:
                break
            near = abs(want - n) <= 2  # near: one short word at a time (a long one may be two tokens)
            if near and self.method == "local_tokenizer":
                return self.finish_local(head, words, want, rng)
            step = 1 if near else max(1, round(abs(want - n) / self.tokens_per_word))
            if n < want:
                pool = SHORT_WORDS if near else WORDS
                words += [rng.choice(pool) for _ in range(step)]
            elif len(words) > 1:
                del words[max(1, len(words) - step):]
            else:
                break
        if best and best[0] and self.method == "local_tokenizer":  # the steps swung over and under it
            return self.finish_local(head, words, want, rng)
        return best[1] if best else (head + " ".join(words)).strip()

    def finish_local(self, head: str, words: list[str], want: int, rng: random.Random) -> str:
        """The last tokens, where counting is local and cheap: drop words while over, then add
        words that add exactly one token in place (a tokenizer splits rarer words, and a word can
        merge with its neighbour), so the count lands on ``want`` rather than near it."""
        assert self.count is not None
        text = (head + " ".join(words)).strip()
        for _ in range(64):
            n = self.count(text) or 0
            if n == want:
                break
            if n > want and len(words) > 1:
                words = words[:-1]
            elif n < want:
                words = words + [next((w for w in rng.sample(SHORT_WORDS, 16) if self.count(f"{text} {w}") == n + 1),
                                      rng.choice(SHORT_WORDS))]
            else:
                break
            text = (head + " ".join(words)).strip()
        return text

    def _words(self, head: str) -> int:
        return len(head.split())

    def _head_tokens(self, head: str) -> int:
        return round(self._words(head) * self.tokens_per_word)

    def describe(self) -> dict[str, Any]:
        if self.method == "none":  # a master: each load-generating process measured its own
            return {"method": "measured on each worker"}
        d: dict[str, Any] = {"method": self.method, "overhead_tokens": self.overhead,
                             "tokens_per_word": round(self.tokens_per_word, 4)}
        if self.method == "calibration":
            d["intercept"] = round(self.intercept, 3)
        else:
            d["tokenize_calls"] = self.tokenize_calls
        if self.method == "local_tokenizer":
            d["tokenizer"] = self.tokenizer
            d["verified"] = self.verified
        return d


class SyntheticSource(RequestSource):
    kind = "synthetic"

    def __init__(self, inputs: Lengths, seed: int = 0, prefix_tokens: int = 0, prefix_count: int = 0,
                 tokenizer: str | None = None) -> None:
        if prefix_tokens and inputs.kind == "fixed" and inputs.a <= prefix_tokens:
            raise ConfigError(f"--llm-prefix-tokens {prefix_tokens} must be less than --llm-input-tokens {inputs.text}")
        self.inputs = inputs
        self.seed = seed
        self.fitter = Fitter()
        self.tokenizer = tokenizer  # --llm-tokenizer PATH
        self.prefix_tokens = prefix_tokens
        self.prefix_count = prefix_count if prefix_tokens else 0
        self.prefixes: list[str] = []
        self._prepared = False
        self._run = uuid.uuid4().hex[:6]  # so two processes never send the same "unique" text

    def needs_prepare(self) -> bool:
        return not self._prepared

    def prepare(self, probe: Probe) -> None:
        rng = random.Random(f"{self.seed}:calibration")
        t0 = time.perf_counter_ns()
        try:
            local = None
            if self.tokenizer:
                from llm_users.workload.local_tokenizer import LocalTokenizer

                local = LocalTokenizer(self.tokenizer)
            self.fitter.prepare(probe, rng, local)
        except (LLMRequestError, ConfigError) as e:
            log.error("locust-llm: could not measure the server's prompt tokens (%s); prompts are sized by word "
                      "count, their lengths will not be exact", e)
            self.fitter.method = "words"
        prefix_rng = random.Random(f"{self.seed}:prefixes")
        # a prefix is N tokens of content on its own: fitted without the template's overhead
        self.prefixes = [self._prefix(prefix_rng) for _ in range(self.prefix_count)]
        self._prepared = True
        took_s = (time.perf_counter_ns() - t0) / 1e9
        log.log(logging.WARNING if took_s >= SLOW_PREPARE_S else logging.INFO,
                "locust-llm: synthetic prompts by %s (overhead %d tokens), measured in %.1f s before this process's "
                "first request", self.fitter.method, self.fitter.overhead, took_s)

    def _prefix(self, rng: random.Random) -> str:
        return self.fitter.content(self.prefix_tokens + self.fitter.overhead, rng) + " "

    def lane(self, index: int) -> Lane:
        return SyntheticLane(self, index)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "input_tokens": self.inputs.describe(), "seed": self.seed}
        d.update(self.fitter.describe())
        if self.prefix_count:
            d["prefix_tokens"] = self.prefix_tokens
            d["prefix_count"] = self.prefix_count
        return d


class SyntheticLane(Lane):
    def __init__(self, source: SyntheticSource, index: int) -> None:
        self.source = source
        self.index = index
        self.rng = random.Random(f"{source.seed}:{source._run}:{index}")
        self.n = 0

    def next(self) -> WorkItem:
        s = self.source
        target = s.inputs.sample(self.rng)
        prefix_id = None
        head = ""
        if s.prefixes:
            prefix_id = (self.index + self.n) % len(s.prefixes)
            head = s.prefixes[prefix_id]
            target = max(target, s.prefix_tokens + 1)
        self.n += 1
        text = s.fitter.content(target, self.rng, head)
        return WorkItem([{"role": "user", "content": text}], target_input_tokens=target, prefix_id=prefix_id)

    def user_turn(self, target: int | None = None) -> tuple[str, int]:
        """Content for a later session turn (no template overhead: the history carries it)."""
        t = target or self.source.inputs.sample(self.rng)
        return words_text(self.rng, max(1, round(t / self.source.fitter.tokens_per_word))), t
