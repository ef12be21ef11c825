"""The engine request of both engine models (the simulator's and the explorer's): tokens, chained
block hashes, progress, and its status in the engine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

HASH_MASK = (1 << 63) - 1

# A request's status in the engine (vLLM's names in parentheses).
NEW = "new"  # not arrived: the connector has never seen it (the explorer's requests start here)
WAITING = "waiting"  # in the waiting queue: not admitted yet, or preempted (WAITING)
LOADING = "loading"  # GPU blocks allocated, waiting for its load (WAITING_FOR_REMOTE_KVS)
RUNNING = "running"  # (RUNNING)
FINISHED = "finished"  # finished or aborted; its GPU blocks may be held until the connector releases them
DONE = "done"  # finished and its GPU blocks freed (the explorer keeps such a request; the simulator forgets it)


def chain_hash(parent: int | None, tokens: Sequence[int]) -> int:
    """The block hash of ``tokens`` after the prefix whose last block hash is ``parent``.

    Tuples of ints hash deterministically in CPython (no per-process salt), so runs repeat.
    """
    return hash((parent if parent is not None else -1, tuple(tokens))) & HASH_MASK


@dataclass(eq=False, slots=True)
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
    status: str = WAITING
    # Tokens served by each tier at the last admission, for the hit statistics.
    local_hit_tokens: int = 0
    external_tokens: int = 0

    @classmethod
    def of_blocks(cls, request_id: str, block_hashes: Sequence[int], status: str = WAITING) -> SimRequest:
        """A request of one-token blocks whose tokens are their block hashes: the explorer's
        requests, where a chunk is one token named by its key."""
        return cls(request_id, list(block_hashes), 1, 1, block_hashes=list(block_hashes), status=status)

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
