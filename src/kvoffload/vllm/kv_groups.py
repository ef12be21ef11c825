"""The KV cache groups of a vLLM engine as kvoffload handles them.

vLLM's hybrid KV cache manager (HMA) gives each group of layers (full attention, sliding window,
...) its own GPU blocks, all from one pool and of one page size, with a group's layers sharing
their tensors with the other groups' layers. kvoffload offloads a chunk as every group's blocks
for its tokens, in one job: a request's block list names, per engine block, each group's block in
group order (:func:`interleave`).

Sliding-window groups are *volatile*: vLLM frees their blocks that left the window while the
request runs, and names its null block there; a chunk is then stored without its window part, and
a hit needs the window parts of its last window only (:mod:`kvoffload.offload.windows`). Full
attention keeps every block, and so does MLA (DeepSeek-V2 style: one latent vector per token, no
K/V split; its kind names the latent size, so that its chunks are never read by an engine with
another latent or a K/V layout of the same page size). Other kinds (Mamba state, chunked local
attention, ...) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvoffload.vllm.settings import ConfigError

# vLLM's BlockPool takes block 0 as its null block, the placeholder of a freed window block.
VLLM_NULL_BLOCK = 0


@dataclass(frozen=True)
class KVGroups:
    """``kinds``: each group's kind, in group order; ``volatile``: the sliding-window groups;
    ``windows``: ``(group, window tokens)`` of each sliding-window group, the tokens vLLM keeps
    blocks for before a position (its window plus the ``extra_retained_tokens`` that multi-module
    speculative decoding re-prefills)."""

    kinds: tuple[str, ...]
    volatile: frozenset[int]
    page_bytes: int
    layers_per_group: int
    layer_names: tuple[str, ...]
    windows: tuple[tuple[int, int], ...] = ()

    @property
    def legacy(self) -> bool:
        """One group of plain full attention: what kvoffload's layouts named before groups existed."""
        return self.kinds == ("full",)


def _kind(spec: Any) -> tuple[str, bool | None]:
    """The name of a group's kind, and whether it is volatile (None: not handled)."""
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        MLAAttentionSpec,
        RSWASpec,
        SlidingWindowSpec,
        UniformTypeKVCacheSpecs,
    )

    name = type(spec).__name__
    if type(spec) is MLAAttentionSpec:
        # A block is block_size latent vectors of head_size elements (kv_lora_rank + rope dims).
        return f"mla{spec.head_size}", False
    if type(spec) is SlidingWindowSpec:
        return f"sliding_window={spec.sliding_window}", True
    if isinstance(spec, FullAttentionSpec) and not isinstance(spec, RSWASpec):
        return ("full" if type(spec) is FullAttentionSpec else name), False
    if isinstance(spec, UniformTypeKVCacheSpecs) and all(
        _kind(layer)[1] is False for layer in spec.kv_cache_specs.values()
    ):
        return name, False
    return name, None


def kv_groups(kv_cache_config: Any, who: str = "KVOffloadConnector") -> KVGroups:
    """The engine's groups; raises :class:`ConfigError` in one line for what is not handled."""
    groups = kv_cache_config.kv_cache_groups
    found = [_kind(group.kv_cache_spec) for group in groups]
    kinds = tuple(name for name, _ in found)
    if any(volatile is None for _, volatile in found):
        raise ConfigError(
            f"{who} offloads full-attention and sliding-window KV cache groups; this model's groups are {list(kinds)}"
        )
    pages = {int(group.kv_cache_spec.page_size_bytes) for group in groups}
    sizes = {int(group.kv_cache_spec.block_size) for group in groups}
    layers = {len(group.layer_names) for group in groups}
    if len(pages) != 1 or len(sizes) != 1 or len(layers) != 1:
        raise ConfigError(
            f"{who} needs one page size, block size and layer count for every KV cache group; this model's groups "
            f"{list(kinds)} have pages {sorted(pages)}, block sizes {sorted(sizes)}, layer counts {sorted(layers)}"
        )
    return KVGroups(
        kinds=kinds,
        volatile=frozenset(index for index, (_, volatile) in enumerate(found) if volatile),
        page_bytes=pages.pop(),
        layers_per_group=layers.pop(),
        layer_names=tuple(name for group in groups for name in group.layer_names),
        windows=tuple(
            (index, _retained_window(group.kv_cache_spec))
            for index, (group, (_, volatile)) in enumerate(zip(groups, found, strict=True))
            if volatile
        ),
    )


def _retained_window(spec: Any) -> int:
    """The tokens before a position whose window blocks vLLM keeps (its SlidingWindowManager's
    ``get_num_skipped_tokens``): older vLLM releases have no ``extra_retained_tokens``."""
    return int(spec.sliding_window) + int(getattr(spec, "extra_retained_tokens", 0))


def interleave(groups: Sequence[Sequence[int]]) -> list[int]:
    """A request's per-group block lists as kvoffload's one list: per engine block, each group's
    block in group order."""
    if len(groups) == 1:
        return list(groups[0])
    lengths = [len(blocks) for blocks in groups]
    if len(set(lengths)) != 1:
        raise ValueError(f"KV cache groups list {lengths} blocks for one request; kvoffload needs as many in each")
    return [block for blocks in zip(*groups, strict=True) for block in blocks]


def declared_kinds(group_layers: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Each group's kind as its layers declare it in vLLM's current config, which vLLM sets where a
    worker builds its KV caches (a group of layers of several kinds names each, sorted; ``unknown``
    where no config is current or no layer is found, outside an engine). For KVOffloadSpec, whose
    OffloadingConfig names each group's layers but not its kind (the sliding window)."""
    from vllm.config import get_current_vllm_config_or_none, get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    config = get_current_vllm_config_or_none()
    layers = {} if config is None else get_layers_from_vllm_config(config, AttentionLayerBase)
    kinds = []
    for names in group_layers:
        found = {_kind(layers[name].get_kv_cache_spec(config))[0] for name in names if name in layers}
        kinds.append(",".join(sorted(found)) or "unknown")
    return tuple(kinds)
