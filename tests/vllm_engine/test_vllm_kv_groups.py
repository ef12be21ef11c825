"""kvoffload.vllm.kv_groups on vLLM's own KV cache specs: which groups KVOffloadConnector offloads,
the one-line refusal of the others, the per-engine-block interleaving of a request's blocks, and
MLA's latent pages (layout name, chunk bytes, the mover's rows)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

import torch
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

from kvoffload.dataplane.mover import BlockMover
from kvoffload.vllm.connector.connector import kv_layout
from kvoffload.vllm.connector.worker_side import block_tensors
from kvoffload.vllm.kv_groups import interleave, kv_groups
from kvoffload.vllm.settings import ConfigError

SHAPE = {"block_size": 32, "num_kv_heads": 2, "head_size": 32, "dtype": torch.float32}


def _config(*specs: object) -> SimpleNamespace:
    groups = [KVCacheGroupSpec([f"layers.{2 * i}", f"layers.{2 * i + 1}"], spec) for i, spec in enumerate(specs)]
    return SimpleNamespace(kv_cache_groups=groups)


def test_full_and_sliding_window_groups_are_offloaded() -> None:
    groups = kv_groups(_config(SlidingWindowSpec(**SHAPE, sliding_window=64), FullAttentionSpec(**SHAPE)))
    assert groups.kinds == ("sliding_window=64", "full")
    assert groups.volatile == frozenset({0})
    assert groups.windows == ((0, 64),), "the scheduler needs each window group's window for its hits"
    assert groups.layers_per_group == 2 and len(groups.layer_names) == 4
    assert not groups.legacy
    assert kv_groups(_config(FullAttentionSpec(**SHAPE))).legacy


def test_a_window_counts_the_tokens_vllm_retains_for_speculative_decoding() -> None:
    """vLLM keeps ``extra_retained_tokens`` more window blocks when multi-module speculative
    decoding re-prefills them: a narrower window would expect its null block where the engine
    gives a real one, and refuse the load."""
    window = SlidingWindowSpec(**SHAPE, sliding_window=64, extra_retained_tokens=3)
    assert kv_groups(_config(window, FullAttentionSpec(**SHAPE))).windows == ((0, 67),)


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (ChunkedLocalAttentionSpec(**SHAPE, attention_chunk_size=64), "ChunkedLocalAttentionSpec"),
        (MambaSpec(block_size=32, shapes=((4, 4),), dtypes=(torch.float32,)), "MambaSpec"),
    ],
)
def test_other_group_kinds_are_refused_in_one_line_naming_them(spec: object, kind: str) -> None:
    with pytest.raises(ConfigError) as refused:
        kv_groups(_config(FullAttentionSpec(**SHAPE), spec))
    message = str(refused.value)
    assert "\n" not in message
    assert f"this model's groups are ['full', '{kind}']" in message


def test_interleave_lists_each_groups_block_per_engine_block() -> None:
    assert interleave(([10, 11], [0, 21])) == [10, 0, 11, 21]
    assert interleave(([10, 11],)) == [10, 11]
    with pytest.raises(ValueError, match="as many in each"):
        interleave(([10, 11], [20]))


# DeepSeek-V2's latent: kv_lora_rank 512 + rope 64 elements per token, one vector, no K/V split.
MLA = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.float32)
# A K/V page of the same bytes: 2 x 9 heads x 32 = 576 elements per token.
SAME_PAGE_KV = FullAttentionSpec(block_size=16, num_kv_heads=9, head_size=32, dtype=torch.float32)


def _engine(block_size: int = 16) -> SimpleNamespace:
    return SimpleNamespace(
        cache_config=SimpleNamespace(cache_dtype="auto", block_size=block_size),
        model_config=SimpleNamespace(dtype=torch.float32),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
    )


def test_an_mla_chunk_is_one_latent_page_per_layer_and_its_layout_names_the_latent() -> None:
    groups = kv_groups(_config(MLA))
    assert groups.kinds == ("mla576",) and not groups.volatile
    assert groups.page_bytes == 16 * 576 * 4, "an MLA page has no K/V halves"
    layout, chunk_bytes = kv_layout(_engine(), groups, blocks_per_chunk=2)
    assert layout.endswith("/gmla576")
    assert chunk_bytes == 2 * 2 * 16 * 576 * 4
    # Same page bytes, other bytes in them: never the same tiers' namespace.
    assert kv_groups(_config(SAME_PAGE_KV)).page_bytes == groups.page_bytes
    assert kv_layout(_engine(), kv_groups(_config(SAME_PAGE_KV)), 2)[0] != layout
    other_latent = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=320, dtype=torch.float32)
    assert kv_layout(_engine(), kv_groups(_config(other_latent)), 2)[0] != layout


def test_the_mover_copies_whole_mla_latent_pages() -> None:
    """vLLM's MLA cache is (num_blocks, block_size, latent) with no leading K/V dimension: each
    block's row is its whole latent page, and a store then a load restores every byte of it."""
    num_blocks = 6
    caches = {f"layers.{i}": torch.randn(num_blocks, 16, 576) for i in range(2)}
    rows = block_tensors(caches, list(caches), num_blocks, MLA.page_size_bytes)
    assert [tuple(row.shape) for row in rows] == [(num_blocks, MLA.page_size_bytes)] * 2
    before = {name: cache.clone() for name, cache in caches.items()}
    mover = BlockMover(rows, 4, cpu_kernel=False)
    mover.store(1, [2, 3], [0, 1])
    mover.wait([1])
    for cache in caches.values():
        cache.zero_()
    mover.load(2, [0, 1], [4, 5])
    mover.wait([2])
    assert all(result.ok for result in mover.poll())
    for name, cache in caches.items():
        assert torch.equal(cache[4:], before[name][2:4])
    mover.close()
