"""Load verification (``verify_loads``): every loaded block is checked against the digest of what
the tier holds for its key, so a wrong load raises DataIntegrity instead of changing outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvoffload.dataplane.integrity import DataIntegrity, LoadVerifier, block_digest
from kvoffload.dataplane.mover import BlockMover
from kvoffload.offload.types import ConnectorMetadata, TransferJob
from kvoffload.tiers.protocol import TierJob
from kvoffload.tiers.record import Namespace
from kvoffload.vllm.connector.worker_side import WorkerSide, make_worker
from kvoffload.vllm.settings import ConfigError, flag
from kvoffload.vllm.tier_io import LayerChunks, WorkerTiers, open_backends
from kvoffload.vllm.tier_settings import FileTierSettings, TierSettings

GPU_BLOCKS = 8
BPC = 2
KEY_A, KEY_B = 0xA1, 0xB2


def _layers() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(GPU_BLOCKS, 4, 8, generator=generator) for _ in range(2)]


def _worker_side(layers: list[torch.Tensor], verify: bool = True) -> WorkerSide:
    return make_worker(BlockMover(layers, 4 * BPC), BPC, verify)


def _store(step: int = 1) -> ConnectorMetadata:
    # Chunks 0 and 1 of request r: GPU blocks 0-3 into CPU chunks 2 and 3 (mover blocks 4-7).
    job = TransferJob(1, "r", "store", (KEY_A, KEY_B), (0, 1, 2, 3), (2, 3))
    return ConnectorMetadata(step, stores=(job,))


def _load(gpu: tuple[int, ...] = (4, 5, 6, 7), keys: tuple[int, ...] = (KEY_A, KEY_B)) -> ConnectorMetadata:
    return ConnectorMetadata(2, loads=(TransferJob(2, "q", "load", keys, gpu, (2, 3)),))


def test_a_round_trip_is_checked_and_passes() -> None:
    layers = _layers()
    side = _worker_side(layers)
    side.execute(_store(), ())
    side.execute(_load(), ())
    assert side.verifier is not None and side.verifier.checked_blocks == 4
    assert all(torch.equal(layer[0:4], layer[4:8]) for layer in layers)
    assert side.take_completed() == {1: True, 2: True}


def test_a_corrupted_tier_raises_naming_request_key_and_blocks() -> None:
    layers = _layers()
    side = _worker_side(layers)
    side.execute(_store(), ())
    side.worker.mover.cpu_layers[1][6, 0, 0] += 1.0  # mover block 6: chunk 3's first block (KEY_B)
    with pytest.raises(DataIntegrity) as caught:
        side.execute(_load(), ())
    message = str(caught.value)
    assert "request 'q'" in message and f"key {KEY_B:#x}" in message
    assert "GPU block 6 from CPU block 6" in message and "differ" in message


def test_a_load_into_the_wrong_gpu_block_is_caught() -> None:
    layers = _layers()
    side = _worker_side(layers)
    side.execute(_store(), ())
    mover = side.worker.mover
    right_load = mover.load
    # A mover that writes the blocks rotated by one: the engine would compute on wrong KV.
    mover.load = lambda job_id, cpu, gpu: right_load(job_id, cpu, [*gpu[1:], gpu[0]])  # type: ignore[method-assign]
    with pytest.raises(DataIntegrity, match="GPU block 4 from CPU block 4"):
        side.execute(_load(), ())


def test_a_load_naming_another_key_is_caught() -> None:
    side = _worker_side(_layers())
    side.execute(_store(), ())
    with pytest.raises(DataIntegrity, match=f"stored for key {KEY_A:#x}"):
        side.execute(_load(keys=(0xC3, KEY_B)), ())


def test_a_load_of_a_failed_or_missing_store_is_caught() -> None:
    layers = _layers()
    verifier = LoadVerifier(layers, [layer.clone() for layer in layers])
    with pytest.raises(DataIntegrity, match="holds no completed store"):
        verifier.loaded("load job 9", "q", [1], [1], [None])
    verifier.stored([1], [KEY_A])
    verifier.loaded("load job 9", "q", [1], [1], [KEY_A])
    verifier.store_failed([1])
    with pytest.raises(DataIntegrity, match="holds no completed store"):
        verifier.loaded("load job 10", "q", [1], [1], [KEY_A])


def test_without_verification_nothing_is_recorded_and_a_wrong_load_passes() -> None:
    side = _worker_side(_layers(), verify=False)
    side.execute(_store(), ())
    side.worker.mover.cpu_layers[1][6, 0, 0] += 1.0
    side.execute(_load(), ())
    assert side.verifier is None and side.take_completed() == {1: True, 2: True}


def test_the_digest_covers_every_layer_and_dtype() -> None:
    layers = [torch.zeros(2, 3, dtype=torch.bfloat16), torch.zeros(2, 5, dtype=torch.int8)]
    before = block_digest(layers, 1)
    layers[1][1, 4] = 1
    assert block_digest(layers, 1) != before
    assert block_digest(layers, 0) == block_digest([torch.zeros(2, 3, dtype=torch.bfloat16), layers[1]], 0)


@pytest.mark.parametrize("value", ["true", 1, None])
def test_a_flag_that_is_not_a_boolean_is_refused_in_one_line(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        flag({"verify_loads": value}, "verify_loads")
    assert str(caught.value) == f"kv_connector_extra_config['verify_loads'] must be true or false, got {value!r}"
    assert flag({}, "verify_loads") is False and flag({"verify_loads": True}, "verify_loads") is True


def test_a_flag_takes_its_default_when_absent() -> None:
    assert flag({}, "cpu_kernel", default=True) is True
    assert flag({"cpu_kernel": False}, "cpu_kernel", default=True) is False
    with pytest.raises(ConfigError) as caught:
        flag({"cpu_kernel": "no"}, "cpu_kernel", default=True)
    assert str(caught.value) == "kv_connector_extra_config['cpu_kernel'] must be true or false, got 'no'"


def _tier_steps(
    side: WorkerSide, tiers: WorkerTiers, steps: list[tuple[ConnectorMetadata, list[TierJob]]]
) -> None:
    """Run metadata steps as KVOffloadConnector._execute does: the transfers, then the tier jobs,
    the collected promotions told to the verifier."""
    for metadata, tier_jobs in steps:
        side.execute(metadata, ())
        for job, outcome in tiers.run(tier_jobs, metadata.step):
            side.promoted(job, outcome.results)


def _file_tiers(side: WorkerSide, tmp_path: Path) -> WorkerTiers:
    chunks = LayerChunks(side.worker.mover.cpu_layers, BPC)
    settings = TierSettings(file=FileTierSettings(str(tmp_path / "kv.tier"), 1 << 20))
    return WorkerTiers(open_backends(settings, chunks.chunk_bytes, 4, Namespace("m", "l"), writer=1), chunks)


def test_a_load_from_a_promoted_chunk_in_a_reused_cpu_block_is_checked_and_passes(tmp_path: Path) -> None:
    # The fuzzer's false DataIntegrity with a file tier: KEY_A is cascaded to the file tier, then
    # evicted; its promotion lands in CPU chunk 3, which held KEY_B; the load must check against
    # KEY_A's promoted bytes, not against the store of KEY_B that chunk 3 held before.
    layers = _layers()
    side = _worker_side(layers)
    tiers = _file_tiers(side, tmp_path)
    try:
        _tier_steps(side, tiers, [
            (_store(1), []),
            (ConnectorMetadata(2), [TierJob(1, "cascade", "file", "r", (KEY_A,), (2,), (0,))]),
            (ConnectorMetadata(3), [TierJob(2, "promote", "file", "q", (KEY_A,), (3,), (0,))]),
            (ConnectorMetadata(4), []),
            (ConnectorMetadata(5, loads=(TransferJob(3, "q", "load", (KEY_A,), (6, 7), (3,)),)), []),
        ])
    finally:
        tiers.close()
    assert side.verifier is not None and side.verifier.checked_blocks == 2
    assert all(torch.equal(layer[6:8], layer[0:2]) for layer in layers)


def test_the_blocks_of_an_unserved_promotion_cannot_be_loaded(tmp_path: Path) -> None:
    # Only the leading verified chunks are served: KEY_B's block of a promotion whose first chunk
    # missed is freed by the CPU tier, so a load from it is wrong even though its bytes landed.
    side = _worker_side(_layers())
    tiers = _file_tiers(side, tmp_path)
    try:
        _tier_steps(side, tiers, [
            (_store(1), []),
            (ConnectorMetadata(2), [TierJob(1, "cascade", "file", "r", (KEY_B,), (3,), (1,))]),
            (ConnectorMetadata(3), [TierJob(2, "promote", "file", "q", (0xC3, KEY_B), (0, 1), (0, 1))]),
            (ConnectorMetadata(4), []),
        ])
        with pytest.raises(DataIntegrity, match="CPU block 2, which holds no completed store"):
            side.execute(ConnectorMetadata(5, loads=(TransferJob(3, "q", "load", (KEY_B,), (6, 7), (1,)),)), ())
    finally:
        tiers.close()
