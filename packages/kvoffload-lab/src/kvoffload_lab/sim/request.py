"""Simulated engine requests: tokens, chained block hashes, progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

HASH_MASK = (1 << 63) - 1


def chain_hash(parent: int | None, tokens: Sequence[int]) -> int:
    """The block hash of ``tokens`` after the prefix whose last block hash is ``parent``.

    Tuples of ints hash deterministically in CPython (no per-process salt), so runs repeat.
    """
    return hash((parent if parent is not None else -1, tuple(tokens))) & HASH_MASK


@dataclass(eq=False)
class SimRequest:
    """One request of the simulated engine, with what the connector reads (vLLM's names)."""

    request_id: str
    prompt: list[int]
    max_tokens: int
    block_size: int
    output: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)
    status: str = "waiting"
    # Tokens served by each tier at the last admission, for the hit statistics.
    local_hit_tokens: int = 0
    external_tokens: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"request {self.request_id!r}: max_tokens must be >= 1, got {self.max_tokens}")
        if not self.prompt:
            raise ValueError(f"request {self.request_id!r}: empty prompt")
        self._extend_hashes()

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    def token(self, index: int) -> int:
        n = len(self.prompt)
        return self.prompt[index] if index < n else self.output[index - n]

    def append_output(self, token: int) -> None:
        self.output.append(token)
        self._extend_hashes()

    def _extend_hashes(self) -> None:
        size = self.block_size
        while (len(self.block_hashes) + 1) * size <= self.num_tokens:
            start = len(self.block_hashes) * size
            parent = self.block_hashes[-1] if self.block_hashes else None
            self.block_hashes.append(chain_hash(parent, [self.token(i) for i in range(start, start + size)]))
