"""The model: each token's KV is a digest of the tokens up to it; every slot a step reads is checked.

The GPU KV cache is an int64 tensor ``(num_blocks, block_size)``: slot ``p % block_size`` of the
block that holds position ``p`` keeps ``digest(tokens[:p + 1])``, the value a real model's KV at
``p`` is a function of. A step that computes positions ``[start, end)`` of a request first reads
``[0, start)``, as attention does, and each slot must hold its digest: whatever put it there (the
request's own compute, a GPU prefix-cache hit, a load from the CPU tier). A slot that does not is
``DataIntegrity``. The sampled token is a function of the prefix too, so that the same prompt
continues the same way in every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_MODULUS = (1 << 61) - 1
_BASE = 1_000_003
VOCAB = 1_000
FIRST_TOKEN = 10


def digests(tokens: list[int]) -> np.ndarray:
    """``digests(tokens)[p]`` is the KV of position ``p``: a nonzero function of ``tokens[:p + 1]``."""
    out = np.empty(len(tokens), dtype=np.int64)
    value = 1
    for position, token in enumerate(tokens):
        value = (value * _BASE + token + 1) % _MODULUS or 1
        out[position] = value
    return out


def next_token(tokens: list[int]) -> int:
    """The token the model samples after ``tokens``."""
    return FIRST_TOKEN + int(digests(tokens)[-1]) % VOCAB


@dataclass(frozen=True)
class WrongSlot:
    """Request ``request_id`` read position ``position`` from GPU block ``block`` and found other KV."""

    request_id: str
    position: int
    block: int
    found: int
    loaded: bool

    def __str__(self) -> str:
        what = "never written" if self.found == 0 else "the KV of another prefix"
        how = " (the block was loaded from the CPU tier)" if self.loaded else ""
        return (f"request '{self.request_id}' read position {self.position} from GPU block {self.block} "
                f"and found {what}{how}")


class DigestModel:
    """Holds the GPU KV cache; :meth:`forward` checks what a step reads and writes what it computes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.kv = torch.zeros((num_blocks, block_size), dtype=torch.int64)
        self._slots = self.kv.numpy()
        # GPU blocks a load wrote last (for the message), cleared when the model writes the block.
        self.loaded_blocks: set[int] = set()

    def region(self) -> torch.Tensor:
        """The KV cache as one ``(num_blocks, bytes)`` int8 region, as the connector's worker sees it."""
        return self.kv.view(torch.int8)

    def forward(self, request_id: str, tokens: list[int], block_ids: list[int], start: int,
                end: int) -> WrongSlot | None:
        """Compute positions ``[start, end)`` of ``tokens`` into ``block_ids``; the first wrong slot read."""
        expected = digests(tokens[:end])
        size = self.block_size
        positions = np.arange(end)
        blocks = np.asarray(block_ids, dtype=np.int64)[positions // size]
        found = self._slots[blocks[:start], positions[:start] % size]
        wrong = np.flatnonzero(found != expected[:start])
        if wrong.size:
            p = int(wrong[0])
            return WrongSlot(request_id, p, int(blocks[p]), int(found[p]), int(blocks[p]) in self.loaded_blocks)
        self._slots[blocks[start:end], positions[start:end] % size] = expected[start:end]
        self.loaded_blocks.difference_update(int(b) for b in set(blocks[start:end].tolist()))
        return None
