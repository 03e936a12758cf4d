"""heap.py: glibc's mmap threshold fixed at start, so large transient buffers are unmapped on
free instead of fragmenting the heap (issue 10: a worker's RSS grew while its Python heap was flat)."""

from __future__ import annotations

import ctypes
import sys

import pytest

from llm_users.health import heap


class FakeMallopt:
    def __init__(self, calls: list[tuple[int, int]]) -> None:
        self.calls = calls

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.mallopt = FakeMallopt(self.calls)


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> FakeLibc:
    fake = FakeLibc()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv(heap.ENV, raising=False)
    return fake


def test_sets_a_fixed_mmap_threshold(libc: FakeLibc) -> None:
    assert heap.fix_mmap_threshold() is True
    assert libc.calls == [(heap.M_MMAP_THRESHOLD, 64 * 1024)]  # M_MMAP_THRESHOLD: no dynamic raise


def test_off_and_other_platforms_leave_malloc_alone(libc: FakeLibc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(heap.ENV, "off")
    assert heap.fix_mmap_threshold() is False
    monkeypatch.delenv(heap.ENV)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert heap.fix_mmap_threshold() is False
    assert libc.calls == []


def test_no_mallopt_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(name: str) -> None:
        raise OSError("no libc")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv(heap.ENV, raising=False)
    assert heap.fix_mmap_threshold() is False


def test_the_real_call_succeeds_on_glibc() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc only")
    assert heap.fix_mmap_threshold() in (True, False)  # never raises; True on glibc


def test_load_generating_roles_and_the_simulator_fix_it() -> None:
    import inspect

    from llm_users import run
    from llm_users.sim import cli

    assert "fix_mmap_threshold()" in inspect.getsource(run.LLMRun.__init__)
    assert "fix_mmap_threshold()" in inspect.getsource(cli.serve)
