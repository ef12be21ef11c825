"""Reproduce, with vLLM's scheduler and connector alone, what the checkers find in
``SimpleCPUOffloadConnector``.

No kvoffload model or worker: each scenario drives vLLM's ``Scheduler`` (built by
:func:`kvoffload_lab.vllm.simple.build.build_scheduler` from vLLM's config classes) and answers every
step as a worker would, reporting each store complete through vLLM's own
``SimpleCPUOffloadWorkerMetadata`` when the scenario says its copy finished.

- ``final_block`` (vLLM #41704): a request whose last full block is computed in the step it
  finishes in; afterwards that block is not in the CPU tier. Lost in 0.26.0-0.29.0.
- ``idle_store``: a request finishes while its last store is still copying (the copy outlasts one
  empty step); ``Scheduler.has_requests()`` turns false, so the engine stops stepping, while the
  connector still waits for that store: its GPU and CPU blocks stay pinned and the stored blocks
  stay out of the CPU cache until a new request wakes the engine. The connector's
  ``has_pending_transfers()`` says so, but the scheduler asks ``has_pending_push_work()``.
  0.26.0-0.29.0.
- ``lazy_never_idle``: lazy offload, a CPU tier that holds fewer blocks than the cached GPU blocks
  its walk covers (the first twice-the-token-budget blocks of the GPU free queue), and copies that
  take longer than one step: an engine with no request left never stops stepping. The walk's cursor
  is the block it stored last, which its own store still pins, so the next step takes the cursor for
  stale and walks from the head again, re-storing the blocks the last stores evicted from the CPU
  tier; ``has_pending_push_work()`` stays true. 0.30.0 on (before, the engine goes idle instead:
  ``idle_store``).

``python scripts/repro_simple.py [--vllm-src DIR] [SCENARIO ...]`` prints one line per
scenario, ``name: outcome``, and exits 0 (the outcomes are what scripts/check_vllm_simple_release.py
compares per release).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from kvoffload_lab.vllm.simple.build import SimpleShape, build_scheduler

BLOCK = 4
IDLE_STEPS = 200


def _request(request_id: str, prompt: list[int], max_tokens: int) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    return Request(request_id=request_id, prompt_token_ids=prompt, pooling_params=None,
                   sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                   block_hasher=get_request_block_hasher(BLOCK, sha256))


class _Engine:
    """vLLM's scheduler stepped as its engine core does; a store launched in one step is reported
    complete ``copy_steps`` steps later (when ``step`` is told it may complete)."""

    def __init__(self, shape: SimpleShape, copy_steps: int = 1) -> None:
        self.scheduler, _, _ = build_scheduler(shape)
        self.copy_steps = copy_steps
        self.in_flight: list[tuple[int, int]] = []  # (store event, steps left)
        self.stores = 0

    def step(self, complete: bool = True) -> None:
        """One step; with ``complete`` every store whose copy time is up is reported done."""
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
        from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata

        from kvoffload_lab.vllm.common.vllm_objects import scheduler_output_fields

        output = self.scheduler.schedule()
        metadata = output.kv_connector_metadata
        aged = [(event, left - 1) for event, left in self.in_flight]
        done = [event for event, left in aged if left <= 0] if complete else []
        self.in_flight = [(event, left) for event, left in aged if event not in done]
        if metadata.store_event >= 0:
            self.in_flight.append((metadata.store_event, self.copy_steps))
            self.stores += 1
        ids = list(output.num_scheduled_tokens)
        sampled = [[7] if self.scheduler.requests[r].num_computed_tokens >= self.scheduler.requests[r].num_tokens
                    else [] for r in ids]
        loads = set().union(*metadata.load_event_to_reqs.values()) if metadata.load_event_to_reqs else None
        worker_meta = SimpleCPUOffloadWorkerMetadata({event: 1 for event in done}) if done else None
        # ModelRunnerOutput's fields differ by release (0.34.0 dropped req_id_to_index).
        self.scheduler.update_from_output(output, ModelRunnerOutput(**scheduler_output_fields(ModelRunnerOutput, {
            "req_ids": ids, "req_id_to_index": {r: i for i, r in enumerate(ids)}, "sampled_token_ids": sampled,
            "logprobs": None, "prompt_logprobs_dict": {}, "pooler_output": [],
            "kv_connector_output": KVConnectorOutput(finished_recving=loads, kv_connector_worker_meta=worker_meta),
        })))

    @property
    def manager(self) -> Any:
        return self.scheduler.connector.scheduler_manager


def final_block() -> str:
    """``stored`` or ``lost``: the finished request's last full block in the CPU tier afterwards."""
    engine = _Engine(SimpleShape(block_size=BLOCK, gpu_blocks=8, cpu_blocks=16))
    # Seven prompt tokens and two out: position 7, the second block's last, is computed in the
    # request's final step.
    request = _request("r", [1] * BLOCK + [2] * (BLOCK - 1), 2)
    engine.scheduler.add_request(request)
    for _ in range(6):  # past the finish, until every store was reported
        engine.step()
    pool = engine.manager.cpu_block_pool
    cached = [bool(pool.get_cached_block(h, [0])) for h in request.block_hashes[:2]]
    return "stored" if all(cached) else f"lost (blocks cached in the CPU tier: {cached})"


