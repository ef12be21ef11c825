"""One engine in its own process, for the two-engine and tensor-parallel tests: ``python
tier_engine_process.py MODEL_DIR CONFIG_JSON BATCHES_JSON [TENSOR_PARALLEL_SIZE [ENGINE_JSON]]`` runs
each batch of prompts in turn and prints one JSON line: the greedy outputs and cached tokens per
prompt, and vLLM's external prefix-cache hits (CONFIG_JSON ``null``: no offloading). ENGINE_JSON
overrides :data:`ENGINE` (the engine's sizes and ``max_tokens``, the tokens generated per prompt).

With vLLM's multiprocessing on and the ``mp`` executor: the engine core (scheduler side of the
connector) and the workers run in processes of their own, so tier jobs and outcomes cross
processes in the connector metadata. The engine core steps on its own until its connector
reports no pending work (tier jobs included); the script waits for that before shutting down.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

SETTLE_S = 3.0
ENGINE = {"block_size": 32, "num_gpu_blocks": 48, "max_tokens": 16}


def main() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    from kvoffload_lab.vllm.common.engine import InProcessEngine

    model_dir, config, batches = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
    tensor_parallel_size = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    options = {**ENGINE, **(json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})}
    max_tokens = options.pop("max_tokens")
    engine = InProcessEngine(model_dir, config, distributed_executor_backend="mp",
                             tensor_parallel_size=tensor_parallel_size, **options)
    try:
        outputs, cached = [], []
        for batch in batches:
            output, hits = engine.generate(batch, max_tokens)
            outputs += output
            cached += hits
        # The last cascades to a tier report a step or two after the outputs.
        time.sleep(SETTLE_S)
        external_hits = engine.counters()[1]
    finally:
        engine.shutdown()
    print(json.dumps({"outputs": outputs, "cached": cached, "external_hit_tokens": external_hits}))


if __name__ == "__main__":
    main()
