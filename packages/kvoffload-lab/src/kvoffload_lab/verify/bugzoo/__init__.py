"""Historical bugs of real KV offloading connectors, each reintroduced as a mutant of our code.

``MUTANTS`` maps a name to a :class:`Mutant`: build the buggy system with
``mutant.make_scheduler(config)`` (and ``mutant.make_manager(num_blocks, policy)``); a worker-side
bug is ``mutant.worker_report``, the function that turns the worker's true report into its lie.
The explorer (``kvoffload explore --mutant NAME``)
must catch every one with a short counterexample; ``tests/test_bugzoo.py`` checks that it does,
with the invariant each mutant declares.
"""

from __future__ import annotations

from kvoffload_lab.verify.bugzoo.manager_bugs import (
    EvictWhileLoadingManager,
    FailedStoreDoubleFreeManager,
    FailedStoreLeakManager,
)
from kvoffload_lab.verify.bugzoo.mutant import Mutant, explore_model_for
from kvoffload_lab.verify.bugzoo.scheduler_bugs import (
    AbortUnscheduledStoresScheduler,
    DropStateOnFinishScheduler,
    EagerFinishSignalScheduler,
    FenceSkippedWithoutExternalTokensScheduler,
    PreemptWithoutFlushScheduler,
    ReadmitWhileFlushingScheduler,
    ResetLeavesStaleJobsScheduler,
    StoreGpuHitEarlyScheduler,
)
from kvoffload_lab.verify.bugzoo.speculative_decoding_bugs import StoreDraftsScheduler
from kvoffload_lab.verify.bugzoo.worker_bugs import report_failure_as_done

