"""vLLM's own CPU offloading manager (its LRU or ARC) with a worker that runs on vLLM's CPU platform.

vLLM 0.32's ``CPUOffloadingSpec`` refuses to build its worker unless the platform is CUDA-alike or
XPU (``get_worker`` raises "CPU Offloading is currently only supported on CUDA-alike and XPU
GPUs"): its ``CPUOffloadingWorker`` copies with CUDA streams and pinned or mmap'd host memory.
:class:`VllmOwnCPUSpec` keeps everything of vLLM's spec on the scheduler side (its
``CPUOffloadingManager`` with ``eviction_policy`` ``lru`` or ``arc``, picked by vLLM's
``CachePolicyFactory``) and replaces only the worker, as
:class:`~kvoffload_lab.vllm.offloading.repro_double_reset_engine.TorchCopyCPUSpec` does, which it extends:
kvoffload's :class:`~kvoffload.vllm.spec.mover_worker.MoverWorker` on a torch-copy
:class:`~kvoffload.dataplane.mover.BlockMover`, which executes the same ``CPULoadStoreSpec`` jobs.

The CPU tier's size is ``num_cpu_blocks`` chunks, given directly rather than through
``cpu_bytes_to_use``, so that vLLM's manager has exactly as many chunks as kvoffload's.

Loaded by vLLM's ``OffloadingSpecFactory`` by module name, so the ``scripts/measure/`` directory must be on
``sys.path`` (it is when a script in ``scripts/measure/`` runs).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.kv_offload.config import OffloadingConfig

from kvoffload.vllm.settings import ConfigError
from kvoffload_lab.vllm.offloading.repro_double_reset_engine import TorchCopyCPUSpec

VLLM_POLICIES = ("lru", "arc")


class VllmOwnCPUSpec(TorchCopyCPUSpec):
    """vLLM's ``CPUOffloadingSpec`` with its manager unchanged, kvoffload's mover as worker and
    ``num_cpu_blocks`` chunks."""

    def __init__(self, config: OffloadingConfig) -> None:
        super().__init__(config)
        chunks = int(self.extra_config.get("num_cpu_blocks", 0))
        if chunks < 1:
            raise ConfigError(f"kv_connector_extra_config['num_cpu_blocks'] = {chunks}: need >= 1")
        # Replaces vLLM's byte-derived count before get_manager() reads it.
        self.num_chunks = chunks


def vllm_own_transfer_config(num_cpu_blocks: int, policy: str) -> dict[str, Any]:
    """``kv_transfer_config`` for vLLM's ``OffloadingConnector`` with :class:`VllmOwnCPUSpec` and
    vLLM's ``policy`` (``lru`` or ``arc``)."""
    if policy not in VLLM_POLICIES:
        raise ConfigError(f"vLLM's own eviction_policy {policy!r}: known {', '.join(VLLM_POLICIES)}")
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_module_path": __name__,
            "spec_name": VllmOwnCPUSpec.__name__,
            "num_cpu_blocks": num_cpu_blocks,
            # vLLM's __init__ requires a non-zero byte budget; num_cpu_blocks overrides its count.
            "cpu_bytes_to_use": 1,
            "eviction_policy": policy,
        },
    }
