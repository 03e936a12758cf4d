"""bench/worker_scaling.py: the step rule, the simulator's lateness and the cores' bound."""

from __future__ import annotations

import pytest

from bench.worker_scaling import cpu_bound, sim_first_late_ms, sustained


def test_a_step_holds_on_chunks_and_the_ttft_error_bound() -> None:
    assert sustained(9_700, 10_000, 4.99, 5.0)
    assert not sustained(9_699, 10_000, 0.1, 5.0)  # under 97 % of the offered chunks
    assert not sustained(10_000, 10_000, 5.0, 5.0)  # the bound is strict, as the ceiling's
    assert not sustained(10_000, 10_000, None, 5.0)  # no first token in the window: not held
    assert sustained(10_000, 10_000, 0.99, 1.0) and not sustained(10_000, 10_000, 1.01, 1.0)


def test_simulator_lateness_is_its_first_write_minus_its_absolute_target() -> None:
    ms = 1_000_000
    trace = [  # ttft_target_ns is absolute (arrival + TTFT), as the simulator's lifecycle sets it
        {"times_ns": [1_000 * ms + k * ms, 1_050 * ms], "tokens": [1, 1], "ttft_target_ns": 1_000 * ms}
        for k in range(100)
    ]
    trace.append({"times_ns": [5_000 * ms], "tokens": [1], "ttft_target_ns": 4_000 * ms})  # outside the window
    trace.append({"times_ns": [900 * ms, 1_010 * ms], "tokens": [0, 1], "ttft_target_ns": 1_000 * ms})  # role chunk first
    late = sim_first_late_ms(trace, 0, 2_000 * ms)
    assert late == pytest.approx(98.0)  # nearest-rank p99 of 0..99 ms and 10 ms
    assert sim_first_late_ms(trace, 4_500 * ms, 6_000 * ms) == pytest.approx(1_000.0)
    assert sim_first_late_ms([], 0, 1) is None


def test_the_cores_bound_is_cores_over_the_cost_per_chunk() -> None:
    # 15 us client + 10 us simulator per chunk: 2 cores carry 80,000 chunks/s
    assert cpu_bound(2, 15.0, 10.0) == pytest.approx(80_000)
    assert cpu_bound(1, 20.0, 0.0) == pytest.approx(50_000)
    assert cpu_bound(2, None, 10.0) is None and cpu_bound(2, 15.0, None) is None