_ALL = (
    Mutant(
        "eager_finish_signal", "vLLM #49635", "NoManagerCallAfterSignal",
        "on_request_finished is called in request_finished, before the final store is prepared",
        scheduler_class=EagerFinishSignalScheduler,
        simulate_options=("--users", "5", "--turns", "2", "--gpu-blocks", "40", "--seed", "2"),
        trace_visible=True,
    ),
    Mutant(
        "drop_state_on_finish", "vLLM #46027", "CleanOnlyWhenDrained",
        "a finished request's state is dropped while its store jobs are still in flight",
        scheduler_class=DropStateOnFinishScheduler,
        # The late completion finds no request: the KeyError the real connector raised.
        also_caught_by=("Crash",),
    ),
    Mutant(
        "readmit_while_flushing", "vLLM #46014", "JobsExclusive",
        "a preempted request is re-admitted with a load while its flushed stores have not reported",
        scheduler_class=ReadmitWhileFlushingScheduler,
        # It moves the request to waiting behind the declared machine's back, which a trace shows.
        also_caught_by=("DeclaredLifecycle",),
        # The re-admission must load: without GPU prefix caching it does (with it, the request hits
        # its own freed blocks, still cached), and a one-request GPU pool reuses them at once.
        explore_options=(("gpu_pool_requests", 1), ("gpu_prefix_cache", False)),
    ),
    Mutant(
        "abort_unscheduled_stores", "vLLM #49118", "DataIntegrity",
        "aborting a never-scheduled request stores keys it has no GPU blocks for",
        scheduler_class=AbortUnscheduledStoresScheduler,
    ),
    Mutant(
        "reset_leaves_stale_jobs", "vLLM #48090", "EventuallyCleaned",
        "reset_cache leaves stale jobs attached to live requests, which then wait forever",
        scheduler_class=ResetLeavesStaleJobsScheduler,
        # The request that survives reset_cache is signaled with chunks it will never store; the
        # declared lifecycle refuses to clean a request that still lists jobs.
        also_caught_by=("SignalAfterFinalStore", "DeclaredLifecycle"),
        simulate_options=(
            "--users", "6", "--turns", "2", "--gpu-blocks", "24", "--cpu-blocks", "16",
            "--faults", "0.3", "--delay", "2",
        ),
        trace_visible=True,
    ),
    Mutant(
        "preempt_without_flush", "vLLM #29870", "GpuBlockFence",
        "preemption frees GPU blocks without flushing the stores still reading them",
        scheduler_class=PreemptWithoutFlushScheduler,
        # Freed blocks go to the back of the free queue: a one-request GPU pool hands them out next.
        explore_options=(("gpu_pool_requests", 1),),
    ),
    Mutant(
        "fence_skipped_without_external_tokens", "vLLM #46951", "GpuBlockFence",
        "the GPU-block fence is skipped when the new request loads no external tokens",
        scheduler_class=FenceSkippedWithoutExternalTokensScheduler,
        # Freed blocks go to the back of the free queue: a one-request GPU pool hands them out next.
        explore_options=(("gpu_pool_requests", 1),),
    ),
    Mutant(
        "store_gpu_hit_early", "kvoffload KVOffloadConnector (split GPU/CPU prefix)", "DataIntegrity",
        "a GPU prefix-cache hit is stored in its admission step, before the forward pass writes the blocks",
        scheduler_class=StoreGpuHitEarlyScheduler,
        # The store is still in flight when the forward pass writes the hit blocks.
        also_caught_by=("GpuBlockFence",),
        # A burst of first turns over two system prompts: one prompt's blocks are hit in the step
        # that computes them, and later evicted from the GPU and loaded back from CPU. With no
        # transfer delay the store copies before the forward pass, as the worker does.
        simulate_options=(
            "--users", "6", "--turns", "3", "--gpu-blocks", "24", "--delay", "0", "--arrival-spread", "0",
            "--system-prompts", "2",
        ),
    ),
    Mutant(
        "evict_while_loading", "LMCache #3381, SGLang #35769", "NoEvictWhileInUse",
        "a CPU block being loaded from is evicted and reused",
        manager_class=EvictWhileLoadingManager,
        # The load's completion finds its key evicted: the KeyError of the real connectors.
        also_caught_by=("Crash",),
        # With one CPU block, the next store must evict the block being loaded from. Without GPU
        # prefix caching, the second request loads the shared chunk the first still holds and stores.
        explore_options=(("cpu_blocks", 1), ("gpu_prefix_cache", False)),
    ),
    Mutant(
        "failed_store_leak", "offloading connectors' store error paths", "NoLeak",
        "a failed store forgets its keys without returning their CPU blocks",
        manager_class=FailedStoreLeakManager,
    ),
    Mutant(
        "failed_store_double_free", "offloading connectors' store error paths", "NoLeak",
        "a failed store returns its CPU blocks to the free list twice",
        manager_class=FailedStoreDoubleFreeManager,
        # The pool accounting check (NoLeak) sees it at quiescence; reuse of the block twice, later.
        also_caught_by=("NoEvictWhileInUse",),
    ),
    Mutant(
        "store_rejected_drafts", "speculative decoding (vLLM lowers num_computed_tokens)", "DataIntegrity",
        "draft tokens count as computed and rejections are ignored, so a chunk holding a rejected draft is stored",
        scheduler_class=StoreDraftsScheduler,
        explore_options=(("speculative_decoding", True),),
        # The store still reads the draft's block when the next forward pass rewrites it.
        also_caught_by=("GpuBlockFence",),
    ),
    Mutant(
        "failure_reported_as_done", "Dynamo #15079", "DataIntegrity",
        "the worker reports a failed transfer as done, so garbage is loaded or served",
        worker_report=report_failure_as_done,
        # Garbage must be loaded: without GPU prefix caching a request loads what another stored
        # (with it, a freed block stays cached and is hit instead), in a one-request GPU pool.
        explore_options=(("gpu_pool_requests", 1), ("gpu_prefix_cache", False)),
    ),
)

MUTANTS: dict[str, Mutant] = {mutant.name: mutant for mutant in _ALL}

__all__ = ["MUTANTS", "Mutant", "explore_model_for"]
