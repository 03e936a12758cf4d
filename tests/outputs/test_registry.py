"""The outputs' registry: the explicit order, register(), write_outputs as the one way files are
written (once, at the stop), and summaries that only read: after the stop, building the summary
again (as ``GET /llm/summary.json`` does) writes nothing, the vLLM bench export included."""

from __future__ import annotations

import errno
import json
import os
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
from locust.env import Environment

from llm_users import events as llm_events
from llm_users.metrics import RequestRecord
from llm_users.options import RunConfig
from llm_users.outputs import FinalData, registry
from llm_users.outputs.export import vllm_bench
from llm_users.run import run_for
from llm_users.users import VLLMUser


class VLLM(VLLMUser):
    pass


class ToyOutput:
    name = "toy"

    def __init__(self) -> None:
        self.calls: list[tuple[int, str | None]] = []

    def write(self, final: FinalData, directory: str | None) -> None:
        self.calls.append((final.summary["overall"]["requests"], directory))


@pytest.fixture
def restore_registry():
    saved = list(registry.OUTPUTS)
    yield
    registry.OUTPUTS[:] = saved


def test_the_shipped_outputs_in_order_and_register(restore_registry) -> None:
    assert [o.name for o in registry.outputs()] == ["vllm_bench", "console", "summary", "timeseries", "html",
                                                    "profile_files"]
    toy = ToyOutput()
    assert registry.register(toy) is toy and registry.register(ToyOutput()) is toy  # one per name
    assert registry.outputs()[-1] is toy
    registry.OUTPUTS.remove(toy)
    registry.register(toy, before="console")
    assert [o.name for o in registry.outputs()][:2] == ["vllm_bench", "toy"]
    with pytest.raises(ValueError, match="needs a name"):
        registry.register(object())  # type: ignore[arg-type]


def rec(start: float) -> RequestRecord:
    return RequestRecord(f"r{start}", "/v1/chat/completions", "vllm", "m", start_time=start, ttft_ns=1_000_000,
                         e2e_ns=5_000_000, output_tokens=3, tokens_source="usage")


def test_files_are_written_once_at_the_stop_and_summaries_only_read(tmp_path: Path, restore_registry,
                                                                    capsys) -> None:
    toy = registry.register(ToyOutput())
    export = tmp_path / "bench" / "vllm.json"
    report = tmp_path / "report"
    env = Environment(user_classes=[VLLM], parsed_options=Namespace(
        llm_report=str(report), llm_export=["vllm-bench", str(export)], num_users=3))
    llm_events.install(env.events)
    run = run_for(env, RunConfig.from_options(env.parsed_options, [VLLM]), env.create_local_runner())
    run.install(env.runner)
    try:
        run.on_test_start()
        for t in (1.0, 2.0):
            env.events.llm_response.fire(record=rec(run.test_start + t), user=None)
        run.on_test_stop()
        final = run.last_summary
        assert toy.calls == [(2, str(report))]
        names = sorted(p.name for p in report.iterdir())
        assert names == ["report.html", "requests.jsonl", "summary.csv", "summary.json", "timeseries.csv"]
        data = json.loads(export.read_text())
        expected = vllm_bench(final, run.collector.stats, run.collector.timeline.rows(), 3)
        assert data == json.loads(json.dumps(expected)) and data["num_prompts"] == 2 and data["max_concurrency"] == 3
        out = capsys.readouterr().out
        assert out.index("vLLM bench result written") < out.index("LLM summary") < out.index("report written to")
        for p in [export, *report.iterdir()]:
            p.unlink()
        for _ in range(2):
            run.summary()  # what GET /llm/summary.json serves after the stop
        assert not export.exists() and list(report.iterdir()) == [] and len(toy.calls) == 1
    finally:
        run.close()


@pytest.mark.parametrize(("value", "html"), [(None, True), ("on", True), ("off", False)])
def test_llm_html_off_writes_every_file_but_the_page(tmp_path: Path, value: str | None, html: bool) -> None:
    report = tmp_path / "report"
    env = Environment(user_classes=[VLLM], parsed_options=Namespace(llm_report=str(report), llm_html=value))
    llm_events.install(env.events)
    run = run_for(env, RunConfig.from_options(env.parsed_options, [VLLM]), env.create_local_runner())
    run.install(env.runner)
    try:
        run.on_test_start()
        env.events.llm_response.fire(record=rec(run.test_start + 1.0), user=None)
        run.on_test_stop()
        names = sorted(p.name for p in report.iterdir())
        assert names == [*(["report.html"] if html else []), "requests.jsonl", "summary.csv", "summary.json",
                         "timeseries.csv"]
        assert json.loads((report / "summary.json").read_text())["overall"]["requests"] == 1
    finally:
        run.close()


def test_llm_html_takes_on_or_off() -> None:
    from llm_users.options import ConfigError

    with pytest.raises(ConfigError, match="--llm-html"):
        RunConfig.from_options(Namespace(llm_html="maybe"), [VLLM])


class _Out:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.dirs = name, fail, []

    def write(self, final: Any, directory: str | None) -> None:
        self.dirs.append(directory)
        if self.fail and directory:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{directory}/x.json")


def test_write_outputs_goes_on_without_the_directory(monkeypatch, capsys, tmp_path: Path) -> None:
    a, bad, c = _Out("a"), _Out("bad", fail=True), _Out("c")
    monkeypatch.setattr(registry, "OUTPUTS", [a, bad, c])
    line = registry.write_outputs(FinalData({}, [], None), str(tmp_path))
    assert line == f"locust-llm: cannot write {tmp_path}/x.json (No space left on device); the files after it were not written"
    assert (a.dirs, bad.dirs, c.dirs) == ([str(tmp_path)], [str(tmp_path)], [None])
    out = capsys.readouterr().out
    assert line in out and "report written" not in out
    assert registry.write_outputs(FinalData({}, [], None), str(tmp_path / "ok")) is not None  # bad fails again
    monkeypatch.setattr(registry, "OUTPUTS", [a, c])
    assert registry.write_outputs(FinalData({}, [], None), str(tmp_path)) is None
    assert f"locust-llm: report written to {tmp_path}/" in capsys.readouterr().out
