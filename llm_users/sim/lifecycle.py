"""One request's life, the same for every protocol: fault draw, admission, queue, TTFT, the
chunk clock, the end, the statistics and the ground-truth record.

A route parses its protocol's request into a :class:`~.base.Job`, builds its renderer and
calls :func:`serve`. For a stream the response head goes out at once (like vLLM and TGI, before
any token); queue wait and TTFT follow; then the :class:`~.streamer.Streamer` writes the chunks.
A non-streaming request waits the same way and gets its whole body at the end.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

from aiohttp import web

from llm_users.sim import disconnect
from llm_users.sim.base import Dialect, Job, Renderer
from llm_users.sim.engine import QueueFull
from llm_users.sim.faults import Fault, FaultHeaderError, draw_fault, parse_fault_header
from llm_users.sim.images import Images
from llm_users.sim.state import SimState
from llm_users.sim.stats import RouteStats
from llm_users.sim.streamer import Streamer, chunked, reset_connection
from llm_users.sim.timing import request_rng
from llm_users.sim.trace import Record


def new_job(
    sim: SimState, *, protocol: str, route: str, model: str, prompt: str, max_tokens: int, stream: bool,
    arrival_ns: int, k: int | None = None, input_tokens: int | None = None, messages: int = 0,
    images: Images | None = None,
) -> Job:
    """A planned job: the answer's length, how it ends and its tokens are fixed here. ``messages``:
    how many chat messages the prompt came from (each adds ``--template-tokens`` to the count);
    ``images``: the request's images, whose tokens add to it (sim/images.py)."""
    if input_tokens is None:
        input_tokens = sim.count_prompt(prompt) + sim.cfg.template_tokens * messages
    if images is not None:
        input_tokens += images.tokens
    cfg = sim.cfg
    if cfg.ignore_max_tokens is not None:  # a server that does not know the request's field
        max_tokens = cfg.ignore_max_tokens
    model = cfg.answer_model or model
    job = Job(
        protocol=protocol, route=route, model=model, prompt=prompt,
        input_tokens=input_tokens, messages=messages,
        max_tokens=max_tokens, stream=stream, k=k or sim.cfg.tokens_per_chunk, arrival_ns=arrival_ns,
        seq=sim.next_seq(),
    )
    if images is not None and images.count:
        job.images, job.image_tokens = images.count, images.tokens
        sim.stats.images += images.count
        sim.stats.image_tokens += images.tokens
    if sim.prefix_cache is not None:
        job.cached_tokens = sim.prefix_cache.lookup_and_add(prompt)
    n = max_tokens if sim.cfg.output_tokens is None else min(sim.cfg.output_tokens, max_tokens)
    job.plan(sim.cfg.output_tokens, sim.tokens.indices(prompt, n))
    job.reasoning = min(cfg.reasoning_tokens, job.n)
    job.shown = cfg.reasoning_stream
    if cfg.usage_zero is not None:  # a gateway that reports 0 counts (usage only; the trace keeps the truth)
        job.zero_input = cfg.usage_zero in ("input", "both")
        job.zero_output = cfg.usage_zero in ("output", "both")
    return job


async def serve(sim: SimState, request: web.Request, job: Job, render: Renderer, dialect: Dialect) -> web.StreamResponse:
    stats = sim.stats
    rs = stats.route(job.route)
    rid = request.headers.get("X-Request-Id")
    rec = None
    if rid is not None:
        job.request_id = rid
        rec = Record(rid, job.route, job.protocol, job.arrival_ns, job.seq)
        rec.model = job.model
        rec.stream = job.stream
        rec.input_tokens = job.input_tokens
        rec.images, rec.image_tokens = job.images, job.image_tokens
        if sim.cfg.trace_prompts:
            rec.prompt = job.prompt
            rec.messages = job.messages
        rec.planned_tokens = job.n
        rec.finish_reason = job.finish
        sim.trace.start(rec)
    stats.started += 1
    rs.started += 1
    stats.active += 1
    try:
        return await _serve(sim, request, job, render, dialect, rs, rec)
    finally:
        stats.active -= 1
        disconnect.unwatch(request.transport)


