"""The request-source interface: what a User (or a scheduler) sends next.

A :class:`RequestSource` is built once per process from the options; each sender (a Locust
user, a scheduler slot) takes its own :class:`Lane` with ``source.lane(index)`` and asks it for
the next :class:`WorkItem`. After the request, the sender hands the reply text back with
``lane.reply(item, text)`` (``None`` on failure): session lanes append it to the conversation.

A source may need the server before it can produce items (synthetic prompts of an exact length
measure the server's tokenizer and chat template): ``prepare(probe)`` runs once per process,
before the first item, with a :class:`Probe` that talks to the target server.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

from llm_users.protocols.images import Image

Messages = list[dict[str, str]]


@dataclass(slots=True)
class WorkItem:
    """One request to send. ``max_tokens`` None: the user's own setting."""

    messages: Messages
    max_tokens: int | None = None
    target_input_tokens: int | None = None  # the synthetic target (server-counted prompt tokens)
    session_id: str | None = None
    turn: int | None = None  # 1-based turn index within the session
    prefix_id: int | None = None  # which shared prefix this prompt starts with
    think_s: float = 0.0  # wait this long before sending (between session turns)
    wants_reply: bool = False  # the lane needs the reply text (sessions)
    meta: dict[str, Any] = field(default_factory=dict)
    images: tuple[Image, ...] = ()  # sent with the last user message (workload/images.py)


class Probe(Protocol):
    """What a source may ask of the target server while preparing (see workload/tokenizer.py)."""

    backend: str

    def prompt_tokens(self, messages: Messages) -> int | None:
        """Send ``messages`` as a real request (1 output token); the server's prompt-token count."""

    def tokenize(self, text: str) -> int | None:
        """The server's own tokenizer count for ``text``, or None when it has no endpoint."""


class Lane(ABC):
    """One sender's view of a source."""

    @abstractmethod
    def next(self) -> WorkItem: ...

    def reply(self, item: WorkItem, text: str | None) -> None:  # noqa: B027 - optional hook
        """The reply to ``item`` (None when the request failed)."""


class RequestSource(ABC):
    kind: str = "source"

    @abstractmethod
    def lane(self, index: int) -> Lane: ...

    def needs_prepare(self) -> bool:
        return False

    def prepare(self, probe: Probe) -> None:  # noqa: B027 - optional hook
        """Called once per process before the first item, with the target server at hand."""

    def describe(self) -> dict[str, Any]:
        """What summary.json's ``workload`` block says about this source."""
        return {"kind": self.kind}


class WrappedSource(RequestSource):
    """A source that changes the items of another (``inner``): preparing is the inner's, and so
    is ``kind`` unless the subclass names its own (sessions, output lengths, images)."""

    def __init__(self, inner: RequestSource) -> None:
        self.inner = inner
        if type(self).kind == RequestSource.kind:
            self.kind = inner.kind

    def needs_prepare(self) -> bool:
        return self.inner.needs_prepare()

    def prepare(self, probe: Probe) -> None:
        self.inner.prepare(probe)

