"""Client-side cancellation (``--llm-cancel-after``, ``--llm-cancel-rate``): which requests the
client abandons, and when.

``--llm-cancel-after`` takes a number of tokens or a duration:

- ``N tokens`` (``20tokens``, ``20 tokens``, ``1token``; ``tok`` also reads): the client
  abandons the stream once ``N`` token-bearing chunks have arrived (reasoning chunks count: they
  are chunks the server spent a decode step on). A chunk is what raw and SDK mode both count as
  ``chunks`` in the record, so the rule is the same in both modes.
- a duration (``1.5s``, ``800ms``: :mod:`llm_users.durations`' rule, the unit never guessed):
  the client abandons the request that long after its t0, wherever it is (waiting for the
  first byte, in the middle of the stream).

``--llm-cancel-rate P`` (0..1) is the share of requests the plan applies to; given alone,
``--llm-cancel-after`` cancels every request (rate 1). A rate without ``--llm-cancel-after``
is refused. Which requests are chosen is a pure function of the run's ``--llm-seed``, the
worker's index, the user's number and the request's index within that user (a hash, not the
user's random generator, so turning cancellation on does not move the spawn offsets): the same
seed cancels the same requests. Without ``--llm-seed`` the choice is drawn from a seed made
once per process (random from run to run).

A request that finishes before its cancel point is an ordinary request. A cancelled one is
recorded with status ``cancelled`` (:func:`~llm_users.client.request_state.mark_cancelled`).

Pure: no gevent, no sockets. The client arms the timer (:mod:`.stream`, :mod:`.sdk`).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass
from typing import Any

from llm_users.durations import parse_duration_ns
from llm_users.errors import ConfigError

_TOKENS = re.compile(r"^\s*([0-9]+)\s*(tokens?|toks?)\s*$", re.IGNORECASE)
_PROCESS_SEED = os.urandom(8).hex()  # without --llm-seed: random per process


@dataclass(slots=True, frozen=True)
class CancelPlan:
    """Abandon a chosen request after ``after_tokens`` token-bearing chunks or ``after_ns`` from
    t0 (exactly one is set); ``rate`` is the share of requests chosen."""

    after_tokens: int | None = None
    after_ns: int | None = None
    rate: float = 1.0

    def describe(self) -> str:
        point = f"{self.after_tokens} tokens" if self.after_tokens is not None else f"{self.after_ns / 1e9:g}s"
        return f"after {point}, {self.rate:.0%} of requests"


def parse_cancel(after: Any, rate: Any) -> CancelPlan | None:
    """The plan from the two options' text (None when cancellation is off). Raises
    :class:`ConfigError` with a clear sentence for anything it cannot read."""
    after_text = "" if after is None else str(after).strip()
    rate_text = "" if rate is None else str(rate).strip()
    if after_text in ("", "off", "0"):
        if rate_text not in ("", "0"):
            raise ConfigError("--llm-cancel-rate needs --llm-cancel-after (when to cancel: e.g. 20tokens or 1.5s)")
        return None
    share = 1.0
    if rate_text:
        try:
            share = float(rate_text)
        except ValueError:
            raise ConfigError(f"--llm-cancel-rate must be a share between 0 and 1, got {rate_text!r}") from None
        if not (0.0 <= share <= 1.0) or math.isnan(share):
            raise ConfigError(f"--llm-cancel-rate must be a share between 0 and 1, got {rate_text!r}")
    m = _TOKENS.match(after_text)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise ConfigError(f"--llm-cancel-after: at least 1 token, got {after_text!r}")
        return CancelPlan(after_tokens=n, rate=share)
    try:
        ns = parse_duration_ns(after_text, "--llm-cancel-after")
    except ConfigError:
        raise ConfigError(f"--llm-cancel-after: cannot read {after_text!r}; give a number of tokens (20tokens, "
                          "20 tokens) or a duration (1.5s, 800ms)") from None
    if not (ns > 0 and math.isfinite(ns)):
        raise ConfigError(f"--llm-cancel-after: the duration must be above 0, got {after_text!r}")
    return CancelPlan(after_ns=int(ns), rate=share)


def draw(seed: str | None, worker: int, user: int, index: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, worker, user, request index)."""
    key = f"cancel/{_PROCESS_SEED if seed is None else seed}/{worker}/{user}/{index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64


def chosen(plan: CancelPlan | None, seed: str | None, worker: int, user: int, index: int) -> CancelPlan | None:
    """The plan when this request is one the client cancels, else None."""
    if plan is None or plan.rate <= 0.0:
        return None
    if plan.rate >= 1.0 or draw(seed, worker, user, index) < plan.rate:
        return plan
    return None
