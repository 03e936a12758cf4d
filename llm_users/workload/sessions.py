"""Multi-turn sessions: each lane holds one conversation at a time.

Turn 1 is the inner source's item. Each later turn sends the whole history: every earlier
message, each reply as an ``assistant`` message (the protocol modules render it in the
backend's own shape: OpenAI/vLLM/Ollama/TGI-Messages ``assistant`` messages, Anthropic
``assistant`` turns, Gemini ``model`` contents, TGI generate's flattened prompt), then the new
user message. New user messages come from the dataset item's own later turns (ShareGPT), else
from synthetic text of ``--llm-input-tokens`` words, else from the dataset's next prompt. A
failed turn ends the session (the next request starts a new one). Think time is waited before
every turn after the first.

With ``chain`` (``--llm-responses-chain previous_id``) a reply the server gave a response id
(the Responses API: the sender puts it in ``item.meta["response_id"]``) is kept in the history
with that id: the Responses builder then sends ``previous_response_id`` and only the new
message (:func:`llm_users.protocols.responses.split_input`). Replies without an id (every other
endpoint) stay plain history, sent whole.
"""

from __future__ import annotations

import uuid
from typing import Any

from llm_users.workload.source import Lane, Messages, RequestSource, WorkItem, WrappedSource


class SessionSource(WrappedSource):
    kind = "sessions"

    def __init__(self, inner: RequestSource, turns: int, think_s: float = 0.0, *, chain: bool = False) -> None:
        super().__init__(inner)
        self.turns = turns
        self.think_s = think_s
        self.chain = chain
        self._run = uuid.uuid4().hex[:8]

    def lane(self, index: int) -> Lane:
        return SessionLane(self, index, self.inner.lane(index))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "turns": self.turns, "think_time_s": self.think_s,
                "chain": "previous_id" if self.chain else "full", "turn_source": self.inner.describe()}


class SessionLane(Lane):
    def __init__(self, source: SessionSource, index: int, inner: Lane) -> None:
        self.source = source
        self.index = index
        self.inner = inner
        self.history: Messages = []
        self.turn = 0
        self.sessions = 0
        self.session_id = ""
        self.followups: list[str] = []
        self.first: WorkItem | None = None

    def next(self) -> WorkItem:
        if self.turn == 0 or self.turn >= self.source.turns or (self.turn > 0 and not self.history):
            return self._start()
        content, target = self._next_user()
        if content is None:  # the conversation has no more user turns
            return self._start()
        self.turn += 1
        messages = [*self.history, {"role": "user", "content": content}]
        first = self.first
        return WorkItem(messages, max_tokens=self._max_tokens(), session_id=self.session_id, turn=self.turn,
                        think_s=self.source.think_s, wants_reply=True,
                        prefix_id=first.prefix_id if first else None, meta={"turn_target": target})

    def _start(self) -> WorkItem:
        item = self.inner.next()
        self.sessions += 1
        self.session_id = f"{self.source._run}-{self.index}-{self.sessions}"
        self.turn = 1
        self.first = item
        self.followups = list(item.meta.get("followups", ()))
        self.history = []
        item.session_id = self.session_id
        item.turn = 1
        item.wants_reply = True
        return item

    def _next_user(self) -> tuple[str | None, int | None]:
        if self.first is not None and self.first.meta.get("followups") is not None:
            return (self.followups.pop(0), None) if self.followups else (None, None)
        user_turn = getattr(self.inner, "user_turn", None)
        if user_turn is not None:
            text, target = user_turn()
            return text, target
        nxt = self.inner.next()
        return nxt.messages[-1]["content"], None

    def _max_tokens(self) -> int | None:
        return self.first.max_tokens if self.first is not None else None

    def reply(self, item: WorkItem, text: str | None) -> None:
        if item.session_id != self.session_id:
            return
        if text is None:  # a failed turn ends the session
            self.history = []
            self.turn = 0
            return
        reply: dict[str, str] = {"role": "assistant", "content": text}
        rid = item.meta.get("response_id") if self.source.chain else None
        if rid:  # the server keeps this turn: the next request names it (previous_response_id)
            reply["response_id"] = rid
        self.history = [*item.messages, reply]
