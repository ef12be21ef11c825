"""Belady and infinite-cache bounds against hand-checked and brute-force computations."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload_lab.tracestudy.bounds import belady, infinite_cache, next_uses


def _naive_infinite(chains: list[list[int]]) -> int:
    hits = 0
    for index, keys in enumerate(chains):
        earlier = {k for chain in chains[:index] for k in chain}
        for key in keys:
            if key not in earlier:
                break
            hits += 1
    return hits


def _naive_belady(chains: list[list[int]], capacity: int) -> int:
    """Straight from the definition, O(n^2): scan the future for each resident key's next use."""

    def next_use(key: int, after: int) -> int:
        for index in range(after + 1, len(chains)):
            if key in chains[index]:
                return index
        return 10**9

    cache: dict[int, int] = {}  # key -> depth
    hits = 0
    for index, keys in enumerate(chains):
        for key in keys:
            if key not in cache:
                break
            hits += 1
        for depth, key in enumerate(keys):
            cache[key] = depth
            if len(cache) > capacity:
                victim = max(cache, key=lambda k: (next_use(k, index), cache[k]))
                del cache[victim]
    return hits


def _prefix_chains(draw_ids: list[list[int]]) -> list[list[int]]:
    # Chain the ids as the replay does (key = (parent key, id)), by hand.
    table: dict[tuple[int, int], int] = {}
    chains = []
    for ids in draw_ids:
        parent, keys = 0, []
        for hash_id in ids:
            parent = table.setdefault((parent, hash_id), len(table) + 1)
            keys.append(parent)
        chains.append(keys)
    return chains


def test_infinite_by_hand() -> None:
    chains = [[1, 2, 3], [1, 2, 4], [5, 2, 3], [1, 2, 4, 6]]
    # r1: 0 hits; r2: 1,2 then miss at 4; r3: 5 misses first; r4: 1,2,4 then 6 misses.
    result = infinite_cache(chains)
    assert (result.blocks, result.hits) == (13, 5)
    assert result.hit_ratio == 5 / 13


def test_belady_by_hand() -> None:
    # Capacity 2. After r1 = [1, 2] the cache is {1, 2}. r2 = [3] must evict: 1 is used next by
    # r3, 2 only by r4, 3 never again, so 3 is not kept at all (Belady may drop the incoming key).
    # r3 = [1] hits; r4 = [1, 2] hits both: 3 hits out of 6 blocks.
    chains = [[1, 2], [3], [1], [1, 2]]
    assert belady(chains, 2).hits == 3
    # LRU would have kept 3 and lost 1 then 2: Belady is strictly better here.
    assert belady(chains, 1).hits == 2  # r3 hits 1; r4 hits 1 (2 was dropped for 1)
    assert belady(chains, 3).hits == infinite_cache(chains).hits == 3


def test_belady_keeps_the_head_of_a_chain_on_ties() -> None:
    # 1 and 2 are next used by the same request; dropping the parent 1 would make 2 useless.
    chains = [[1, 2], [3], [1, 2]]
    assert belady(chains, 1).hits == 1


def test_next_uses() -> None:
    assert next_uses([[1, 2], [2], [1]]) == [[2, 1], [1 << 62], [1 << 62]]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=5), min_size=1, max_size=12),
    st.integers(1, 8),
)
def test_bounds_match_brute_force(ids: list[list[int]], capacity: int) -> None:
    chains = _prefix_chains(ids)
    infinite = infinite_cache(chains)
    assert infinite.hits == _naive_infinite(chains)
    assert infinite.blocks == sum(map(len, chains))
    bound = belady(chains, capacity)
    assert bound.hits == _naive_belady(chains, capacity)
    assert bound.hits <= infinite.hits
    distinct = len({k for c in chains for k in c})
    if capacity >= distinct:
        assert bound.hits == infinite.hits


def test_belady_is_at_least_as_good_as_any_lru_on_small_cases() -> None:
    # Exhaustive over tiny traces: Belady never loses to an LRU of the same size.
    for ids in itertools.product([(0,), (1,), (0, 1), (1, 0), (2, 0)], repeat=4):
        chains = _prefix_chains([list(x) for x in ids])
        lru: dict[int, None] = {}
        lru_hits = 0
        for keys in chains:
            for key in keys:
                if key not in lru:
                    break
                lru_hits += 1
            for key in keys:
                lru.pop(key, None)
                lru[key] = None
                if len(lru) > 2:
                    del lru[next(iter(lru))]
        assert belady(chains, 2).hits >= lru_hits
