"""copy_timing's arithmetic on the CPU: CUDA streams and events replaced by host stand-ins that
run everything at once, so the rate, the slowdown and the interference run's job cap are checked
without a GPU (on one, the bench and the calibration use the real ones)."""

from __future__ import annotations

import contextlib
import math
import time

import pytest
import torch

from kvoffload.dataplane import copy_timing
from kvoffload.dataplane.copy_timing import ComputeLoop, Interference, copy_rate, interference


class HostEvent:
    """A CUDA event on the host: recording stamps the time; the work before it is already done
    unless ``done`` says otherwise (then ``query`` stays False, as for a long GPU loop)."""

    done = True

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        self.at = time.perf_counter()

    def query(self) -> bool:
        return HostEvent.done

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.at - self.at) * 1e3


@pytest.fixture
def host_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_timing.torch.cuda, "Event", HostEvent)
    monkeypatch.setattr(copy_timing.torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(copy_timing.torch.cuda, "synchronize", lambda: None)
    HostEvent.done = True


def test_slowdown_is_the_loops_extra_time() -> None:
    assert Interference(alone_s=0.020, beside_s=0.021, gbps=1.0).slowdown == pytest.approx(0.05)
    assert Interference(alone_s=0.020, beside_s=0.020, gbps=1.0).slowdown == 0.0


def test_copy_rate_counts_only_the_timed_jobs_and_their_submit_cpu(host_cuda: None) -> None:
    calls: list[str] = []
    rate = copy_rate(lambda: calls.append("submit"), lambda: calls.append("drain"), 1_000_000, 4)
    assert calls == ["submit", "drain"] + ["submit"] * 4 + ["drain"]  # one warm-up job, then four
    assert rate.gbps > 0 and rate.submit_cpu_s >= 0


def test_the_compute_loop_sizes_itself_and_runs_its_steps(host_cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = ComputeLoop(torch.device("cpu"), 4, 8, stream=None)  # type: ignore[arg-type]
    matmuls: list[int] = []
    real = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda *a, **k: (matmuls.append(1), real(*a, **k))[1])
    loop.size_to(0.0)
    assert loop.steps == 1
    matmuls.clear()
    loop.steps = 5
    start, end = loop.enqueue()
    assert len(matmuls) == 5 and end.at >= start.at


def test_interference_submits_until_the_loop_ends(host_cuda: None) -> None:
    loop = ComputeLoop(torch.device("cpu"), 4, 8, stream=None)  # type: ignore[arg-type]
    submitted: list[int] = []
    result = interference(lambda: submitted.append(1), lambda: None, 1000, loop, job_seconds=1.0)
    # The host loop is done as soon as it is enqueued: one job before it, none after.
    assert submitted == [1]
    assert result.alone_s >= 0 and result.beside_s >= 0 and result.gbps > 0


def test_interference_queues_at_most_what_covers_one_and_a_half_loops(
    host_cuda: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = ComputeLoop(torch.device("cpu"), 4, 8, stream=None)  # type: ignore[arg-type]
    monkeypatch.setattr(loop, "alone_seconds", lambda: 0.010)
    HostEvent.done = False  # the loop never ends: only the cap stops the submissions
    submitted: list[int] = []
    interference(lambda: submitted.append(1), lambda: None, 1000, loop, job_seconds=0.001)
    assert len(submitted) == math.ceil(1.5 * 0.010 / 0.001) + 1
