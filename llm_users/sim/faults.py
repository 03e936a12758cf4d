"""Fault injection: which fault (if any) a request gets, and when in its stream.

Two sources, the header winning over the dice:

- ``X-Sim-Fault: KIND`` or ``KIND;after=N`` forces one fault on that request. ``after`` counts
  the token-bearing chunks written before the fault strikes (default: half the answer's
  chunks). For HTTP faults it is ignored: the error is the whole answer.
- ``--fault-rate P`` with ``--fault-kinds``: each request draws from its own seeded RNG, so a
  run with the same seed and arrival order hits the same requests at the same points;
  ``--fault-after N`` puts every drawn fault after chunk N (a server that fails the same way).

Kinds: ``http_429``, ``http_500``, ``http_503`` (an error answer in the protocol's shape, with
Retry-After on 429), ``reset`` (TCP RST mid-stream), ``malformed`` (one non-JSON data line,
then the stream goes on), ``stall`` (no bytes for ``--stall-ms``, then the stream goes on),
``truncate`` (the HTTP body ends cleanly but without the protocol's final frames and
terminator), ``midstream_error`` (the protocol's own in-stream error payload on HTTP 200, then
the body ends), ``empty_200`` (status 200 and the stream's headers, then the body ends without a
single event), ``reset_after_read`` (the request is read, then the connection is reset before
any response byte: on a reused keep-alive connection a client must not resend it), ``big_frame``
(the token at the fault's chunk is 4 MiB of text: one 4 MiB frame, then the stream goes on),
``hang`` (the request is read and never answered, not one byte, until the client leaves: a
server that accepts work it will never do).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llm_users.sim.config import FAULT_KINDS

HTTP_FAULTS = {"http_429": 429, "http_500": 500, "http_503": 503}


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    after: int | None = None  # token-bearing chunks written before it strikes; None: midpoint

    @property
    def http_status(self) -> int | None:
        return HTTP_FAULTS.get(self.kind)

    def chunk_index(self, n_chunks: int) -> int:
        """Index of the chunk at whose time the fault strikes (0 = before the first chunk).
        Capped at the last chunk, which carries the closing frames."""
        last = max(0, n_chunks - 1)
        if self.after is None:
            return min(n_chunks // 2, last)
        return min(self.after, last)


class FaultHeaderError(ValueError):
    pass


def parse_fault_header(value: str) -> Fault:
    """``KIND`` or ``KIND;after=N`` (spaces allowed)."""
    kind, _, rest = value.partition(";")
    kind = kind.strip().lower()
    if kind not in FAULT_KINDS:
        raise FaultHeaderError(f"X-Sim-Fault: unknown kind {kind!r}; choose from {', '.join(FAULT_KINDS)}")
    after = None
    for param in rest.split(";"):
        name, _, val = param.partition("=")
        name = name.strip().lower()
        if not name:
            continue
        if name != "after":
            raise FaultHeaderError(f"X-Sim-Fault: unknown parameter {name!r} (only after=N)")
        try:
            after = int(val)
        except ValueError:
            raise FaultHeaderError(f"X-Sim-Fault: after must be an integer, got {val!r}") from None
        if after < 0:
            raise FaultHeaderError("X-Sim-Fault: after must be >= 0")
    return Fault(kind, after)


def draw_fault(rng: random.Random, rate: float, kinds: tuple[str, ...], n_chunks: int,
               after: int | None = None) -> Fault | None:
    """The dice: a fault with probability ``rate``, its kind and chunk drawn uniformly
    (``after`` given, ``--fault-after``: the chunk is that one, the same point every time)."""
    if rate <= 0 or not kinds or rng.random() >= rate:
        return None
    kind = kinds[int(rng.random() * len(kinds))]
    point = int(rng.random() * max(1, n_chunks))  # drawn always, so a seed hits the same requests
    return Fault(kind, point if after is None else after)
