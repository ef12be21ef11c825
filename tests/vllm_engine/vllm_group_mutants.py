"""Negative controls for several KV cache groups: KVOffloadConnector whose worker loads only one
group's blocks of each chunk or skips the sliding-window groups' blocks, KVOffloadSpec whose worker
copies only the first group's blocks (the other group's blocks keep whatever the engine left in
them) or only the last group's, and both integrations with tiers whose namespace leaves the
groups' kinds out."""

from __future__ import annotations

from typing import Any

import torch

from kvoffload.offload.types import TransferJob
from kvoffload.vllm.connector import KVOffloadConnector
from kvoffload.vllm.kv_groups import VLLM_NULL_BLOCK
from kvoffload.vllm.spec import KVOffloadSpec


class OneGroupLoadConnector(KVOffloadConnector):
    """Loads only the blocks of group ``LOADED_GROUP``: every other group's block of a load job is
    replaced by the null block, which the worker skips."""

    LOADED_GROUP = 0

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        super().register_kv_caches(kv_caches)
        worker = self._worker().worker
        groups = self.config.kv_groups
        submit = worker._submit

        def one_group(job: TransferJob) -> Any:
            if job.kind == "load":
                blocks = tuple(
                    block if index % groups == self.LOADED_GROUP else VLLM_NULL_BLOCK
                    for index, block in enumerate(job.gpu_block_ids)
                )
                job = job._replace(gpu_block_ids=blocks)
            return submit(job)

        worker._submit = one_group  # type: ignore[method-assign]


class SecondGroupLoadConnector(OneGroupLoadConnector):
    LOADED_GROUP = 1


class WindowSkippingLoadConnector(KVOffloadConnector):
    """Marks the sliding-window groups' blocks of every load as loaded without loading them: the
    scheduler offers the hit and vLLM counts those blocks computed, but the worker's load job names
    the null block there, which it skips."""

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        super().register_kv_caches(kv_caches)
        worker = self._worker().worker
        groups = self.config.kv_groups
        window_groups = self.groups.volatile
        submit = worker._submit

        def without_windows(job: TransferJob) -> Any:
            if job.kind == "load":
                blocks = tuple(
                    VLLM_NULL_BLOCK if index % groups in window_groups else block
                    for index, block in enumerate(job.gpu_block_ids)
                )
                job = job._replace(gpu_block_ids=blocks)
            return submit(job)

        worker._submit = without_windows  # type: ignore[method-assign]


class FirstGroupSpec(KVOffloadSpec):
    """Copies only the first group's blocks of each job, stores and loads alike."""

    def get_worker(self, kv_caches: Any) -> Any:
        worker = super().get_worker(kv_caches)
        pairs = worker._pairs

        def first_group(gpu: Any, cpu: Any, job_id: int) -> tuple[list[int], list[int]]:
            gpu_ids, cpu_ids = pairs(gpu, cpu, job_id)
            first = gpu.group_sizes[0]
            return gpu_ids[:first], cpu_ids[:first]

        worker._pairs = first_group
        return worker


class LastGroupSpec(KVOffloadSpec):
    """Copies only the last group's blocks of each job (of a Mamba hybrid: the attention blocks,
    never the state)."""

    def get_worker(self, kv_caches: Any) -> Any:
        worker = super().get_worker(kv_caches)
        pairs = worker._pairs

        def last_group(gpu: Any, cpu: Any, job_id: int) -> tuple[list[int], list[int]]:
            gpu_ids, cpu_ids = pairs(gpu, cpu, job_id)
            last = gpu.group_sizes[-1]
            return gpu_ids[len(gpu_ids) - last :], cpu_ids[len(cpu_ids) - last :]

        worker._pairs = last_group
        return worker


class NoGroupLayoutConnector(KVOffloadConnector):
    """Names its tiers' namespace without the KV cache groups' kinds (``/g...``): engines of one
    model with other sliding windows then share their chunks in Redis."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.layout = self.layout.partition("/g")[0]


class NoGroupKindsSpec(KVOffloadSpec):
    """Names its tiers' namespace without the KV cache groups' kinds, as before they were named."""

    def tier_namespace_layout(self, group_kinds: tuple[str, ...]) -> str:
        return self.layout
