"""The vLLM tiers' settings and worker-side I/O, without vLLM: bad values give one line naming the
key and the value (never the password); a chunk gathered from the per-layer pools goes through a
real file tier and lands back in other rows only when its record verified."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvoffload.tiers.protocol import CORRUPT, OK, TierJob
from kvoffload.tiers.record import Namespace
from kvoffload.vllm.settings import ConfigError
from kvoffload.vllm.tier_io import LayerChunks, WorkerTiers, open_backends
from kvoffload.vllm.tier_settings import FileTierSettings, TierSettings, tier_settings

PASSWORD_ENV = "KVOFFLOAD_TEST_TIER_PASSWORD"


def test_no_tier_keys_means_no_tiers() -> None:
    assert not tier_settings({"num_cpu_blocks": 4}).any


def test_both_tiers_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "s3cret")
    settings = tier_settings({
        "file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": 1 << 20},
        "redis_tier": {"url": "rediss://cache:6380/2", "password_env": PASSWORD_ENV, "ttl_s": 60},
    })
    assert settings.file == FileTierSettings(str(tmp_path / "kv.tier"), 1 << 20)
    assert settings.redis is not None and settings.redis.password() == "s3cret"
    assert settings.redis.ttl_s == 60


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"file_tier": "/tmp/x"}, "kv_connector_extra_config['file_tier'] must be an object, got '/tmp/x'"),
        ({"file_tier": {"path": "/nonexistent-dir/kv.tier", "size_bytes": 4096}},
         "kv_connector_extra_config['file_tier']['path'] = '/nonexistent-dir/kv.tier': directory "
         "'/nonexistent-dir' does not exist"),
        ({"file_tier": {"path": "/tmp/kv.tier", "size_bytes": "1G"}},
         "kv_connector_extra_config['file_tier']['size_bytes'] must be a positive integer, got '1G'"),
        ({"file_tier": {"path": "/tmp/kv.tier", "size_bytes": 4096, "slots": 3}},
         "kv_connector_extra_config['file_tier']['slots'] is not a setting; known: path, size_bytes"),
        ({"redis_tier": {"url": "http://cache:6379"}},
         "kv_connector_extra_config['redis_tier']['url'] must be a redis:// or rediss:// URL, got 'http://cache:6379'"),
        ({"redis_tier": {"url": "redis://cache:6379/x"}},
         "kv_connector_extra_config['redis_tier']['url'] = 'redis://cache:6379/x': database 'x' is not a number"),
        ({"redis_tier": {"url": "redis://cache:6379", "ttl_s": 0}},
         "kv_connector_extra_config['redis_tier']['ttl_s'] must be a positive integer, got 0"),
        ({"redis_tier": {"url": "redis://cache:6379", "socket_timeout_s": 0}},
         "kv_connector_extra_config['redis_tier']['socket_timeout_s'] must be a positive number, got 0"),
        ({"redis_tier": {"url": "redis://cache:6379", "password_env": "KVOFFLOAD_NOT_SET_ANYWHERE"}},
         "kv_connector_extra_config['redis_tier']['password_env'] = 'KVOFFLOAD_NOT_SET_ANYWHERE': that "
         "environment variable is not set"),
        ({"redis_tier": {"url": "redis://cache:6379", "cluster": "yes"}},
         "kv_connector_extra_config['redis_tier']['cluster'] must be true or false, got 'yes'"),
    ],
)
def test_bad_values_name_the_key_and_the_value(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        tier_settings(extra)
    assert str(caught.value) == message


def test_a_password_in_the_url_is_refused_and_never_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        tier_settings({"redis_tier": {"url": "redis://:hunter2@cache:6379/0"}})
    assert "hunter2" not in str(caught.value)
    assert "redis://:***@cache:6379/0" in str(caught.value) and "password_env" in str(caught.value)


def test_a_file_tier_smaller_than_one_slot_is_refused() -> None:
    settings = FileTierSettings("/tmp/kv.tier", 8192)
    with pytest.raises(ConfigError, match=r"\['size_bytes'\] = 8192 is less than the header page and one slot"):
        settings.slots(32768)
    assert FileTierSettings("/tmp/kv.tier", 4096 + 3 * 40960).slots(32768) == 3


def _pools(blocks: int = 8) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(blocks, 2, 4, 8), torch.randn(blocks, 2, 4, 8)]


def test_a_chunk_gathered_from_every_layer_lands_in_other_rows(tmp_path: Path) -> None:
    pools = _pools()
    chunks = LayerChunks(pools, blocks_per_chunk=2)
    assert chunks.chunk_bytes == 2 * 2 * (2 * 4 * 8 * 4)
    settings = TierSettings(file=FileTierSettings(str(tmp_path / "kv.tier"), 1 << 20))
    backends = open_backends(settings, chunks.chunk_bytes, 8, Namespace("m", "l"), writer=1)
    tiers = WorkerTiers(backends, chunks)
    try:
        tiers.run([TierJob(1, "cascade", "file", "r", (0xAB,), (0,), (5,))], step=1)
        tiers.run([TierJob(2, "promote", "file", "r", (0xAB,), (3,), (5,))], step=2)
        tiers.run([TierJob(3, "promote", "file", "r", (0xCD,), (2,), (5,))], step=3)
        tiers.run([], step=4)
        outcomes = {outcome.job_id: outcome.results for outcome in tiers.take_outcomes()}
    finally:
        tiers.close()
    assert outcomes[1] == (OK,) and outcomes[2] == (OK,)
    for pool in pools:
        assert torch.equal(pool[6:8], pool[0:2]), "chunk 0's rows did not land in chunk 3's"
    # The slot holds another key's record: refused, and chunk 2's rows are untouched.
    assert outcomes[3] == (CORRUPT,)
    fresh = _pools()
    for pool, original in zip(pools, fresh, strict=True):
        assert torch.equal(pool[4:6], original[4:6])


def test_a_file_tier_that_cannot_be_opened_is_one_config_line(tmp_path: Path) -> None:
    path = tmp_path / "not-a-tier"
    path.write_bytes(b"precious data")
    settings = TierSettings(file=FileTierSettings(str(path), 1 << 20))
    refused = r"^kv_connector_extra_config\['file_tier'\]: file tier .* not a kvoffload tier file"
    with pytest.raises(ConfigError, match=refused):
        open_backends(settings, 4096, 8, Namespace("m", "l"), writer=1)
    assert path.read_bytes() == b"precious data"
