"""kvoffload.vllm.kv_groups on vLLM's own KV cache specs: which groups KVOffloadConnector offloads,
the one-line refusal of the others, and the per-engine-block interleaving of a request's blocks."""

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
    SlidingWindowSpec,
)

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
