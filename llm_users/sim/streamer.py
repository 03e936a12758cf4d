"""One stream's chunk state machine: writes its chunks at their target times.

No task per stream and no sleep per chunk: a :class:`Streamer` is a small state machine whose
``_tick`` the shared :class:`~.clock.Clock` calls when a chunk is due. It renders the chunk
from the renderer's prebuilt templates, stamps it and hands it straight to the socket
(HTTP/1.1 chunked framing written by hand; aiohttp already sent the response head). Targets
are absolute: the first chunk is due at ``arrival + queue wait + ttft (+ cold start)`` and each
next one at the previous *target* plus the gap, so timer lateness never accumulates into drift.

A non-streaming request runs the same clock "silently" (nothing written per chunk), so its
latency and its share of the batch are exactly those of the stream it would have been.

When the stream ends the streamer frees its batch slot and resolves ``done`` with the outcome:
``ok``, ``aborted`` (the client went away), ``reset``, ``truncated`` or ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING

from llm_users.sim.base import Job, Renderer
from llm_users.sim.faults import Fault
from llm_users.sim.trace import Record

if TYPE_CHECKING:
    from llm_users.sim.state import SimState

log = logging.getLogger(__name__)


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


BIG_WORD = b"x" * (4 << 20)


def _ended() -> None:
    """What a finished streamer's ``_cb`` becomes: nothing left to write."""


def reset_connection(transport: asyncio.BaseTransport | None) -> None:
    """Close with a TCP RST (SO_LINGER 0), the way a crashed server or a proxy drops a stream."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()  # type: ignore[attr-defined]


class Streamer:
    __slots__ = (
        "sim", "job", "render", "transport", "rec", "done", "silent", "target", "i", "c", "n", "k", "think", "hide",
        "fault", "fault_at", "rng", "itl_ns", "last_t", "released", "late_fault", "stats", "clock", "cancelled",
        "_cb",
    )

    def __init__(
        self,
        sim: SimState,
        job: Job,
        render: Renderer,
        transport: asyncio.Transport | None,
        rec: Record | None,
        fault: Fault | None,
        rng: random.Random | None,
        done: asyncio.Future[str],
    ) -> None:
        self.sim = sim
        self.stats = sim.stats
        self.job = job
        self.render = render
        self.transport = transport
        self.rec = rec
        self.clock = sim.clock
        self.done = done
        self.silent = not job.stream
        self.target = 0
        self.i = 0  # tokens written
        self.c = 0  # chunks written
        self.n = job.n
        self.k = job.k
        self.think = job.thinking  # the first tokens, streamed as reasoning: no chunk crosses this boundary
        self.hide = job.hidden  # the first tokens, decoded on the clock but never written (hidden reasoning)
        self.fault = fault
        self.fault_at = -1 if fault is None else fault.chunk_index(job.n_chunks)
        self.rng = rng
        self.itl_ns = sim.itl.mean_ns
        self.last_t = 0
        self.cancelled = False
        self._cb: Callable[[], None] = self._tick
        self.released = False
        self.late_fault: str | None = None  # a fault a non-streaming answer shows in its body

    def start(self, first_target_ns: int) -> None:
        self.target = first_target_ns
        self.clock.schedule(first_target_ns, self._cb)

    def cancel(self) -> None:
        self.cancelled = True
        self._release()

    def client_gone(self) -> None:
        """The client's connection closed (:mod:`.disconnect`): end now, ``aborted``, the slot
        freed, whether the first token is still to come (prefill) or the stream is midway."""
        if self.released:
            return
        self.cancelled = True
        self._end("aborted")

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self.sim.engine.release()
        # ``_cb`` (the bound ``_tick``, kept to schedule without a new method object per chunk)
        # refers back to the streamer: dropped here, so a finished request's streamer, job,
        # renderer and future go by reference counting instead of piling up as cyclic garbage
        # until a full gc pass (issue 10: the simulator's RSS grew ~7 MB a minute in a soak).
        self._cb = _ended

    def _end(self, outcome: str) -> None:
        self._release()
        if not self.done.done():
            self.done.set_result(outcome)

    def _tick(self) -> None:
        if self.cancelled:
            return
        try:
            if self.c == self.fault_at and self._strike():
                return
            transport = self.transport
            silent = self.silent
            if not silent and (transport is None or transport.is_closing()):
                self._end("aborted")
                return
            i = self.i
            j = i + self.k
            n = self.n
            if j > n:
                j = n
            if i < self.hide < j:
                j = self.hide
            elif i < self.think < j:
                j = self.think
            last = j == n
            data = None if silent or i < self.hide else self.render.chunk(i, j, last)
            t = perf_counter_ns()
            if data is not None:
                transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # type: ignore[union-attr]
                rec = self.rec
                if rec is not None:
                    rec.times.append(t)
                    rec.tokens.append(j - i)
            stats = self.stats
            stats.chunks += 1
            stats.generation_tokens += j - i
            if self.c:
                stats.itl.observe((t - self.last_t) * 1e-9)
            else:
                self.job.first_ns = t
            self.last_t = t
            self.i = j
            self.c += 1
            if last:
                self._end("ok")
                return
            sim = self.sim
            gap = self.itl_ns if self.rng is None else sim.itl.sample_ns(self.rng)
            if sim.slope_ns:
                gap += sim.slope_ns * (sim.engine.running - 1)
            self.target += gap
            self.clock.schedule(self.target, self._cb)
        except Exception:
            log.exception("llm-sim: a %s stream failed; resetting its connection", self.job.route)
            reset_connection(self.transport)
            self._end("reset")

    def _strike(self) -> bool:
        """Apply the fault due at this chunk. True when this tick is over (stream ended or
        re-armed), False to go on writing the chunk."""
        kind = self.fault.kind  # type: ignore[union-attr]
        self.fault_at = -1
        if kind == "stall":
            self.target += self.sim.stall_ns
            self.clock.schedule(self.target, self._cb)
            return True
        if kind == "reset":
            reset_connection(self.transport)
            self._end("reset")
            return True
        if kind == "big_frame":  # this chunk's first token becomes 4 MiB of text; still one token
            self.job.words[self.i] = BIG_WORD
            return False
        if self.silent:
            self.late_fault = kind  # shown in the body at the end
            return False
        transport = self.transport
        if transport is None or transport.is_closing():
            self._end("aborted")
            return True
        if kind == "malformed":
            transport.write(chunked(self.render.malformed()))
            return False
        if kind == "truncate":
            self._end("truncated")
            return True
        if kind == "midstream_error":
            transport.write(chunked(self.render.error_frame()))
            self._end("error")
            return True
        return False
