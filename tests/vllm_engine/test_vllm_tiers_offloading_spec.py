"""Secondary tiers behind KVOffloadSpec (vLLM's own OffloadingConnector) in a real vLLM engine
(``make check-vllm-tiers``).

The same workload as ``test_vllm_tiers.py``: a 16-chunk LRU CPU tier that a flood of twelve
unrelated prompts empties, so a 320-token prompt's re-run can only come back from the file or
Redis tier. vLLM's OffloadingConnector loads every chunk of a cached prompt (320 tokens; it
recomputes the last token itself). Every output must equal the run without offloading, token for
token, and the tier must have served the re-run: the tiering manager's promotion counters and
vLLM's ``vllm:external_prefix_cache_hits``. The tier I/O runs in the scheduler process on the
worker's CPU pool in /dev/shm; with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` both are one process
here (``test_vllm_tiers_tp.py`` runs the scheduler and two workers in three processes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")
pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")
pytest.importorskip("redis", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")

from test_vllm_tiers import (
    BLOCK_SIZE,
    CPU_CHUNKS,
    FILE_TIER_BYTES,
    FLOODS,
    PASSWORD,
    PROMPT_TOKENS,
    REUSED,
    Run,
    another_deployments_values_and_a_rotated_password,
    cluster,
    expected,
    model_dir,
    redis_cluster_with_a_slot_migration_and_a_killed_master,
    redis_password,
    second_engine_served,
)

from kvoffload_lab.redis_server import LocalRedisCluster, RedisServer
from kvoffload_lab.vllm.common.engine import spec_transfer_config
from redis_servers import running_server

# vLLM's OffloadingConnector loads a cached prompt's every chunk.
SERVED = PROMPT_TOKENS
SERVED_CHUNKS = SERVED // BLOCK_SIZE

# The model, the run without offloading and the servers' fixtures, shared with the connector's tier tests.
__all__ = ["cluster", "expected", "model_dir", "redis_password"]


def _pools() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("kvoffload-pool-")}


@pytest.mark.slow
def test_spec_file_tier_serves_and_survives_truncation(model_dir: Path, expected: dict, tmp_path: Path) -> None:
    path = tmp_path / "kv.tier"
    pools_before = _pools()
    run = Run(model_dir, {"file_tier": {"path": str(path), "size_bytes": FILE_TIER_BYTES}}, expected, spec=True)
    try:
        # The scheduler side mapped the worker's pool and removed its name: nothing left in /dev/shm.
        assert _pools() == pools_before
        assert run.rerun(REUSED[0], FLOODS[0]) == SERVED, "the re-run was not served from the file tier"
        served = run.tiers()["file"]["promoted_keys"]
        assert served >= SERVED_CHUNKS
        assert run.external_hits() >= SERVED
        # Truncated while the engine runs: the chunks' reads come back short, never served.
        os.truncate(path, 0)
        run.batch(FLOODS[1])
        assert run.batch([REUSED[0]])[0] < SERVED
        assert run.tiers()["file"]["checksum_failures"] >= 1
        # Chunks cascaded after the truncation are served again.
        assert run.rerun(REUSED[1], FLOODS[2]) == SERVED
        assert run.tiers()["file"]["promoted_keys"] >= served + SERVED_CHUNKS
    finally:
        violations, leaks = run.close()
    assert violations == [] and leaks == []


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from running_server(maxmemory="256mb")


@pytest.mark.slow
def test_spec_redis_tier_serves_and_survives_a_killed_server(
    model_dir: Path, expected: dict, redis_server: RedisServer
) -> None:
    run = Run(model_dir, {"redis_tier": {"url": redis_server.url, "ttl_s": 600}}, expected, spec=True)
    try:
        assert run.rerun(REUSED[0], FLOODS[0]) == SERVED, "the re-run was not served from the Redis tier"
        assert run.tiers()["redis"]["promoted_keys"] >= SERVED_CHUNKS
        assert run.external_hits() >= SERVED
        # SIGKILLed in the middle of a flood, then restarted empty: the cascaded prompt is gone
        # (recomputed), then hits resume.
        killer = threading.Timer(1.0, redis_server.kill)
        killer.start()
        run.batch(FLOODS[1])
        killer.join()
        redis_server.start()
        assert run.batch([REUSED[0]])[0] < SERVED
        promoted = run.tiers()["redis"]["promoted_keys"]
        assert run.rerun(REUSED[2], FLOODS[2]) == SERVED, "hits did not resume once the server was back"
        assert run.tiers()["redis"]["promoted_keys"] >= promoted + SERVED_CHUNKS
        # SIGKILLed and left down: the engine keeps serving identical outputs.
        redis_server.kill()
        assert run.rerun(REUSED[3], FLOODS[3]) < SERVED
        assert run.tiers()["redis"]["faults"] >= 1
    finally:
        violations, leaks = run.close()
    assert violations == [] and leaks == []


@pytest.mark.slow
def test_spec_two_engines_in_two_processes_share_redis(
    model_dir: Path, expected: dict, redis_server: RedisServer
) -> None:
    """Two engines one after the other, each in its own process with vLLM's multiprocessing on and
    the ``mp`` executor (the worker's CPU pool reaches the engine core's tier I/O through
    /dev/shm): the second serves the prefix the first computed, through Redis."""
    config = spec_transfer_config(CPU_CHUNKS, "lru", tiers={"redis_tier": {"url": redis_server.url}})
    second_engine_served(model_dir, config, redis_server, expected, SERVED)


@pytest.fixture
def password_redis_server() -> Iterator[RedisServer]:
    """A private redis-server that asks for the connector tests' password (``redis_password``)."""
    yield from running_server(maxmemory="256mb", password=PASSWORD)


@pytest.mark.slow
def test_spec_another_deployments_values_and_a_rotated_password(
    model_dir: Path, expected: dict, password_redis_server: RedisServer, redis_password: str, tmp_path: Path
) -> None:
    """The connector's test with both engines behind KVOffloadSpec. vLLM gives the spec no cache
    salt, so its key names and records bind model, layout and rank only; requests of tenants with
    different salts never share block hashes (vLLM mixes the salt into them), so the same block
    hashes under another owner come from another deployment: another model's values copied under
    this engine's key names fail their records' checksums (no hits, same outputs)."""
    another_deployments_values_and_a_rotated_password(
        model_dir, expected, password_redis_server, tmp_path, True, SERVED
    )


@pytest.mark.slow
def test_spec_redis_cluster_with_a_slot_migration_and_a_killed_master(
    model_dir: Path, expected: dict, cluster: LocalRedisCluster
) -> None:
    redis_cluster_with_a_slot_migration_and_a_killed_master(model_dir, expected, cluster, True, SERVED)
