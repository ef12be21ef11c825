"""The worker side of :class:`~kvoffload.vllm.connector.KVOffloadConnector`: kvoffload's
OffloadingWorker and BlockMover on the engine's KV tensors.

Per step the whole metadata runs in ``handle_preemptions``, which vLLM calls before the forward
pass: the flush (stores reading blocks the engine is about to reuse), then the stores, then the
loads, in kvoffload's order. vLLM starts asynchronous loads only after the forward, which would
be too late for a flush. Outcomes go back three ways: every job's outcome to the scheduler side
(worker metadata), loads as ``finished_recving`` (a failed one also through
``get_block_ids_with_load_errors``), and the releases the scheduler side decided as
``finished_sending``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from kvoffload.dataplane.integrity import LoadVerifier
from kvoffload.dataplane.mover import BlockMover
from kvoffload.dataplane.worker import OffloadingWorker, chunk_blocks
from kvoffload.offload.types import ConnectorMetadata, JobId, RequestId, TransferJob
from kvoffload.tiers.protocol import OK, TierJob


def block_tensors(
    kv_caches: Mapping[str, torch.Tensor], layer_names: list[str], num_blocks: int, page_bytes: int
) -> list[torch.Tensor]:
    """Each layer's KV cache as ``(num_blocks, page_bytes)`` bytes, one row per engine block
    (layers that share memory once)."""
    from vllm.v1.kv_cache_interface import group_kernel_blocks

    tensors: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}
    for name in layer_names:
        ref = group_kernel_blocks(kv_caches[name], num_blocks)
        size = ref.element_size()
        view = torch.tensor([], dtype=torch.int8, device=ref.device).set_(
            ref.untyped_storage(), ref.storage_offset() * size, (num_blocks, page_bytes), (ref.stride(0) * size, 1)
        )
        if not view.is_contiguous():
            raise ValueError(
                f"layer {name}: blocks are {ref.stride(0) * size} bytes apart but hold {page_bytes} bytes; "
                "KVOffloadConnector needs each block's page contiguous"
            )
        tensors.setdefault((view.data_ptr(), view.stride()), view)
    return list(tensors.values())


class WorkerSide:
    """Runs the scheduler side's metadata and collects what vLLM and the scheduler must hear;
    with a ``verifier``, checks every completed load against what was stored for its keys."""

    def __init__(self, worker: OffloadingWorker, verifier: LoadVerifier | None = None) -> None:
        self.worker = worker
        self.verifier = verifier
        # Jobs whose completion the verifier must see (only with a verifier).
        self._verified_jobs: dict[JobId, TransferJob] = {}
        self._completed: dict[JobId, bool] = {}
        self._loads: dict[JobId, tuple[RequestId, tuple[int, ...]]] = {}
        self._sent: set[RequestId] = set()
        self._load_errors: set[int] = set()
        self.executed_step = -1

    def execute(self, metadata: ConnectorMetadata, released: tuple[RequestId, ...]) -> None:
        """Run one step's metadata (once, however often vLLM hands it over)."""
        if metadata.step == self.executed_step:
            return
        self.executed_step = metadata.step
        for job in metadata.loads:
            self._loads[job.job_id] = (job.request_id, job.gpu_block_ids)
        if self.verifier is not None:
            for job in (*metadata.stores, *metadata.loads):
                self._verified_jobs[job.job_id] = job
        self._record(self.worker.execute(metadata).completed)
        self._sent.update(released)

    def _record(self, completed: Mapping[JobId, bool]) -> None:
        if self.verifier is not None:
            for job_id, ok in completed.items():
                job = self._verified_jobs.pop(job_id, None)
                if job is not None:
                    self._verify(self.verifier, job, ok)
        self._completed.update(completed)

    def _verify(self, verifier: LoadVerifier, job: TransferJob, ok: bool) -> None:
        bpc = self.worker.blocks_per_chunk
        cpu_blocks = chunk_blocks(job.cpu_block_ids, bpc)
        keys = [key for key in job.keys for _ in range(bpc)]
        if job.kind == "store":
            if ok:
                verifier.stored(cpu_blocks, keys)
            else:
                verifier.store_failed(cpu_blocks)
        elif ok:
            # A load copies nothing into the null block (a group's block out of its window).
            loaded = [i for i, gpu in enumerate(job.gpu_block_ids) if gpu != self.worker.null_block]
            verifier.loaded(
                f"load job {job.job_id}", job.request_id, [cpu_blocks[i] for i in loaded],
                [job.gpu_block_ids[i] for i in loaded], [keys[i] for i in loaded],
            )

    def promoted(self, job: TierJob, results: Sequence[str]) -> None:
        """A promotion's outcome was collected: its chunks were scattered into its CPU blocks.

        The CPU tier serves its leading verified chunks (``TieringManager._finish_promotion``):
        for the verifier those blocks now hold their promoted keys, as if stored; the other blocks
        are freed and must not be loaded from. Without this the verifier would still name what the
        block held before the CPU tier evicted it and reused it for the promotion.
        """
        if self.verifier is None:
            return
        served = 0
        while served < len(results) and results[served] == OK:
            served += 1
        bpc = self.worker.blocks_per_chunk
        self.verifier.stored(
            chunk_blocks(job.cpu_block_ids[:served], bpc), [key for key in job.keys[:served] for _ in range(bpc)]
        )
        self.verifier.store_failed(chunk_blocks(job.cpu_block_ids[served:], bpc))

    def finished(self) -> tuple[set[RequestId], set[RequestId]]:
        """(finished_sending, finished_recving) since the last call."""
        self._record(self.worker.poll().completed)
        recving: set[RequestId] = set()
        for job_id, ok in self._completed.items():
            load = self._loads.pop(job_id, None)
            if load is None:
                continue
            request_id, gpu_block_ids = load
            recving.add(request_id)
            if not ok:
                self._load_errors.update(block for block in gpu_block_ids if block != self.worker.null_block)
        sending, self._sent = self._sent, set()
        return sending, recving

    def state_fingerprint(self) -> str:
        """What a state-space search must tell apart: the outcomes, loads, releases and failed
        blocks not yet reported to vLLM."""
        return repr((self._completed, self._loads, sorted(self._sent), sorted(self._load_errors)))

    def take_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def take_completed(self) -> dict[JobId, bool]:
        completed, self._completed = self._completed, {}
        return completed

    def shutdown(self) -> None:
        self.worker.mover.close()


def make_worker(
    mover: BlockMover, blocks_per_chunk: int, verify_loads: bool = False, null_block: int | None = None
) -> WorkerSide:
    """A worker side on ``mover`` (whose GPU layers are the engine's block tensors);
    ``blocks_per_chunk``: GPU blocks per chunk (every KV cache group's); ``verify_loads``: check
    every load against the digests of what was stored; ``null_block``: the engine's placeholder
    block, never loaded into."""
    verifier = LoadVerifier(mover.gpu_layers, mover.cpu_layers) if verify_loads else None
    return WorkerSide(OffloadingWorker(mover, blocks_per_chunk, null_block), verifier)
