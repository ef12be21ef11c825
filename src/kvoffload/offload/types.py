"""Plain data shared by the scheduler, the manager, the worker and the engine adapter.

Records created on the hot path (jobs, store plans, events) are NamedTuples: immutable like frozen
dataclasses, but about three times cheaper to build, which the per-step budget needs.

A *chunk* is ``blocks_per_chunk`` consecutive GPU blocks of one request; it is the unit of
offloading, and one CPU block holds one chunk. A chunk's key is the chained block hash of its last
GPU block, so equal keys mean equal token prefixes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

OffloadKey = int
JobId = int
RequestId = str
JobKind = Literal["load", "store"]

# The eviction policy of OffloadConfig, the simulator and the commands: best on the Mooncake
# production trace for CPU tiers up to 8x the GPU cache, and on the simulator under memory
# pressure (docs/policies.md).
DEFAULT_POLICY = "doorkeeper_lfu"


class EngineRequest(Protocol):
    """What the scheduler reads of an engine request (vLLM's ``Request`` has these)."""

    @property
    def request_id(self) -> RequestId: ...

    @property
    def block_hashes(self) -> Sequence[int]:
        """One chained hash per *full* GPU block of the request's tokens so far."""
        ...

    @property
    def num_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a manager is told of a request when it is announced (vLLM's ``ReqContext`` idea).

    ``cache_salt``: the tenant's salt; shared tiers namespace the request's chunks with it, so
    requests with different salts never share a chunk there ("" is no salt).
    """

    cache_salt: str = ""


NO_CONTEXT = RequestContext()


@dataclass(frozen=True)
class OffloadConfig:
    """Sizes of the offloading tier.

    ``gpu_block_size`` tokens per GPU block; ``blocks_per_chunk`` GPU blocks per CPU block;
    ``num_cpu_blocks`` CPU blocks (chunks) in the pool; ``policy`` the eviction policy's name.

    ``kv_groups``: GPU blocks per engine block, one per KV cache group (vLLM's hybrid KV cache
    manager gives each group its own blocks); a request's GPU block list then names, per engine
    block, each group's block in group order, and a chunk is ``blocks_per_chunk * kv_groups`` of
    them. ``null_block``: the engine's placeholder id where a group holds no block for a request's
    tokens (vLLM's null block, for sliding-window blocks out of the window): a chunk naming it is
    never stored, and a load does not copy into it.

    ``window_groups``: ``(group, window tokens)`` of each sliding-window group
    (:mod:`kvoffload.offload.windows`): a chunk whose only null blocks are in these groups is
    stored without its window part, and a hit needs the window parts of its last window only.
    """

    gpu_block_size: int = 16
    blocks_per_chunk: int = 1
    num_cpu_blocks: int = 1024
    policy: str = DEFAULT_POLICY
    kv_groups: int = 1
    null_block: int | None = None
    window_groups: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        for name in ("gpu_block_size", "blocks_per_chunk", "num_cpu_blocks", "kv_groups"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"OffloadConfig.{name} must be a positive integer, got {value!r}")
        for group, window in self.window_groups:
            if not 0 <= group < self.kv_groups or window < 1 or self.null_block is None:
                raise ValueError(
                    f"OffloadConfig.window_groups {self.window_groups}: each is (a group below kv_groups="
                    f"{self.kv_groups}, a positive window), and needs a null_block"
                )

    @classmethod
    def from_block_sizes(
        cls, gpu_block_size: int, offloaded_block_size: int, num_cpu_blocks: int, policy: str = DEFAULT_POLICY
    ) -> OffloadConfig:
        """Build from token counts, as engines configure it: the offloaded (CPU) block size must be
        a whole number of GPU blocks."""
        if gpu_block_size < 1 or offloaded_block_size < 1:
            raise ValueError(
                f"block sizes must be positive (gpu_block_size={gpu_block_size}, "
                f"offloaded_block_size={offloaded_block_size})"
            )
        if offloaded_block_size % gpu_block_size:
            raise ValueError(
                f"offloaded_block_size={offloaded_block_size} is not a multiple of "
                f"gpu_block_size={gpu_block_size}: a CPU block must hold whole GPU blocks"
            )
        return cls(gpu_block_size, offloaded_block_size // gpu_block_size, num_cpu_blocks, policy)

    @property
    def chunk_tokens(self) -> int:
        return self.gpu_block_size * self.blocks_per_chunk

    @property
    def gpu_blocks_per_chunk(self) -> int:
        """GPU blocks one chunk covers: every group's blocks for its tokens."""
        return self.blocks_per_chunk * self.kv_groups


class TransferJob(NamedTuple):
    """One batched copy of whole chunks: ``gpu_block_ids[i]`` <-> sub-block ``i`` of the chunks.

    ``cpu_block_ids`` are manager CPU blocks (one per chunk); the GPU side lists
    ``blocks_per_chunk`` GPU blocks per chunk, in order.
    """

    job_id: JobId
    request_id: RequestId
    kind: JobKind
    keys: tuple[OffloadKey, ...]
    gpu_block_ids: tuple[int, ...]
    cpu_block_ids: tuple[int, ...]


@dataclass(frozen=True)
class ConnectorMetadata:
    """What the scheduler tells the worker for one engine step, in the worker's order:
    wait for ``flush`` jobs, then submit ``stores``, then ``loads``."""

    step: int
    flush: tuple[JobId, ...] = ()
    stores: tuple[TransferJob, ...] = ()
    loads: tuple[TransferJob, ...] = ()


@dataclass(frozen=True)
class WorkerOutput:
    """Job outcomes reported by the worker: ``{job_id: True (done) | False (failed)}``."""

    completed: Mapping[JobId, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulerOutput:
    """The engine's decisions for one step, as the connector needs them.

    ``num_scheduled_tokens``: tokens each running request computes this step (draft tokens
    included);
    ``new_block_ids``: GPU blocks newly allocated this step to requests already running;
    ``preempted``: requests whose GPU blocks the engine took back this step.

    Speculative decoding (vLLM: ``scheduled_spec_decode_tokens`` and the ``num_rejected`` of
    ``Scheduler.update_from_output``, which lowers ``request.num_computed_tokens``):
    ``num_draft_tokens``: how many of a request's scheduled tokens this step are unverified drafts;
    ``num_rejected_tokens``: how many drafts of the request's previous step verification rejected
    (0 when all were accepted). A request scheduled again after a step with drafts must be listed
    here; a finished request may be, and its unverified drafts are never stored either way.
    """

    num_scheduled_tokens: Mapping[RequestId, int] = field(default_factory=dict)
    new_block_ids: Mapping[RequestId, Sequence[int]] = field(default_factory=dict)
    preempted: Sequence[RequestId] = ()
    num_draft_tokens: Mapping[RequestId, int] = field(default_factory=dict)
    num_rejected_tokens: Mapping[RequestId, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectorUpdate:
    """What ``update_connector_output`` tells the engine back.

    ``loaded``: requests whose load finished (their external tokens are in GPU memory);
    ``load_failed``: requests whose load failed: the engine must recompute those tokens;
    ``released``: finished requests whose GPU blocks the engine may now free (their stores drained).
    """

    loaded: tuple[RequestId, ...] = ()
    load_failed: tuple[RequestId, ...] = ()
    released: tuple[RequestId, ...] = ()


class StorePlan(NamedTuple):
    """The manager's answer to ``prepare_store``: which keys to write, where, and what it evicted."""

    keys_to_store: tuple[OffloadKey, ...]
    cpu_block_ids: tuple[int, ...]
    evicted_keys: tuple[OffloadKey, ...]


class OffloadEvent(NamedTuple):
    """A change of the CPU tier, for KV-cache event consumers (routers, metrics)."""

    keys: tuple[OffloadKey, ...]
    removed: bool
    medium: str = "CPU"
