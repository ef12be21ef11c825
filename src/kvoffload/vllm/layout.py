"""Where an offloaded chunk's engine blocks live in the block mover's CPU pool (no vLLM import).

One CPU chunk of the manager holds ``blocks_per_chunk`` consecutive engine blocks of a request; the
mover's CPU pool has one row per engine block, so chunk ``c`` is mover blocks
``c * blocks_per_chunk ... c * blocks_per_chunk + blocks_per_chunk - 1``. A transfer may start
inside its first chunk (vLLM's GPU prefix cache already holds that chunk's first blocks).
"""

from __future__ import annotations

from collections.abc import Sequence


def mover_block_ids(chunk_ids: Sequence[int], blocks_per_chunk: int, first_block_index: int, count: int) -> list[int]:
    """The mover blocks of ``count`` engine blocks that start at request block
    ``first_block_index`` and lie in the CPU chunks ``chunk_ids``."""
    skip = first_block_index % blocks_per_chunk
    blocks = [chunk * blocks_per_chunk + sub for chunk in chunk_ids for sub in range(blocks_per_chunk)]
    if len(blocks) - skip < count or len(blocks) - skip - count >= blocks_per_chunk:
        raise ValueError(
            f"{count} engine blocks starting at block index {first_block_index} do not fit "
            f"{len(chunk_ids)} chunk(s) of {blocks_per_chunk} blocks"
        )
    return blocks[skip : skip + count]
