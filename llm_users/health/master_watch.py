"""A worker noticing that its master is gone (killed, its host down), and what it keeps.

Locust's own worker waits 60 s without a master heartbeat (``MASTER_HEARTBEAT_TIMEOUT``) before
it quits, and then exits 0; its users keep sending meanwhile, and whatever it had not shipped
is lost without a word. :class:`MasterWatch` runs on every worker: once no heartbeat from the
master has arrived for :data:`MASTER_SILENCE_S` and a TCP connection to the master's port is
refused (its host is up, its process is not), the master is lost. A connection that gets no
answer within :data:`PROBE_TIMEOUT_S` (a partition, or a master host that is gone) is waited
out for :data:`NO_ANSWER_SILENCE_S`: a short partition heals, Locust's master re-admits the
worker it had marked missing, and the records queued meanwhile arrive. A master that is only
slow (its loop busy writing a large report) still accepts connections and is waited for, up to
Locust's own 60 s. The worker then stops its users, writes the records the master has not
confirmed to :func:`unshipped_path` and exits 1 (``run.WorkerRun.on_master_lost``;
docs/decisions/distribution.md, "The master dies").

The forked workers of ``--processes N`` are workers like any other: when their master (their
parent) is killed they notice the same way, within seconds, and exit.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import orjson

from llm_users.outputs.atomic import atomic_open

MASTER_SILENCE_S = 5.0  # no heartbeat this long, and the master's port refuses: lost
NO_ANSWER_SILENCE_S = 30.0  # no heartbeat this long, and the master's port does not answer: lost
PROBE_TIMEOUT_S = 1.0
CHECK_EVERY_S = 0.5


def master_answers(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the master's port opens (its process is alive)."""
    return probe_master(host, port, timeout) == "answers"


def probe_master(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str:
    """``answers`` (the port accepts), ``refused`` (the host says no one listens) or ``silent``
    (no answer in ``timeout``: a partition, or no such host any more)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "answers"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "silent"


class MasterWatch:
    """Calls ``on_lost(reason)`` once, when the master has gone silent and does not answer."""

    def __init__(self, runner: Any, on_lost: Callable[[str], None], silence_s: float = MASTER_SILENCE_S,
                 no_answer_s: float = NO_ANSWER_SILENCE_S) -> None:
        self.runner = runner
        self.on_lost = on_lost
        self.silence_s = silence_s
        self.no_answer_s = no_answer_s
        self.greenlet = gevent.spawn(self._loop)

    def silent_for(self, now: float) -> float:
        """Seconds since the master's last heartbeat (0 before the first one)."""
        last = getattr(self.runner, "last_heartbeat_timestamp", None)
        return 0.0 if not last else now - last

    def _loop(self) -> None:
        while True:
            gevent.sleep(CHECK_EVERY_S)
            silent = self.silent_for(time.time())
            if silent < self.silence_s:
                continue
            host, port = self.runner.master_host, self.runner.master_port
            state = probe_master(host, port)
            if state == "answers":
                continue  # alive, only slow: Locust's own heartbeat timeout is the last word
            if state == "silent" and silent < self.no_answer_s:
                continue  # a partition may heal: wait it out, longer
            why = "refuses connections" if state == "refused" else "does not answer"
            self.on_lost(f"no heartbeat from the master for {silent:.0f} s and {host}:{port} {why}")
            return

    def stop(self) -> None:
        self.greenlet.kill(block=False)


def unshipped_path(directory: str | None, node: str) -> Path:
    """Where a worker that lost its master writes the records the master did not confirm: its
    own ``--llm-report`` directory, else the current directory."""
    return Path(directory or ".") / f"llm-unshipped-{node}.jsonl"


def write_unshipped(path: Path, records: list[dict[str, Any]]) -> str | None:
    """One JSON line per record (requests.jsonl's format); the error in words when it fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as f:  # whole or absent
            for d in records:
                f.write(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
    except OSError as e:
        return str(e.strerror or e)
    return None


def lose_master(run: Any, reason: str) -> None:
    """A worker's reaction to a lost master (``run``: its ``run.WorkerRun``): one line, its users
    stopped (honouring --stop-timeout), the records the master did not confirm written to
    :func:`unshipped_path` with one line naming the file, exit code 1."""
    env = run.environment
    run.master_lost = True
    run._unconfirmed = None  # nobody will confirm it: no wait at the exit
    env.process_exit_code = 1
    print(f"locust-llm: {run.node}: lost the master ({reason}); stopping this worker's users", flush=True)
    runner = env.runner
    if run.test_running:
        runner.stop()  # test_stop: the final payload stays here
    records = run.shipper.unconfirmed_records()
    path = unshipped_path(run.config.report_dir, run.node)
    error = write_unshipped(path, records)
    if error is None:
        print(f"locust-llm: {run.node}: the master confirmed {run.shipper.confirmed} records; the "
              f"{len(records)} it did not are in {path.resolve()}", flush=True)
    else:
        print(f"locust-llm: {run.node}: the master confirmed {run.shipper.confirmed} records; cannot write "
              f"{path.resolve()} ({error}): the {len(records)} it did not are lost", flush=True)
    runner.quit()
