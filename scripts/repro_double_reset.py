"""Reproduce, with vLLM's classes alone, the failing assertion the checkers found in 0.26.0 to 0.33.0.

Two ``reset_cache`` calls between two engine steps while a transfer job is in flight: the first
moves the in-flight jobs to ``_current_batch_jobs_to_flush`` (handed to the worker and emptied by
the next step's ``build_connector_meta``), the second asserts that this set is empty and raises
``AssertionError``. In an engine that is ``reset_prefix_cache(reset_connector=True)`` twice with no
step in between: the call fails and the engine survives (EngineCore in its own process catches it,
the caller gets "Call to reset_prefix_cache method failed: ").
:mod:`kvoffload_lab.vllm.offloading.repro_double_reset_engine` shows it in a real engine,
docs/vllm-double-reset.md reports it.

``python scripts/repro_double_reset.py [--vllm-src DIR]`` prints the outcome; exit 1
when the assertion fails, 0 when the connector takes the second reset.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any


def reproduce() -> str | None:
    """The failure as ``Type at file:line`` (None when the second reset passes)."""
    from kvoffload_lab.vllm.offloading.build import ConnectorShape, build_connector, shutdown_connector

    connector, vllm_config = build_connector("lru", ConnectorShape(block_size=4, gpu_blocks=8, cpu_chunks=4))
    try:
        return _double_reset(connector)
    finally:
        shutdown_connector(connector, vllm_config)


def _double_reset(connector: Any) -> str | None:
    """One request's store in flight (the worker reported nothing), then two resets."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.kv_cache_utils import KVCacheBlock, get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request, RequestStatus

    from kvoffload_lab.vllm.common.vllm_objects import scheduler_output_fields

    init_none_hash(sha256)
    request = Request(request_id="r1", prompt_token_ids=[1] * 9, sampling_params=SamplingParams(max_tokens=1),
                      pooling_params=None, block_hasher=get_request_block_hasher(4, sha256))
    connector.on_new_request(request)
    connector.get_num_new_matched_tokens(request, 0)
    blocks = [1, 2, 3]
    connector.update_state_after_alloc(request, KVCacheBlocks(([KVCacheBlock(block_id=b) for b in blocks],)), 0)

    def step(scheduled: dict[str, int], new: list, finished: set[str]) -> Any:
        output = SchedulerOutput(**scheduler_output_fields(SchedulerOutput, {
            "scheduled_new_reqs": new, "scheduled_cached_reqs": CachedRequestData.make_empty(),
            "num_scheduled_tokens": scheduled, "total_num_scheduled_tokens": sum(scheduled.values()),
            "scheduled_spec_decode_tokens": {}, "scheduled_encoder_inputs": {}, "num_common_prefix_blocks": [0],
            "finished_req_ids": finished, "free_encoder_mm_hashes": [], "preempted_req_ids": set(),
        }))
        meta = connector.build_connector_meta(output)
        connector.update_connector_output(
            KVConnectorOutput(kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs={}))
        )
        return meta

    request.status = RequestStatus.RUNNING
    # Its prefill tokens are all its tokens, as vLLM's scheduler passes them (required from 0.34.0).
    first = step({"r1": 9}, [NewRequestData.from_request(request, (blocks,), list(request.all_token_ids))], set())
    request.num_computed_tokens = 9
    request.append_output_token_ids([5])
    request.status = RequestStatus.FINISHED_LENGTH_CAPPED
    connector.request_finished(request)
    last = step({}, [], {"r1"})  # the worker has finished no job yet
    in_flight = sorted({*first.store_jobs, *last.store_jobs})
    connector.reset_cache()
    try:
        connector.reset_cache()
    except AssertionError as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        path = frame.filename[frame.filename.rfind("/vllm/") + 1:]
        return f"AssertionError at {path}:{frame.lineno} in {frame.name} (store jobs in flight: {in_flight})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default=None)
    args = parser.parse_args(argv)
    from kvoffload_lab.vllm.common.locate import VllmNotFound, locate_vllm

    try:
        install = locate_vllm(args.vllm_src)
    except VllmNotFound as error:
        print(f"repro_double_reset: error: {error}", file=sys.stderr)
        return 2
    crash = reproduce()
    print(f"vLLM {install.version}: second reset_cache between two steps -> " + (crash or "no crash"))
    return 1 if crash else 0


if __name__ == "__main__":
    sys.exit(main())
