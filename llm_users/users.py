"""Locust User classes, one per backend. Thin: each class names its backend's descriptor
(:mod:`llm_users.protocols.backend`), whose routes build and parse; the stream client moves
bytes and stamps time; a user picks a prompt, sends it, fires the events.

Class attributes are the defaults (model, endpoint, sampling, prompts, API-key variable) and
the ``--llm-*`` options override them; a class that sets ``descriptor`` takes the per-backend
ones from it (model, endpoint, ignore_eos, key variable and requirement, the builder's own
attributes such as Claude's ``auth``). Subclass to change them in a locustfile::

    class MyVLLM(VLLMUser):
        model = "meta-llama/Llama-3.1-8B-Instruct"
        max_tokens = 256
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import replace
from typing import Any, ClassVar

import gevent
from gevent import GreenletExit
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from locust import User, constant, task
from locust.exception import StopUser

from llm_users import protocols
from llm_users.client.backoff import Backoff, retry_after_seconds
from llm_users.client.cancel import chosen
from llm_users.client.failure_table import for_locust
from llm_users.client.model_probe import discover_model
from llm_users.client.request_state import mark_cancelled, mark_failed, mark_interrupted
from llm_users.client.stream import StreamClient, new_request_id
from llm_users.errors import Cancelled, LLMRequestError
from llm_users.health.idle import serve_ready_io
from llm_users.load.spawn import first_request_delay, think_jitter, user_rng
from llm_users.metrics import RequestRecord, check_usage, prompt_tokens_guess, sampling_issues
from llm_users.options import Settings, run_config
from llm_users.protocols.anthropic import CLAUDE
from llm_users.protocols.backend import Backend, RequestSpec, Route
from llm_users.protocols.base import HTTPRequest, StreamParser
from llm_users.protocols.gemini import GEMINI
from llm_users.protocols.images import Image
from llm_users.protocols.ollama import OLLAMA
from llm_users.protocols.openai import OPENAI, VLLM
from llm_users.protocols.tei import TEI
from llm_users.protocols.tgi import TGI
from llm_users.protocols.tools import structured_valid
from llm_users.workload.batch import BatchLane, batch_inputs
from llm_users.workload.build import source_for
from llm_users.workload.source import Messages, WorkItem
from llm_users.workload.tokenizer import ServerProbe

log = logging.getLogger(__name__)
#: Locust's table shows cancelled requests (--llm-cancel-after) in a row of their own, the request's
#: name with this suffix, never as failures: their times (to the cancel) stay out of the request's row
CANCELLED_SUFFIX = " (cancelled)"
_user_numbers = itertools.count()
_prepare_lock = BoundedSemaphore()


class LLMUser(User):
    """Abstract base: sends one streaming request per task iteration, back to back.

    A subclass for a backend sets ``descriptor``; everything per-backend comes from it."""

    abstract = True
    wait_time = constant(0)

    descriptor: ClassVar[Backend]
    backend: ClassVar[str] = "llm"
    model: str | None = None
    endpoint: str = "chat"
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = True
    seed: int | None = None
    prompts: str | None = None  # a dataset file or shipped name; None = the shipped "short"
    api_key_env: str | None = None
    requires_api_key: ClassVar[bool] = False
    client: str = "raw"  # "raw" (our stream client) or "sdk" (the backend's official SDK)
    warmup_requests: int = 1  # each user's first N requests are flagged warm-up
    #: headers added to every request, in raw and SDK mode (routing headers, test faults...)
    extra_headers: dict[str, str] = {}  # noqa: RUF012 - replaced, never mutated
    #: class attributes handed to the backend's request builder (RequestSpec.options)
    request_options: ClassVar[tuple[str, ...]] = ()
    batch_size: int = 1  # embeddings/rerank routes: inputs per request (--llm-batch-size)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        d = cls.__dict__.get("descriptor")
        if d is None:
            return
        # a backend's class: its defaults come from the descriptor, unless the class sets them
        cls.backend = d.name
        defaults: dict[str, Any] = {
            "endpoint": d.default_endpoint, "api_key_env": d.api_key_env, "model": d.default_model,
            "ignore_eos": d.sends_ignore_eos, "requires_api_key": d.requires_api_key,
            "request_options": tuple(name for name, _ in d.request_options), **dict(d.request_options),
        }
        for name, value in defaults.items():
            if name not in cls.__dict__:
                setattr(cls, name, value)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        config = run_config(environment)
        self.settings: Settings = config.settings(type(self))
        self.backoff = Backoff(enabled=config.backoff)
        self._warmup_requests = config.warmup_for(self.warmup_requests)  # none in a trace replay: rows are the load
        self.user_number = next(_user_numbers)
        self.rng = user_rng(config.spawn_seed, environment, self.user_number)  # spawn offset, think jitter
        self._seed = config.spawn_seed  # and which requests --llm-cancel-rate picks (client/cancel.py)
        self._worker = getattr(getattr(environment, "runner", None), "worker_index", 0) or 0
        self.source = source_for(config.workload_for(type(self)))
        self.lane = self.source.lane(self.user_number)
        if self.route.kind != "chat":  # embeddings, rerank: --llm-batch-size items per request
            self.lane = BatchLane(self.lane, self.settings.batch_size)
        self.api_key = self.settings.api_key_for(self.host)  # only to a host given at start (key_scope.py)
        self.model_name = self.settings.model or "default"
        self.stream_client = StreamClient(
            self.client_base_url(self.host),
            timeouts=self.settings.timeouts,
            verify_tls=self.settings.verify_tls,
        )
        self._sent = 0
        self._stop_asked = False  # see stop()
        self._sdk: Any = None
        self._sdk_names: dict[tuple[str, str], str] = {}

    # what the descriptor provides ------------------------------------------------------------
    def client_base_url(self, host: str) -> str:
        return self.descriptor.base_url(host)

    @property
    def route(self) -> Route:
        """The route of ``--llm-endpoint`` (ConfigError naming the valid ones otherwise)."""
        return self.descriptor.route(self.settings.endpoint)

    def request_spec(self, messages: Messages, settings: Settings | None = None,
                     item: WorkItem | None = None) -> RequestSpec:
        """What one request is built from, in raw and SDK mode alike: its own ``settings``
        (a work item's max tokens), else the user's; a batch item's inputs (embeddings, rerank)
        and the work item's images."""
        s = settings or self.settings
        return RequestSpec(
            model=self.model_name, messages=messages, sampling=s.sampling, api_key=self.api_key,
            options={name: getattr(self, name) for name in self.request_options}, tools=s.tools,
            inputs=batch_inputs(item), images=item.images if item is not None else (),
        )

    def build_request(self, messages: Messages, settings: Settings | None = None,
                      images: tuple[Image, ...] = ()) -> HTTPRequest:
        spec = self.request_spec(messages, settings)
        return self.route.build(replace(spec, images=images) if images else spec)

    def new_parser(self) -> StreamParser:
        return self.route.parser()

    def on_start(self) -> None:
        if getattr(self.environment, "llm_preflight_failed", False):  # health/guard.py: the run is stopping
            Event().wait()  # no request: idle until the stop kills this user
        delay = first_request_delay(self.settings.spawn_spread, self.environment, self.rng)
        if delay:  # out of phase with the rest of its spawn batch (llm_users/load/spawn.py)
            gevent.sleep(delay)
        if self.descriptor.discover_model and self.settings.model is None:
            self.model_name = discover_model(self.stream_client, self.backend)
        self.prepare_workload()

    # the task -------------------------------------------------------------------------------
    @task
    def generate(self) -> None:
        if getattr(self.environment, "llm_open_loop", False):
            gevent.sleep(1.0)  # open loop: the scheduler sends (openloop.py); users idle
            return
        item = self.lane.next()
        pause = item.think_s + (think_jitter(self.settings.think_jitter_s, self.rng) if self._sent else 0.0)
        if pause > 0:
            gevent.sleep(pause)
        if self._stop_asked:  # stop() came as this user waited or paused: it sends nothing more
            raise StopUser
        rec = self.send(item.messages, item)
        self.lane.reply(item, "".join(rec.reply) if rec.ok and rec.reply is not None else None)
        if rec.backoff_s:  # repeated connect errors / identical 4xx: do not flood (backoff.py)
            gevent.sleep(rec.backoff_s)

    def prepare_workload(self) -> None:
        """Once per process: let the request source measure the server (synthetic lengths)."""
        if not self.source.needs_prepare():
            return
        with _prepare_lock:
            if self.source.needs_prepare():
                self.source.prepare(ServerProbe(self))

    def send(self, messages: Messages, item: WorkItem | None = None, *, stream_client: StreamClient | None = None,
             scheduled_ns: int | None = None, inflight_wait_ns: int | None = None) -> RequestRecord:
        """Send one prompt, record it, fire ``request`` and ``llm_response``.

        A failure is recorded by :func:`mark_failed` (the same for raw and SDK mode). A stop
        that kills the user mid-request (Locust's GreenletExit) records the request as
        ``interrupted`` (fires ``llm_response`` only, not Locust's ``request``) and lets the
        kill go on. The open-loop scheduler (:mod:`.openloop`) sends many at once through one
        user: it passes a pooled connection and the request's schedule."""
        base = self.settings
        settings = base
        if item is not None and item.max_tokens is not None and item.max_tokens != base.sampling.max_tokens:
            settings = replace(base, sampling=replace(base.sampling, max_tokens=item.max_tokens))
        client = stream_client or self.stream_client
        return self._send(messages, item, settings, client, scheduled_ns, inflight_wait_ns)

    def _send(self, messages: Messages, item: WorkItem | None, settings: Settings, client: StreamClient,
              scheduled_ns: int | None, inflight_wait_ns: int | None) -> RequestRecord:
        overload = self.descriptor.overload_statuses
        images = item.images if item is not None else ()
        cancel = chosen(settings.cancel, self._seed, self._worker, self.user_number, self._sent)
        spec = self.request_spec(messages, settings, item)
        kind = self.route.kind
        if settings.client == "sdk":
            from llm_users.client.sdk import (
                sdk_stream,  # optional extra: imported at start by the plugin's checks
            )

            rec = self._new_record(self.sdk_name(spec))
            run = lambda: sdk_stream(self, spec, rec, cancel)  # noqa: E731
        else:
            # a chat request through build_request (a locustfile may override it); a batch from its spec
            req = self.build_request(messages, settings, images) if kind == "chat" else self.route.build(spec)
            rec = self._new_record(req.name)
            rec.request_bytes = len(req.body)  # a 413's hint names it (health/guard.py)
            req.headers.update(self.extra_headers)
            req.headers["X-Request-Id"] = rec.request_id
            parser = self.new_parser()
            side = self.route.server_side
            run = lambda: client.stream(req, parser, rec, overload, cancel, side)  # noqa: E731
        rec.scheduled_ns = scheduled_ns
        rec.inflight_wait_ns = inflight_wait_ns
        if kind == "chat":
            rec.target_output_tokens = settings.sampling.max_tokens
        else:  # one answer for a batch: no output tokens, no TTFT/ITL
            rec.kind, rec.inputs = kind, len(spec.inputs) or 1
        if item is not None:
            rec.target_input_tokens = item.target_input_tokens
            rec.session_id = item.session_id
            rec.turn = item.turn
            rec.prefix_id = item.prefix_id
            if images:
                rec.image_count = len(images)
                rec.image_bytes = sum(im.wire_bytes for im in images)
            if item.wants_reply:
                rec.reply = []
        answer_format = settings.tools if settings.tools is not None and settings.tools.response_format else None
        if answer_format is not None and rec.reply is None:
            rec.reply = []  # kept only to judge the answer (structured_valid)
        exc: LLMRequestError | None = None
        started = time.perf_counter_ns()
        env = self.environment
        env.llm_in_flight = getattr(env, "llm_in_flight", 0) + 1  # a worker's payload says how many (distributed.py)
        try:
            run()
        except Cancelled as e:  # --llm-cancel-after: on purpose, not a failure
            mark_cancelled(rec, e, e.at_ns or time.perf_counter_ns())
        except LLMRequestError as e:
            exc = e
            rec.retry_after_s = retry_after_seconds(getattr(e, "retry_after", None))
            if not rec.t0_ns:  # failed before anything was sent (connect)
                rec.t0_ns = started
                rec.start_time = time.time() - (time.perf_counter_ns() - started) / 1e9
            mark_failed(rec, e, time.perf_counter_ns())
        except GreenletExit:
            if rec.t0_ns:
                mark_interrupted(rec, time.perf_counter_ns())
                self._fire_record(rec)
            raise
        else:
            check_usage(rec, chunk_has_a_token=self.route.chunk_has_a_token,
                        prompt_tokens=lambda: rec.target_input_tokens or prompt_tokens_guess(messages))
            if rec.input_tokens is None and kind != "chat" and rec.target_input_tokens:  # TEI: no usage
                rec.input_tokens, rec.input_tokens_source = rec.target_input_tokens, "workload"
            s = settings.sampling
            rec.sampling_issues = sampling_issues(rec, s.max_tokens, s.ignore_eos and self.descriptor.sends_ignore_eos)
            if answer_format is not None:
                rec.structured_valid = structured_valid("".join(rec.reply or ()), answer_format)
            if item is not None and item.wants_reply and rec.server and rec.server.get("response_id"):
                item.meta["response_id"] = rec.server["response_id"]  # a session may chain by it (sessions.py)
        finally:
            env.llm_in_flight -= 1
        wait = self.backoff.after(rec)  # open loop keeps its schedule: no user waits there (backoff.py)
        rec.backoff_s = 0.0 if getattr(self.environment, "llm_open_loop", False) else wait
        elapsed_ns = rec.e2e_ns if rec.e2e_ns is not None else time.perf_counter_ns() - rec.t0_ns
        self.environment.events.request.fire(
            request_type="POST",
            name=rec.name if rec.status != "cancelled" else rec.name + CANCELLED_SUFFIX,  # its own row, no failure
            response_time=elapsed_ns / 1e6,
            response_length=rec.response_bytes,
            exception=for_locust(exc) if exc is not None else None,  # one table row per kind, not per request
            context={"backend": self.backend, "model": self.model_name},
            url=None, response=None,
        )
        self._fire_record(rec)
        # the next request's building and sending waits for the sockets found ready meanwhile
        # (other streams' chunks): Locust's wait() between tasks is a gevent.sleep(0), which
        # runs before the loop polls (idle.serve_ready_io, issue 14)
        serve_ready_io()
        return rec

    def _fire_record(self, rec: RequestRecord) -> None:
        hook = getattr(self.environment.events, "llm_response", None)
        if hook is not None:
            hook.fire(record=rec, user=self)

    def _new_record(self, name: str) -> RequestRecord:
        rec = RequestRecord(request_id=new_request_id(), name=name, backend=self.backend, model=self.model_name,
                            user=self.user_number, client=self.settings.client)
        rec.warmup = self._sent < self._warmup_requests
        self._sent += 1
        return rec

    def sdk_name(self, spec: RequestSpec) -> str:
        """One naming rule for both modes, every backend: ``sdk:`` + the name raw mode gives the
        same request (its route's path: ``sdk:/v1/chat/completions``, ``sdk:/v1/messages``,
        ``sdk:/api/chat``, ``sdk:/v1beta/models/<model>:streamGenerateContent``). Made once
        per user and model from the route's own builder (the record's ``client`` says the mode)."""
        key = (self.model_name, self.route.path)
        cached = self._sdk_names.get(key)
        if cached is None:
            cached = self._sdk_names[key] = "sdk:" + self.route.build(spec).name
        return cached

    def stop(self, force: bool = False) -> bool:
        """Locust's stop, noted first: :meth:`generate` sends nothing more (a queued kill of a
        waiting user cut the request its due ``sleep(0)`` began; a think pause: docs/metrics.md)."""
        self._stop_asked = True
        return super().stop(force)

    def on_stop(self) -> None:
        self.stream_client.close()


class VLLMUser(LLMUser):
    """vLLM's OpenAI-compatible server: max_tokens + ignore_eos, model discovered if not given."""

    abstract = True
    descriptor = VLLM


class OpenAIUser(LLMUser):
    """OpenAI's API (or any server that wants its dialect): max_completion_tokens, Bearer key;
    model gpt-4o-mini, no ignore_eos, a key required (OPENAI_API_KEY)."""

    abstract = True
    descriptor = OPENAI


class TGIUser(LLMUser):
    """Hugging Face TGI. Endpoints: ``generate_stream`` (default), ``root`` (``POST /`` with
    stream), or ``chat`` (the Messages API, OpenAI-shaped). Fixed sampling is greedy
    (``do_sample: false``); TGI has no ignore_eos, so output length may vary."""

    abstract = True
    descriptor = TGI


class OllamaUser(LLMUser):
    """Ollama. Endpoints: ``chat`` (``/api/chat``, default), ``generate``, ``openai`` (its /v1 chat
    route). Token counts and server timings (ns) from the final line; no ignore_eos. Model llama3.2."""

    abstract = True
    descriptor = OLLAMA


class ClaudeUser(LLMUser):
    """Anthropic Messages API. ``auth`` (``x-api-key`` or ``bearer``) and ``anthropic_version``
    are class attributes; under the default version 2023-06-01 temperature is sent. A key is
    required (ANTHROPIC_API_KEY)."""

    abstract = True
    descriptor = CLAUDE


class GeminiUser(LLMUser):
    """Google Gemini API (``streamGenerateContent?alt=sse``). Key from GEMINI_API_KEY, else
    GOOGLE_API_KEY. ``api_version`` is a class attribute (default v1beta)."""

    abstract = True
    descriptor = GEMINI


class VLLMEmbedUser(VLLMUser):
    """vLLM's ``/v1/embeddings``: ``--llm-batch-size`` inputs per request, one JSON answer."""

    abstract = True
    endpoint = "embeddings"


class VLLMRerankUser(VLLMUser):
    """vLLM's ``/v1/rerank`` (``--llm-endpoint rerank_root``: ``/rerank``): ``rerank_query``
    against ``--llm-batch-size`` documents per request."""

    abstract = True
    endpoint = "rerank"


class OpenAIEmbedUser(OpenAIUser):
    """OpenAI's ``/v1/embeddings`` (model text-embedding-3-small)."""

    abstract = True
    endpoint = "embeddings"
    model = "text-embedding-3-small"


class OllamaEmbedUser(OllamaUser):
    """Ollama's ``/api/embed`` (model nomic-embed-text)."""

    abstract = True
    endpoint = "embed"
    model = "nomic-embed-text"


class GeminiEmbedUser(GeminiUser):
    """Gemini's ``:batchEmbedContents`` (``--llm-endpoint embed_content``: ``:embedContent``,
    one input); model gemini-embedding-001."""

    abstract = True
    endpoint = "embed"
    model = "gemini-embedding-001"


class TEIEmbedUser(LLMUser):
    """Hugging Face Text Embeddings Inference ``/embed``."""

    abstract = True
    descriptor = TEI


class TEIRerankUser(LLMUser):
    """Hugging Face Text Embeddings Inference ``/rerank``."""

    abstract = True
    descriptor = TEI
    endpoint = "rerank"


__all__ = ["ClaudeUser", "GeminiEmbedUser", "GeminiUser", "LLMUser", "OllamaEmbedUser", "OllamaUser", "OpenAIEmbedUser",
           "OpenAIUser", "TEIEmbedUser", "TEIRerankUser", "TGIUser", "VLLMEmbedUser", "VLLMRerankUser", "VLLMUser",
           "protocols"]
