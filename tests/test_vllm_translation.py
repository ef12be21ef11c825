"""The vLLM integration's pure translations (no vLLM needed): keys, block hashes, chunk layout."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import OffloadConfig
from kvoffload.tiers.index import SharedTierIndex
from kvoffload.tiers.manager import TieringManager
from kvoffload.vllm.connector import scheduler_side
from kvoffload.vllm.connector.scheduler_side import SchedulerSide, VllmRequestView
from kvoffload.vllm.keys import HashesAsInts, KeyCodec
from kvoffload.vllm.layout import mover_block_ids


@given(st.lists(st.binary(min_size=36, max_size=36), min_size=1, max_size=20))
def test_keys_round_trip_exactly_even_with_leading_zero_bytes(keys: list[bytes]) -> None:
    codec = KeyCodec()
    as_ints = [codec.to_int(key) for key in keys]
    assert [codec.to_bytes(key) for key in as_ints] == keys
    assert len(set(as_ints)) == len(set(keys))


def test_a_key_of_another_length_is_refused_by_name() -> None:
    codec = KeyCodec()
    codec.to_int(b"\x00" * 36)
    with pytest.raises(ValueError, match=r"key of 8 bytes .* earlier keys had 36"):
        codec.to_int(b"\x01" * 8)


def test_translating_back_before_any_key_is_refused() -> None:
    with pytest.raises(ValueError, match="before any vLLM key was seen"):
        KeyCodec().to_bytes(5)


def test_hashes_view_follows_the_live_list() -> None:
    hashes = [b"\x00\x01", b"\x02\x00"]
    view = HashesAsInts(hashes)
    assert list(view) == [1, 512]
    hashes.append(b"\xff\xff")
    assert len(view) == 3
    assert view[-1] == 65535
    assert view[1:] == [512, 65535]


@pytest.mark.parametrize(
    ("chunks", "blocks_per_chunk", "first", "count", "expected"),
    [
        ([5, 2], 1, 0, 2, [5, 2]),
        ([5, 2], 2, 0, 4, [10, 11, 4, 5]),
        # A load starting inside its first chunk: the GPU prefix cache holds block 2 of chunk 1.
        ([7, 3], 4, 6, 6, [30, 31, 12, 13, 14, 15]),
        # The last chunk only partly used (the request's blocks end inside it).
        ([7, 3], 4, 4, 5, [28, 29, 30, 31, 12]),
    ],
)
def test_mover_blocks_of_a_transfer(
    chunks: list[int], blocks_per_chunk: int, first: int, count: int, expected: list[int]
) -> None:
    assert mover_block_ids(chunks, blocks_per_chunk, first, count) == expected


@pytest.mark.parametrize(("chunks", "count"), [([1], 3), ([1, 2, 3], 2)])
def test_blocks_that_do_not_fit_their_chunks_are_refused(chunks: list[int], count: int) -> None:
    with pytest.raises(ValueError, match="do not fit"):
        mover_block_ids(chunks, 2, 0, count)


class SaltDroppingView(VllmRequestView):
    """Mutant: the view loses the request's cache salt."""

    __slots__ = ()

    def __init__(self, request: Any) -> None:
        super().__init__(request)
        self.cache_salt = ""


def tier_job_salts_of_a_salted_lookup() -> set[str]:
    """The salts of the tier jobs a scheduler side over a Redis tier hands out for the lookup of a
    vLLM request with ``cache_salt="a"`` (its chunk is not in the CPU tier: Redis is probed)."""
    config = OffloadConfig(gpu_block_size=16, blocks_per_chunk=1, num_cpu_blocks=4, policy="lru")
    manager = TieringManager(CPUOffloadingManager(4, "lru"), [SharedTierIndex("redis")])
    side = SchedulerSide(OffloadingScheduler(config, manager))
    request = SimpleNamespace(request_id="r", block_hashes=[b"\x01" * 8, b"\x02" * 8], num_tokens=33, cache_salt="a")
    assert side.get_num_new_matched_tokens(request, 0) == (None, False), "the Redis probe defers the lookup"
    cached = SimpleNamespace(resumed_req_ids=(), req_ids=(), new_block_ids=())
    output = SimpleNamespace(
        scheduled_cached_reqs=cached, scheduled_new_reqs=(), num_scheduled_tokens={}, preempted_req_ids=()
    )
    _, _, tier_jobs = side.build_connector_meta(output)
    assert tier_jobs, "the lookup handed out a probe"
    return {job.salt for job in tier_jobs}


def test_the_tier_jobs_of_a_vllm_request_carry_its_cache_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tier_job_salts_of_a_salted_lookup() == {"a"}
    monkeypatch.setattr(scheduler_side, "VllmRequestView", SaltDroppingView)
    assert tier_job_salts_of_a_salted_lookup() == {""}, "the check catches a view that drops the salt"
