"""load/profiles/trace.py: ``--llm-trace`` as a profile: its options read (format, window, a local
tokenizer; images refused), the plan in words, and how it drives the open-loop engine: the master
or local runner reads the trace at start and has every share carry it, a worker reads the file its
first share names (the trace files themselves: tests/load/test_trace_formats.py, test_trace_replay.py)."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm_users.errors import ConfigError
from llm_users.load.profile import StudyConfig
from llm_users.load.profiles.open_loop import OpenLoop
from llm_users.load.profiles.trace import Trace, TraceConfig
from llm_users.load.trace_replay import TraceSource
from tests.load.study_rig import study_of

TRACE = str(Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "mooncake_trace.jsonl")


def test_the_options_read() -> None:
    p = Trace()
    assert p.parse(Namespace(llm_trace_speedup="3")) is None  # no trace: nothing asked
    got = p.parse(Namespace(llm_trace="t.jsonl", llm_trace_format=" Mooncake ", llm_trace_window=":90",
                            llm_trace_speedup="2", llm_tokenizer="tok.json", llm_images="0"))
    assert got == TraceConfig("t.jsonl", 2.0, "mooncake", (0.0, 90.0), "tok.json")
    assert p.open_loop(got) and not p.open_loop(None)
    with pytest.raises(ConfigError, match="--llm-images: --llm-trace builds its own prompts, text only"):
        p.parse(Namespace(llm_trace="t.jsonl", llm_images="1"))
    with pytest.raises(ConfigError, match="^--llm-trace-window must be START:END"):
        p.parse(Namespace(llm_trace="t.jsonl", llm_trace_window="soon"))


def test_the_plan_in_words() -> None:
    p, s = Trace(), StudyConfig()
    assert p.describe(None, s) is None
    assert p.describe(TraceConfig("t.jsonl"), s) == "trace replay of t.jsonl"
    assert p.describe(TraceConfig("t.jsonl", 0.5, window=(60.0, 180.0)), s) == \
        "trace replay of t.jsonl, seconds 60 to 180 of it, 0.5x faster"


@pytest.mark.parametrize("role", ["local", "master"])
def test_the_merging_node_reads_the_trace_and_every_share_carries_it(role: str) -> None:
    study = study_of(role, llm_trace=TRACE, llm_trace_window="0:1", llm_trace_speedup="2")
    study.attach([OpenLoop(), Trace()])
    engine = study.get(OpenLoop)
    assert study.get(Trace) is None  # no run part: the engine sends the trace
    assert engine.fixed_rate == 1.0 and isinstance(engine.source, TraceSource) and len(engine.source) == 9
    assert engine.share_extra == {"trace": TRACE, "trace_speedup": 2.0, "trace_format": "jsonl",
                                  "trace_window": [0.0, 1.0], "trace_tokenizer": None}
    assert engine.controller.extra is engine.share_extra  # with every worker's share
    assert engine.target_extra == {"rate": None, "trace": TRACE, "trace_speedup": 2.0, "trace_requests": 9,
                                   "trace_format": "jsonl", "trace_window": [0.0, 1.0], "trace_skipped": 0}
    assert (engine.scheduler is not None) is (role == "local")


def test_an_open_ended_window_goes_in_the_share_as_json_can_say_it() -> None:
    study = study_of("local", llm_trace=TRACE, llm_trace_window="1:")
    study.attach([OpenLoop(), Trace()])
    assert study.get(OpenLoop).share_extra["trace_window"] == [1.0, None]


def test_a_bad_trace_stops_the_start_on_every_node(tmp_path) -> None:
    for role in ("local", "worker"):
        study = study_of(role, llm_trace=str(tmp_path / "missing.jsonl"))
        with pytest.raises(ConfigError, match="--llm-trace: no such file"):
            study.attach([OpenLoop(), Trace()])


def test_a_worker_reads_the_file_its_first_share_names() -> None:
    study = study_of("worker")
    study.attach([OpenLoop(), Trace()])
    engine = study.get(OpenLoop)
    assert engine.fixed_rate is None and len(engine.share_hooks) == 1
    hook = engine.share_hooks[0]
    scheduler = SimpleNamespace(source=None)
    hook({"rate": 2.0}, scheduler)  # a share without a trace
    assert scheduler.source is None
    hook({"trace": TRACE, "trace_speedup": 4, "trace_window": [1.0, None], "trace_tokenizer": None}, scheduler)
    source = scheduler.source
    assert isinstance(source, TraceSource) and source.speedup == 4.0 and len(source) == 24 - 9
    hook({"trace": TRACE, "trace_window": [0.0, 1.0]}, scheduler)  # a later share: the file is read once
    assert scheduler.source is source
