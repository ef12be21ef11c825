"""One engine with tiers in its own process, for the two-engine test: ``python tier_engine_process.py
MODEL_DIR CONFIG_JSON PROMPTS_JSON`` prints one JSON line: the greedy outputs, the cached tokens
per prompt, vLLM's external prefix-cache hits and the connector's tier counters."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kvoffload.vllm.harness import Engine, run_batches


def main() -> None:
    model_dir, config, prompts = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
    engine = Engine(model_dir, config, block_size=32, num_gpu_blocks=48)
    try:
        report = run_batches(engine, [[prompt] for prompt in prompts], 16)
    finally:
        engine.shutdown()
    print(json.dumps({
        "outputs": report.outputs, "cached": [c[0] for c in report.cached_tokens],
        "external_hit_tokens": report.external_hit_tokens, "tiers": report.kvoffload.get("tiers", {}),
        "violations": report.violations, "leaks": report.leaks,
    }))


if __name__ == "__main__":
    main()
