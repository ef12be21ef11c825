"""The engine's GPU block pool with prefix caching by block hash (vLLM's design, reduced).

A full block is registered under its chained hash as soon as its tokens are scheduled, before the
forward pass writes it (vLLM caches blocks at allocation), so a request admitted later in the same
step can hit a block that this step's forward pass only writes. When its last user frees it, it goes
to the free queue but stays cached until the queue hands it out again (oldest freed first), so a
later request with the same prefix finds it. Blocks of running requests are pinned (ref count).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    """``num_blocks`` GPU blocks; ``allocate`` never hands out a block that someone still uses."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))

    def copy(self) -> BlockPool:
        """A copy that no later call on either pool affects (the explorer copies its states)."""
        other = BlockPool.__new__(BlockPool)
        other.num_blocks = self.num_blocks
        other.ref_cnt = self.ref_cnt.copy()
        other.block_hash = self.block_hash.copy()
        other.cached = self.cached.copy()
        other.free_queue = self.free_queue.copy()
        return other

    def cached_prefix(self, hashes: Sequence[int]) -> list[int]:
        """Blocks holding the longest cached prefix of ``hashes``."""
        blocks = []
        for block_hash in hashes:
            block = self.cached.get(block_hash)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def touch(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            if self.ref_cnt[block] == 0:
                del self.free_queue[block]
            self.ref_cnt[block] += 1

    def allocate(self, count: int) -> list[int] | None:
        """``count`` fresh blocks (evicting cached ones, oldest freed first), or None."""
        if count > len(self.free_queue):
            return None
        blocks = []
        for _ in range(count):
            block, _ = self.free_queue.popitem(last=False)
            old = self.block_hash[block]
            if old is not None:
                if self.cached.get(old) == block:
                    del self.cached[old]
                self.block_hash[block] = None
            self.ref_cnt[block] = 1
            blocks.append(block)
        return blocks

    def free(self, blocks: Sequence[int]) -> None:
        # Freed in reverse so a request's tail blocks are evicted before its shared prefix.
        for block in reversed(blocks):
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] < 0:
                raise AssertionError(f"GPU block {block} freed twice")
            if self.ref_cnt[block] == 0:
                self.free_queue[block] = None

    def register(self, block: int, block_hash: int) -> None:
        """Cache a full block whose tokens are scheduled under its hash (the first one scheduled wins)."""
        if self.block_hash[block] is None and block_hash not in self.cached:
            self.block_hash[block] = block_hash
            self.cached[block_hash] = block

    def reset(self) -> None:
        """Forget every cached hash of a free block (reset_prefix_cache)."""
        for block in self.free_queue:
            old = self.block_hash[block]
            if old is not None:
                self.cached.pop(old, None)
                self.block_hash[block] = None
