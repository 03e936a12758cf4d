"""The worker's watch on its master (health/master_watch.py): the parts of issue 33 item 3
without processes."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import gevent

from llm_users.health.master_watch import MasterWatch, master_answers, unshipped_path, write_unshipped
from llm_users.metrics import RequestRecord
from tests.helpers import free_port


def record(i: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", name="n", backend="b", model="m", start_time=float(i))


def _runner(port: int, last: float | None) -> SimpleNamespace:
    return SimpleNamespace(master_host="127.0.0.1", master_port=port, last_heartbeat_timestamp=last)


def test_watch_says_lost_when_silent_and_refused() -> None:
    """Silent for 6 s (over its 5) and refused: lost at the watch's first look, counted in looks,
    not seconds (a loaded machine only makes each look later)."""
    port = free_port()  # nothing listens: refused
    assert not master_answers("127.0.0.1", port)
    lost: list[str] = []
    t0 = time.monotonic()
    watch = MasterWatch(_runner(port, time.time() - 6), lost.append)
    looks: list[float] = []
    silent_for = watch.silent_for

    def counted(now: float) -> float:
        looks.append(silent_for(now))
        return looks[-1]

    watch.silent_for = counted  # type: ignore[method-assign]  # the loop has not run yet: it looks through this
    while not lost and time.monotonic() - t0 < 30:
        gevent.sleep(0.05)
    watch.stop()
    assert len(lost) == 1, lost
    m = re.fullmatch(rf"no heartbeat from the master for (\d+) s and 127.0.0.1:{port} refuses connections", lost[0])
    assert m, lost
    assert len(looks) == 1 and int(m.group(1)) == round(looks[0]) >= 6, (looks, lost)  # its first look


def test_watch_waits_for_a_slow_master_that_answers_and_a_fresh_heartbeat() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    lost: list[str] = []
    slow = MasterWatch(_runner(srv.getsockname()[1], time.time() - 30), lost.append)  # silent, port answers
    fresh = MasterWatch(_runner(free_port(), time.time() + 3600), lost.append)  # heartbeats arrive
    never = MasterWatch(_runner(free_port(), None), lost.append)  # not connected yet
    gevent.sleep(1.6)
    for w in (slow, fresh, never):
        w.stop()
    srv.close()
    assert lost == []


def test_a_master_that_does_not_answer_is_waited_out_longer(monkeypatch) -> None:
    # a partition (packets dropped: the connection attempt times out) may heal: wait no_answer_s
    import llm_users.health.master_watch as mw

    monkeypatch.setattr(mw, "probe_master", lambda host, port, timeout=1.0: "silent")
    lost: list[str] = []
    now = time.time()
    short = MasterWatch(_runner(free_port(), now - 6), lost.append, no_answer_s=30)
    gevent.sleep(1.2)
    short.stop()
    assert lost == []  # 6 s silent: a refused port would be lost by now (the test above)
    long = MasterWatch(_runner(free_port(), time.time() - 31), lost.append, no_answer_s=30)
    gevent.sleep(1.2)
    long.stop()
    assert len(lost) == 1 and re.fullmatch(r"no heartbeat from the master for 3[12] s and 127.0.0.1:\d+ does not answer",
                                           lost[0]), lost


def test_unshipped_file(tmp_path: Path) -> None:
    path = unshipped_path(str(tmp_path / "d"), "host_abc")
    assert path == tmp_path / "d" / "llm-unshipped-host_abc.jsonl"
    assert write_unshipped(path, [record(1).to_dict(), record(2).to_dict()]) is None
    assert [json.loads(ln)["request_id"] for ln in path.read_text().splitlines()] == ["r1", "r2"]
    (tmp_path / "file").write_text("")
    assert write_unshipped(unshipped_path(str(tmp_path / "file"), "w"), []) is not None  # a file as the dir
