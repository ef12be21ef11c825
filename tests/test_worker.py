"""The worker: metadata order, chunk-to-mover block mapping, failures; the torch-backed simulator."""

from __future__ import annotations

import pytest
import torch

from kvoffload.dataplane.mover import BlockMover
from kvoffload.dataplane.worker import OffloadingWorker
from kvoffload.offload.types import ConnectorMetadata, TransferJob
from kvoffload_lab.sim.engine import Engine, EngineConfig
from kvoffload_lab.sim.runner import SimulationOptions, simulate
from kvoffload_lab.sim.torch_backend import TorchBackend, block_pattern
from support import NoFenceScheduler


def layers(num_blocks: int = 8) -> list[torch.Tensor]:
    return [
        torch.arange(num_blocks * 6, dtype=torch.float16).reshape(num_blocks, 2, 3) + 1000 * layer
        for layer in range(2)
    ]


def job(job_id: int, kind: str, gpu: tuple[int, ...], cpu: tuple[int, ...]) -> TransferJob:
    return TransferJob(job_id, "r", kind, tuple(range(len(cpu))), gpu, cpu)  # type: ignore[arg-type]


def test_store_then_load_round_trips_chunks_of_two_blocks() -> None:
    gpu = layers()
    original = [layer.clone() for layer in gpu]
    worker = OffloadingWorker(BlockMover(gpu, num_cpu_blocks=8), blocks_per_chunk=2)
    out = worker.execute(ConnectorMetadata(1, stores=(job(1, "store", (0, 1, 4, 5), (3, 0)),)))
    assert dict(out.completed) == {1: True}
    for layer in gpu:
        layer.zero_()
    out = worker.execute(ConnectorMetadata(2, loads=(job(2, "load", (6, 7, 2, 3), (3, 0)),)))
    assert dict(out.completed) == {2: True}
    for layer, before in zip(gpu, original, strict=True):
        assert torch.equal(layer[6], before[0]) and torch.equal(layer[7], before[1])
        assert torch.equal(layer[2], before[4]) and torch.equal(layer[3], before[5])
    assert worker.in_flight() == set()
    assert worker.bytes_moved == 2 * 4 * 2 * 6 * 2  # two jobs x four blocks x two layers x 6 fp16
    # Per direction too (the connector's vllm:kv_offload_{store,load}_{bytes,time}).
    assert worker.moved_bytes == {"store": 4 * 2 * 6 * 2, "load": 4 * 2 * 6 * 2}
    assert worker.moved_seconds["store"] > 0 and worker.moved_seconds["load"] > 0


def test_flush_is_waited_for_before_new_jobs_are_submitted() -> None:
    order: list[str] = []

    class RecordingMover(BlockMover):
        def wait(self, job_ids) -> None:  # type: ignore[no-untyped-def]
            order.append(f"wait {sorted(job_ids)}")
            super().wait(job_ids)

        def store(self, job_id: int, gpu_block_ids, cpu_block_ids) -> None:  # type: ignore[no-untyped-def]
            order.append(f"store {job_id}")
            super().store(job_id, gpu_block_ids, cpu_block_ids)

        def load(self, job_id: int, cpu_block_ids, gpu_block_ids) -> None:  # type: ignore[no-untyped-def]
            order.append(f"load {job_id}")
            super().load(job_id, cpu_block_ids, gpu_block_ids)

        def poll(self):  # type: ignore[no-untyped-def]
            return [] if len(order) < 4 else super().poll()

    worker = OffloadingWorker(RecordingMover(layers(), num_cpu_blocks=8), blocks_per_chunk=1)
    worker.execute(ConnectorMetadata(1, stores=(job(1, "store", (0,), (0,)),)))
    out = worker.execute(
        ConnectorMetadata(2, flush=(1, 99), stores=(job(2, "store", (1,), (1,)),), loads=(job(3, "load", (2,), (0,)),))
    )
    assert order == ["store 1", "wait [1]", "store 2", "load 3"]
    assert dict(out.completed) == {1: True, 2: True, 3: True}


def test_a_failed_copy_is_reported_failed() -> None:
    mover = BlockMover(layers(), num_cpu_blocks=8, fault_injector=lambda job_id, direction: job_id == 2)
    worker = OffloadingWorker(mover, blocks_per_chunk=1)
    out = worker.execute(
        ConnectorMetadata(1, stores=(job(1, "store", (0,), (0,)), job(2, "store", (1,), (1,))))
    )
    assert dict(out.completed) == {1: True, 2: False}
    assert worker.failed_jobs == 1
    assert worker.moved_bytes == {"store": 1 * 2 * 6 * 2, "load": 0}, "a failed job moved nothing"


def test_a_job_whose_blocks_do_not_make_whole_chunks_is_rejected_before_copying() -> None:
    gpu = layers()
    worker = OffloadingWorker(BlockMover(gpu, num_cpu_blocks=8), blocks_per_chunk=2)
    cpu_before = [layer.clone() for layer in worker.mover.cpu_layers]
    with pytest.raises(ValueError, match="store job 5 of request 'r': 3 GPU blocks for 2 chunks of 2 blocks"):
        worker.execute(ConnectorMetadata(1, stores=(job(5, "store", (0, 1, 2), (0, 1)),)))
    assert worker.in_flight() == set()
    for layer, before in zip(worker.mover.cpu_layers, cpu_before, strict=True):
        assert torch.equal(layer.view(torch.uint8), before.view(torch.uint8))


def test_block_patterns_differ_per_content_and_layer() -> None:
    a = block_pattern(12345, 256, 0)
    assert torch.equal(a, block_pattern(12345, 256, 0))
    assert not torch.equal(a, block_pattern(12346, 256, 0))
    assert not torch.equal(a, block_pattern(12345, 256, 1))
    assert not torch.equal(a, block_pattern(12345 + (1 << 40), 256, 0))


@pytest.mark.parametrize("faults", [0.0, 0.05])
def test_simulator_on_real_tensors_checks_every_loaded_block(faults: float) -> None:
    result = simulate(SimulationOptions(users=10, turns=3, faults=faults, backend="torch"))
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0), result
    assert result["integrity_checked_blocks"] > 0
    if faults:
        assert result["store_failures"] + result["load_failures"] > 0


def test_reset_cache_during_real_transfers_leaves_intact_bytes() -> None:
    result = simulate(SimulationOptions(users=24, turns=4, seed=3, faults=0.05, backend="torch"))
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0), result
    assert result["resets"] > 0 and result["stale_completions"] > 0, "a reset hit transfers in flight"


def test_a_store_reading_a_rewritten_block_is_caught_byte_for_byte() -> None:
    config = EngineConfig(num_gpu_blocks=12, num_cpu_blocks=64, job_delay_steps=2, max_running=6, policy="lru")
    scheduler = NoFenceScheduler(config.offload_config())
    engine = Engine(config, scheduler=scheduler, backend=TorchBackend.for_engine(config))
    for user in range(8):
        engine.add_request([user * 1000 + t for t in range(40)], max_tokens=40)
    for _ in range(600):
        if engine.idle:
            break
        engine.step()
    assert engine.stats.integrity_failures > 0, "a corrupted block was loaded back and detected"
