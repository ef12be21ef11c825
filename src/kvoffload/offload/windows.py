"""Sliding-window groups: which chunks of a hit need their window part, and the key of a chunk
stored without it.

An engine with sliding-window KV cache groups attends, for the token after position ``N``, only to
the last ``window`` tokens; vLLM names its null block for a window group's blocks before them and
counts those tokens computed without any KV (its ``SlidingWindowManager``). So a hit ending at
token ``N`` needs every full-attention block up to ``N`` but a window group's blocks only from
:func:`first_window_chunk` on. A chunk whose window blocks the engine freed before it was stored is
stored under :func:`windowless_key` with its full-attention blocks only: it serves a hit only
before the last window of that hit's end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvoffload.offload.types import OffloadKey

# Mixed with a chunk's key to name the same tokens stored without their window part; hashing a
# tuple of ints is the same in every process (no PYTHONHASHSEED), so tiers shared between
# processes agree on it.
_WINDOWLESS_TAG = 0x5717D0


def windowless_key(key: OffloadKey) -> OffloadKey:
    """The key of ``key``'s chunk stored with its full-attention groups' blocks only."""
    return hash((_WINDOWLESS_TAG, key))


def first_window_chunk(end_chunk: int, chunk_tokens: int, block_tokens: int, windows: Sequence[int]) -> int:
    """The first chunk whose window part a hit ending at chunk ``end_chunk`` needs: the chunk of
    the first block vLLM keeps for the widest window (``windows``, in tokens) before that end."""
    if not windows:
        return 0
    end_token = end_chunk * chunk_tokens
    skipped_tokens = max(0, end_token - max(windows) + 1)
    blocks_per_chunk = chunk_tokens // block_tokens
    return (skipped_tokens // block_tokens) // blocks_per_chunk


def longest_hit(start_chunk: int, windowless: Sequence[bool], first_window: Callable[[int], int]) -> int:
    """How many of the chunks found from ``start_chunk`` on (``windowless[i]``: chunk
    ``start_chunk + i`` was found only without its window part) a hit may use: the longest run whose
    last window (``first_window``: :func:`first_window_chunk` of a hit's end chunk) has every
    chunk's window part. Chunks before ``start_chunk`` are the engine's own prefix-cache hit, whose
    window blocks it keeps."""
    for hit in range(len(windowless), 0, -1):
        window_start = max(first_window(start_chunk + hit), start_chunk) - start_chunk
        if not any(windowless[window_start:hit]):
            return hit
    return 0
