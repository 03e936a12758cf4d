"""workload/sessions.py: a session lane's history, a failed turn ending the session, and a new
session after the last turn."""

from __future__ import annotations

import random

from llm_users.workload.sessions import SessionSource
from llm_users.workload.source import Lane, RequestSource, WorkItem


class _Fixed(RequestSource):
    def lane(self, index: int) -> Lane:
        src = self

        class L(Lane):
            n = 0

            def next(self) -> WorkItem:
                self.n += 1
                return WorkItem([{"role": "user", "content": f"q{self.n}"}], meta=src.meta)
        return L()

    meta: dict = {}


def test_session_lane_history_failure_and_end() -> None:
    lane = SessionSource(_Fixed(), turns=3, think_s=0.5).lane(0)
    a = lane.next()
    assert a.turn == 1 and a.think_s == 0 and a.wants_reply
    lane.reply(a, " r1")
    b = lane.next()
    assert b.turn == 2 and b.session_id == a.session_id and b.think_s == 0.5
    assert b.messages == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": " r1"},
                          {"role": "user", "content": "q2"}]
    lane.reply(b, None)  # a failed turn ends the session
    c = lane.next()
    assert c.turn == 1 and c.session_id != a.session_id
    for _ in range(2):
        lane.reply(c, "r")
        c = lane.next()
    assert c.turn == 3
    lane.reply(c, "r")
    assert lane.next().turn == 1  # three turns, then a new session
    random.seed(0)