def idle_store() -> str:
    """``idle with a store pending`` or ``steps until the store is reported``."""
    engine = _Engine(SimpleShape(block_size=BLOCK, gpu_blocks=8, cpu_blocks=16))
    engine.scheduler.add_request(_request("r", [1] * (2 * BLOCK), 2))
    engine.step()  # the prefill
    engine.step()  # the last token; the two prompt blocks are stored from here
    steps = 0
    while engine.scheduler.has_requests() and steps < IDLE_STEPS:
        engine.step(complete=steps > 0)  # the copy outlasts the first empty step
        steps += 1
    if engine.manager.has_pending_stores():
        return f"idle with a store pending (has_requests() false after {steps} step(s))"
    return f"steps until the store is reported ({steps} step(s))"


def lazy_never_idle() -> str:
    """``never idle`` or ``idle``, with the stores issued after the last request finished."""
    # Six GPU blocks, two in the CPU tier, a walk of four blocks (twice the 8-token budget), and
    # copies that take two steps.
    shape = SimpleShape(block_size=BLOCK, gpu_blocks=6, cpu_blocks=3, max_batched_tokens=8, max_seqs=2, lazy=True)
    engine = _Engine(shape, copy_steps=2)
    engine.scheduler.add_request(_request("r0", [1] * BLOCK + [2] * (BLOCK - 1), 2))
    engine.scheduler.add_request(_request("r1", [1] * BLOCK + [2] * (BLOCK - 1) + [3] * BLOCK, 2))
    while engine.scheduler.requests:
        engine.step()
    before, steps = engine.stores, 0
    while engine.scheduler.has_requests() and steps < IDLE_STEPS:
        engine.step()
        steps += 1
    issued = engine.stores - before
    if engine.scheduler.has_requests():
        return f"never idle ({steps} steps with no request, {issued} store(s) issued)"
    return f"idle after {steps} step(s) ({issued} store(s) issued)"


SCENARIOS: dict[str, Callable[[], str]] = {
    "final_block": final_block, "idle_store": idle_store, "lazy_never_idle": lazy_never_idle,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/repro_simple.py", description=__doc__)
    parser.add_argument("--vllm-src", default=None, metavar="DIR", help="vLLM sources (default: installed)")
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"any of {', '.join(SCENARIOS)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        print(f"repro: unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    import logging
    import os

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    from kvoffload_lab.vllm.common.locate import VllmNotFound, locate_vllm

    try:
        install = locate_vllm(args.vllm_src, simple=True)
    except VllmNotFound as error:
        print(f"repro: {error}", file=sys.stderr)
        return 2
    for name in args.scenarios or SCENARIOS:
        print(f"vLLM {install.version} {name}: {SCENARIOS[name]()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