def _refuse(sim: SimState, rs: RouteStats, rec: Record | None, resp: web.Response) -> web.Response:
    sim.stats.errors += 1
    rs.errors += 1
    if rec is not None:
        rec.status = resp.status
        rec.outcome = "refused"
        rec.end_ns = perf_counter_ns()
        sim.trace.finish(rec)
    return resp


def _abandon(sim: SimState, waiter: asyncio.Future[None] | None) -> None:
    """Give back a slot (or a queue place) that a request will not use."""
    if waiter is None or (waiter.done() and not waiter.cancelled()):
        sim.engine.release()
    else:
        waiter.cancel()
        sim.engine.leave(waiter)


async def _serve(
    sim: SimState, request: web.Request, job: Job, render: Renderer, dialect: Dialect, rs: RouteStats,
    rec: Record | None,
) -> web.StreamResponse:
    cfg = sim.cfg
    stats = sim.stats
    fault: Fault | None = None
    header = request.headers.get("X-Sim-Fault")
    if header:
        try:
            fault = parse_fault_header(header)
        except FaultHeaderError as e:
            return _refuse(sim, rs, rec, dialect.error(400, str(e)))
    elif cfg.fault_rate > 0:
        fault = draw_fault(request_rng(cfg.seed, job.seq, "fault"), cfg.fault_rate, cfg.fault_kinds, job.n_chunks,
                           cfg.fault_after)
    if fault is not None:
        stats.faults[fault.kind] = stats.faults.get(fault.kind, 0) + 1
        if rec is not None:
            rec.fault = fault.kind
        status = fault.http_status
        if status is not None:
            return _refuse(sim, rs, rec, dialect.fault(status, stream=job.stream, retry_after=cfg.retry_after_s))
        if fault.kind == "hang":
            return await _hang(sim, request, rs, rec, job, fault)
        if fault.kind == "reset_after_read":
            reset_connection(request.transport)
            return _finish(sim, rs, rec, job, "reset", 0, web.Response(), fault)
        if fault.kind == "empty_200":
            resp = web.StreamResponse(status=200, headers={"Content-Type": render.content_type, **render.headers()})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await resp.write_eof()
            return _finish(sim, rs, rec, job, "empty", 0, resp, fault)
    try:
        waiter = sim.engine.try_acquire()
    except QueueFull:
        stats.rejected += 1
        return _refuse(sim, rs, rec, dialect.overloaded(stream=job.stream))

    resp: web.StreamResponse | None = None
    transport = request.transport
    gone = disconnect.ClientGone(waiter)  # the client leaving frees the slot or queue place at once
    disconnect.watch(transport, gone)
    try:
        if job.stream:
            resp = web.StreamResponse(status=200, headers={"Content-Type": render.content_type, **render.headers()})
            resp.enable_chunked_encoding()
            if rec is not None:
                rec.headers_ns = perf_counter_ns()
            await resp.prepare(request)
            transport = request.transport
            head = render.head()
            if head and transport is not None and not transport.is_closing():
                transport.write(chunked(head))
        if waiter is not None:
            await waiter
    except BaseException:
        _abandon(sim, waiter)
        if gone.fired and waiter is not None and waiter.cancelled():  # left while queued
            return _finish(sim, rs, rec, job, "aborted", 0, resp or web.Response(), fault)
        raise

    now = perf_counter_ns()
    job.admitted_ns = now
    # Not queued: the clock starts at arrival (our own parsing is not the model's prefill).
    start = now if waiter is not None else job.arrival_ns
    stats.prompt_tokens += job.input_tokens
    stats.queue.observe((start - job.arrival_ns) * 1e-9)
    if rec is not None:
        rec.admitted_ns = now
    if gone.fired or (job.stream and (transport is None or transport.is_closing())):
        sim.engine.release()
        return _finish(sim, rs, rec, job, "aborted", 0, resp or web.Response(), fault)

    timing_fixed = sim.ttft.fixed and sim.itl.fixed
    rng = None if timing_fixed else request_rng(cfg.seed, job.seq, "timing")
    ttft = sim.ttft.mean_ns if rng is None else sim.ttft.sample_ns(rng)
    if sim.prefill_ns_per_token:  # --prefill-us-per-token: the prompt's uncached tokens, images included
        ttft += round(sim.prefill_ns_per_token * (job.input_tokens - (job.cached_tokens or 0)))
    cold = sim.cold_ns if sim.cold_start(request) else 0
    target = start + ttft + cold
    job.cold_ms = cold * 1e-6
    if rec is not None:
        rec.ttft_target_ns = target
        rec.cold_start = bool(cold)
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    st = Streamer(sim, job, render, transport, rec, fault, None if sim.itl.fixed else rng, done)
    st.start(target)
    gone.streamer = st
    try:
        outcome = await done
    except BaseException:
        st.cancel()
        raise

    if job.stream:
        assert resp is not None
        if outcome in ("ok", "truncated", "error"):
            try:
                await resp.write_eof()
            except ConnectionError:
                # The body's terminating chunk could not go out. After a whole answer that is
                # the client hanging up once it had everything (the openai SDK closes the
                # response on [DONE], before the terminator): served, as a real server counts it.
                if outcome != "ok":
                    outcome = "aborted"
        return _finish(sim, rs, rec, job, outcome, st.i, resp, fault)

    if outcome != "ok":
        return _finish(sim, rs, rec, job, outcome, st.i, web.Response(), fault)
    late = st.late_fault
    if late == "midstream_error":
        body_resp = dialect.error(500, "The simulator failed this request (midstream_error fault)")
    else:
        body = render.body()
        if late == "malformed":
            body = body[: max(1, len(body) // 3)] + b"\x00 not json"
        elif late == "truncate":
            body = body[: len(body) // 2]
        body_resp = web.Response(status=200, body=body, content_type="application/json", headers=render.headers())
    t = perf_counter_ns()
    if rec is not None:
        rec.times.append(t)
        rec.tokens.append(job.n)
        rec.status = body_resp.status
    try:
        await body_resp.prepare(request)
        await body_resp.write_eof()
    except ConnectionError:
        outcome = "aborted"
    if late == "midstream_error":
        outcome = "error"
    return _finish(sim, rs, rec, job, outcome, st.i, body_resp, fault)


async def _hang(sim: SimState, request: web.Request, rs: RouteStats, rec: Record | None, job: Job,
                fault: Fault) -> web.StreamResponse:
    """The ``hang`` fault: no answer at all until the client leaves (then ``aborted``)."""
    left: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if disconnect.watch(request.transport, lambda: left.done() or left.set_result(None)):
        try:
            await left
        finally:
            disconnect.unwatch(request.transport)
    return _finish(sim, rs, rec, job, "aborted", 0, web.Response(), fault)


def _finish(
    sim: SimState, rs: RouteStats, rec: Record | None, job: Job, outcome: str, tokens: int, resp: web.StreamResponse,
    fault: Fault | None,
) -> web.StreamResponse:
    """Count the outcome and close the record. ``completed``: the client got a whole, valid
    answer (a malformed line or a truncated body spoil it even when the bytes all arrived)."""
    end = perf_counter_ns()
    stats = sim.stats
    completed = outcome == "ok" and (fault is None or fault.kind not in ("malformed", "truncate"))
    if outcome == "aborted":
        stats.aborted += 1
        rs.aborted += 1
    elif outcome == "error":
        stats.errors += 1
        rs.errors += 1
    if completed:
        stats.served += 1
        rs.served += 1
        stats.finished[job.finish] = stats.finished.get(job.finish, 0) + 1
        if job.first_ns:
            stats.ttft.observe((job.first_ns - job.arrival_ns) * 1e-9)
            if job.n > 1:
                stats.tpot.observe((end - job.first_ns) * 1e-9 / (job.n - 1))
        stats.e2e.observe((end - job.arrival_ns) * 1e-9)
        stats.gen_tokens.observe(job.n)
        stats.prompt_hist.observe(job.input_tokens)
    if rec is not None:
        rec.end_ns = end
        rec.outcome = outcome
        rec.completed = completed
        rec.output_tokens = tokens
        sim.trace.finish(rec)
    return resp
