"""benchmarks/tf_graph_timer.py: the timing loop TensorFlow's side of the single-request benchmarks uses."""

from __future__ import annotations

import time

from benchmarks.tf_graph_timer import time_calls


def test_time_calls_reports_the_median_call_and_its_cpu_time():
    calls = []

    def sleep_1ms() -> None:
        calls.append(1)
        time.sleep(0.001)  # wall time, almost no CPU time

    got = time_calls(sleep_1ms, warm_up=2, cpu_seconds=0.02)
    assert set(got) == {"ms", "cpu_ms"}
    assert got["ms"] >= 0.9  # never below the sleep
    assert 0 <= got["cpu_ms"] < got["ms"]  # a sleeping call costs less CPU than wall time
    # warm-up, then samples of at least 50 ms each: 7 of them take over 350 calls of ~1 ms
    assert len(calls) >= 2 + 7 * 40


def test_time_calls_measures_cpu_of_busy_calls():
    def spin_1ms() -> None:
        end = time.process_time() + 0.001
        while time.process_time() < end:
            pass

    got = time_calls(spin_1ms, warm_up=0, cpu_seconds=0.02)
    assert got["cpu_ms"] >= 0.9  # every call burns at least 1 ms of CPU
