"""The tiers' namespace names the KV cache groups' layout, without an engine (``make
check-vllm-tiers``): KVOffloadConnector's layout name differs for every group layout (kinds,
sliding windows, group count and order, page bytes, block size), KVOffloadSpec's tiers' layout
adds each group's kind, and a chunk written under one group layout is, under another, a Redis
miss (counted), a refused value when copied under the other's key name, and a tier file of the
other layout is refused at start in one line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")
pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")
pytest.importorskip("redis", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")

from kvoffload.tiers.protocol import CORRUPT, MISS, OK, TierJob
from kvoffload.tiers.record import Namespace, key_bytes
from kvoffload.vllm.connector.connector import kv_layout
from kvoffload.vllm.kv_groups import KVGroups
from kvoffload.vllm.settings import ConfigError
from kvoffload.vllm.spec.spec import tier_layout
from kvoffload.vllm.tier_io import LayerChunks, WorkerTiers, open_backends
from kvoffload.vllm.tier_settings import FileTierSettings, RedisTierSettings, TierSettings
from kvoffload_lab.redis_server import RedisServer
from redis_servers import running_server

MODEL = "tiny-gemma3"
GEMMA3 = KVGroups(("sliding_window=64", "full"), frozenset({0}), 16384, 2, ("l0", "l1", "l2", "l3"))
GROUP_LAYOUTS = {
    "window 64": GEMMA3,
    "window 32": replace(GEMMA3, kinds=("sliding_window=32", "full")),
    "groups swapped": replace(GEMMA3, kinds=("full", "sliding_window=64"), volatile=frozenset({1})),
    "three groups": KVGroups(("sliding_window=64", "sliding_window=64", "full"), frozenset({0, 1}), 16384, 2,
                             (*GEMMA3.layer_names, "l4", "l5")),
    "HMA off": KVGroups(("full",), frozenset(), 16384, 4, GEMMA3.layer_names),
    "other page": replace(GEMMA3, page_bytes=8192),
}


def _engine(block_size: int = 32) -> SimpleNamespace:
    """The parts of a VllmConfig that kv_layout reads."""
    return SimpleNamespace(
        cache_config=SimpleNamespace(cache_dtype="auto", block_size=block_size),
        model_config=SimpleNamespace(dtype="torch.float32"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
    )


def _layout(name: str) -> str:
    return kv_layout(_engine(), GROUP_LAYOUTS[name], 1)[0]


def test_every_group_layout_has_its_own_connector_layout_name() -> None:
    names = [_layout(name) for name in GROUP_LAYOUTS] + [kv_layout(_engine(64), GEMMA3, 1)[0]]
    assert len(set(names)) == len(names), names
    assert _layout("window 64").endswith("/gsliding_window=64+full")


def test_the_spec_tiers_layout_names_each_groups_kind() -> None:
    layout = "spec/float32/l2/w16384/b32x1/tp1/g2"
    assert tier_layout(layout, ("sliding_window=64", "full")) == f"{layout}/sliding_window=64+full"
    assert tier_layout(layout, ("sliding_window=64", "full")) != tier_layout(layout, ("sliding_window=32", "full"))
    # One group of full attention keeps the name it had before groups (its chunks stay readable).
    assert tier_layout("spec/float32/l4/w16384/b32x1/tp1", ("full",)) == "spec/float32/l4/w16384/b32x1/tp1"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from running_server()


def _tiers(settings: TierSettings, layout: str) -> WorkerTiers:
    chunks = LayerChunks([torch.arange(4 * 64, dtype=torch.float32).reshape(4, 64)], blocks_per_chunk=1)
    return WorkerTiers(open_backends(settings, chunks.chunk_bytes, 4, Namespace(MODEL, layout), writer=1), chunks)


def _run(tiers: WorkerTiers, job: TierJob) -> tuple[str, ...]:
    try:
        tiers.run([job], step=1)
        tiers.run([], step=2)
        return tiers.take_outcomes()[0].results
    finally:
        tiers.close()


@pytest.mark.parametrize("other", [name for name in GROUP_LAYOUTS if name != "window 64"])
def test_a_redis_chunk_of_another_group_layout_is_a_counted_miss(redis_server: RedisServer, other: str) -> None:
    import redis

    settings = TierSettings(redis=RedisTierSettings(f"redis://127.0.0.1:{redis_server.port}/0"))
    key = 0xC0FFEE + len(other)
    written = _tiers(settings, _layout("window 64"))
    assert _run(written, TierJob(1, "cascade", "redis", "r", (key,), (0,))) == (OK,)
    reader = _tiers(settings, _layout(other))
    assert _run(reader, TierJob(2, "promote", "redis", "r", (key,), (1,))) == (MISS,)
    assert reader.driver.stats()["redis"]["miss"] == 1
    # The value copied under the other layout's key name fails its record's checksum.
    client = redis.Redis(port=redis_server.port)
    mine, theirs = (Namespace(MODEL, _layout(name)).scope("") for name in ("window 64", other))
    tag = b"{%s}" % key_bytes(key).hex().encode()
    client.set(tag + theirs, client.get(tag + mine))
    reader = _tiers(settings, _layout(other))
    assert _run(reader, TierJob(3, "promote", "redis", "r", (key,), (1,))) == (CORRUPT,)


def test_a_tier_file_of_another_group_layout_is_refused_in_one_line(tmp_path: Path) -> None:
    settings = TierSettings(file=FileTierSettings(str(tmp_path / "kv.tier"), 1 << 20))
    _tiers(settings, _layout("window 64")).close()
    with pytest.raises(ConfigError) as refused:
        _tiers(settings, _layout("window 32"))
    assert str(refused.value).startswith("kv_connector_extra_config['file_tier']: file tier ")
    assert "gsliding_window=64+full" in str(refused.value) and "gsliding_window=32+full" in str(refused.value)
