"""Asking the target server about token counts: its own tokenizer endpoint, and the prompt
tokens it reports for a real probe request. Used once per process, before the load starts.

The tokenize endpoints a backend's servers have are its descriptor's ``tokenizers`` (path and
request body), tried in turn until one answers; the answer is read here, in any of the shapes
the servers give (from their sources):

- vLLM ``POST /tokenize`` -> ``{"count", "max_model_len", "tokens"}``;
- llama.cpp server ``POST /tokenize`` and llama-cpp-python ``POST /extras/tokenize`` -> ``{"tokens": [...]}``;
- TGI ``POST /tokenize`` -> ``[{"id", "text", "start", "stop"}, ...]``;
- TEI ``POST /tokenize`` -> the same, one list per input: ``[[{"id", ...}, ...]]``.

OpenAI-compatible users try the vLLM, llama.cpp and llama-cpp-python shapes in turn; TGI users
the TGI one; Ollama, Claude and Gemini have none (calibration instead).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from gevent.lock import BoundedSemaphore

from llm_users.client.stream import StreamClient, new_request_id
from llm_users.errors import LLMRequestError
from llm_users.metrics import RequestRecord
from llm_users.protocols.backend import Tokenizer
from llm_users.protocols.base import HTTPRequest, bearer, json_post
from llm_users.workload.source import Messages

log = logging.getLogger(__name__)


def token_count(data: Any) -> int | None:
    """The count in any of the shapes above."""
    if isinstance(data, list):
        if len(data) == 1 and isinstance(data[0], list):  # TEI: one token list per input
            return len(data[0])
        return len(data)
    if isinstance(data, dict):
        if isinstance(data.get("count"), int):
            return data["count"]
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
    return None


class ServerProbe:
    """The :class:`~llm_users.workload.source.Probe` for one Locust user's server.

    It has its own connection, one call at a time (a lock), since the source keeps it for
    counting every later prompt and any user's greenlet may call it."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.backend: str = user.backend
        self.tokenizers: tuple[Tokenizer, ...] = user.descriptor.tokenizers
        self.shape: Tokenizer | None = None
        self._tried = False
        self.client = StreamClient(user.client_base_url(user.host), timeouts=user.settings.timeouts,
                                   verify_tls=user.settings.verify_tls)
        self._lock = BoundedSemaphore()

    def prompt_tokens(self, messages: Messages) -> int | None:
        """One real request with one output token (not recorded); the server's prompt count."""
        user = self.user
        saved = user.settings
        user.settings = replace(saved, sampling=replace(saved.sampling, max_tokens=1))
        try:
            req = user.build_request(messages)
            rec = RequestRecord(new_request_id(), req.name, user.backend, user.model_name)
            with self._lock:
                self.client.stream(req, user.new_parser(), rec)
        finally:
            user.settings = saved
        return rec.input_tokens

    def tokenize(self, text: str) -> int | None:
        if self.shape is not None:
            return self._call(self.shape, text)
        if self._tried:
            return None
        self._tried = True
        for shape in self.tokenizers:
            n = self._call(shape, text, quiet=True)
            if n is not None and (n > 0 or not text.strip()):  # llama.cpp answers vLLM's shape with no tokens
                self.shape = shape
                log.info("locust-llm: using the server's tokenizer (%s shape)", shape.name)
                return n
        return None

    def _call(self, shape: Tokenizer, text: str, quiet: bool = False) -> int | None:
        user = self.user
        body = shape.body(user.model_name, text)
        req: HTTPRequest = json_post(shape.path, body, accept="application/json", auth=bearer(user.api_key))
        try:
            with self._lock:
                return token_count(self.client.call_json(req))
        except LLMRequestError as e:
            if not quiet:
                log.warning("locust-llm: tokenize (%s) failed: %s", shape.name, e)
            return None
