"""vLLM's in-memory ``example`` secondary tier, made to keep the bytes it is given.

vLLM's ``ExampleSecondaryTierManager`` records only which keys it holds: a promotion back into the
primary tier "succeeds" without writing a byte, so the engine would compute on whatever the CPU
chunk held before. This subclass keeps vLLM's bookkeeping (its lookups, job results and timing
are the parent's) and copies each chunk's bytes out of the primary tier on a store and back into
it on a load, so the live check's ``DataIntegrity`` and token comparison test vLLM's tiering
manager and not the example tier's shortcut. :mod:`kvoffload_lab.vllm.offloading.live.offloading_spec` registers it with
vLLM's tier factory as ``{"type": "ByteKeepingTier"}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from vllm.v1.kv_offload.tiering.example.manager import ExampleSecondaryTierManager


def _chunk_ids(job: Any) -> list[int]:
    # vLLM 0.27 renamed the job's block_ids to chunk_ids.
    ids = getattr(job, "chunk_ids", None)
    return [int(i) for i in (job.block_ids if ids is None else ids)]


class ByteKeepingTier(ExampleSecondaryTierManager):
    """The example tier with a copy of each stored chunk."""

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str, **kwargs: Any) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, **kwargs)
        # (num_chunks, chunk_bytes), backed by the primary tier's shared region.
        self._primary = np.asarray(primary_kv_view)
        self._payloads: dict[bytes, bytes] = {}

    def submit_store(self, job_metadata: Any) -> None:
        for key, chunk in zip(job_metadata.keys, _chunk_ids(job_metadata), strict=True):
            self._payloads[key] = self._primary[chunk].tobytes()
        super().submit_store(job_metadata)

    def submit_load(self, job_metadata: Any) -> None:
        for key, chunk in zip(job_metadata.keys, _chunk_ids(job_metadata), strict=True):
            payload = self._payloads.get(key)
            if payload is not None:
                self._primary[chunk] = np.frombuffer(payload, dtype=self._primary.dtype)
        super().submit_load(job_metadata)
