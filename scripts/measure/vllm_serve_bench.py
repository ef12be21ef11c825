"""The serving benchmark: ``vllm serve`` without offloading, with ``KVOffloadConnector``, with
``KVOffloadSpec`` and with vLLM's own CPU manager (its ``OffloadingConnector`` with kvoffload's CPU
worker, ``vllm_own_offloading_spec.py``), each with its default policy and LRU, one server at a time.

Each server runs the multi-turn chat, ``vllm bench serve --dataset-name prefix_repetition`` and a
workload with no reuse (packages/kvoffload-lab/src/kvoffload_lab/benchmarks/serving/); the script
prints one JSON object (TTFT per turn, throughput, prompt tokens by source, step time, ratios to the
server without offloading, the load average at start and end, the command) and, with ``--plot``,
draws it. docs/benchmarks.md has the figures.

    export PYTHONPATH=src:packages/kvoffload-lab/src:packages/tlacheck/src
    .venv-vllm/bin/python scripts/measure/vllm_serve_bench.py --model small --out serve.json --plot serve.png
    python -m kvoffload_lab.benchmarks.serving.plot serve.json serve.png  # the figure again
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from vllm_own_offloading_spec import vllm_own_transfer_config

from kvoffload_lab.benchmarks.serving.client import CompletionClient
from kvoffload_lab.benchmarks.serving.configs import SERVERS, server_configs
from kvoffload_lab.benchmarks.serving.model import MODEL_SHAPES, build_model, parameter_count
from kvoffload_lab.benchmarks.serving.prefix_repetition import PrefixRepetitionShape, run_prefix_repetition
from kvoffload_lab.benchmarks.serving.report import Workloads, measure_server, ratios, replay_command
from kvoffload_lab.benchmarks.serving.server import ServerShape, running, server_env
from kvoffload_lab.benchmarks.serving.workloads import ChatShape, NoReuseShape

ROOT = Path(__file__).resolve().parents[2]
WEIGHT_SCALE = 8.0  # the end-to-end tests' scale (kvoffload_lab.vllm.common.engine): greedy tokens follow the prefix

# Per model size: the chat, prefix_repetition and no-reuse shapes, the engine's KV cache. "tiny" is
# for developing the benchmark; "prefill" has 2k-token histories.
PRESETS: dict[str, tuple[ChatShape, PrefixRepetitionShape, NoReuseShape, int, int]] = {
    "tiny": (ChatShape(users=4, turns=3, system_words=100, flood_prompts=4, flood_words=150, answer_tokens=8),
             PrefixRepetitionShape(prefixes=4, prefix_tokens=256, prompts=16, output_tokens=8),
             NoReuseShape(prompts=8, words=100, answer_tokens=8), 64, 1024),
    "small": (ChatShape(), PrefixRepetitionShape(), NoReuseShape(prompts=16), 64, 1536),
    "prefill": (ChatShape(users=8, system_words=700, first_words=50, later_words=20, flood_prompts=8,
                          flood_words=400, answer_tokens=16),
                PrefixRepetitionShape(prefixes=8, prefix_tokens=1536, prompts=24),
                NoReuseShape(prompts=12, words=600), 96, 2560),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(PRESETS), default="small")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated, of {', '.join(SERVERS)}")
    parser.add_argument("--workloads", default="chat,prefix_repetition,no_reuse")
    parser.add_argument("--num-cpu-blocks", type=int, default=4096)
    parser.add_argument("--users", type=int, help="the chat's users (default: the preset's)")
    parser.add_argument("--qps", type=float, default=0.0, help="chat requests started per second (0: no pacing)")
    parser.add_argument("--work-dir", type=Path, help="model and logs (default: a temporary directory)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--plot", type=Path, help="draw the figure here (needs matplotlib)")
    args = parser.parse_args(argv)
    args.servers = [name for name in args.servers.split(",") if name]
    args.workloads = set(args.workloads.split(","))
    unknown = args.workloads - {"chat", "prefix_repetition", "no_reuse"}
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(sorted(unknown))}")
    unknown_servers = [name for name in args.servers if name not in SERVERS]
    if unknown_servers:
        parser.error(f"unknown server(s) {', '.join(unknown_servers)}: known {', '.join(SERVERS)}")
    return args


def measure(shape: ServerShape, log: Path, transfer: dict[str, Any] | None, env: dict[str, str],
            workloads: Workloads) -> dict[str, Any]:
    """One server started, measured on ``workloads`` and stopped."""
    with running(shape, log, transfer, env) as server:
        client = CompletionClient(server.url)
        try:
            return measure_server(server, client, workloads)
        finally:
            client.close()


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    chat, prefix, no_reuse, gpu_blocks, max_len = PRESETS[args.model]
    chat = replace(chat, users=args.users or chat.users, qps=args.qps)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="serve-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    configs = server_configs(args.servers, args.num_cpu_blocks, vllm_own_transfer_config)
    started = os.getloadavg()
    model_dir = build_model(work / f"model-{args.model}", MODEL_SHAPES.get(args.model, MODEL_SHAPES["small"]),
                            WEIGHT_SCALE)
    shape = ServerShape(model_dir, gpu_blocks=gpu_blocks, max_model_len=max_len, max_num_seqs=chat.concurrency * 2)
    env = server_env(ROOT, (Path(__file__).resolve().parent,))
    servers = {}
    for name, transfer in configs.items():
        def prefix_run(url: str, name: str = name) -> dict[str, float]:
            return run_prefix_repetition(prefix, url, model_dir, work / f"{name}-prefix.json", env)

        workloads = Workloads(chat if "chat" in args.workloads else None,
                              prefix_run if "prefix_repetition" in args.workloads else None,
                              no_reuse if "no_reuse" in args.workloads else None, shape.block_size)
        load = os.getloadavg()
        began = time.monotonic()
        try:
            figures = measure(shape, work / f"{name}.log", transfer, env, workloads)
        except RuntimeError as error:
            # One server failing (its log's tail is in the error) leaves the others' figures.
            figures = {"error": f"{error}\n" + "\n".join(getattr(error, "__notes__", []))}
        servers[name] = {"transfer_config": transfer, "load_average_start": load, "load_average_end": os.getloadavg(),
                         "seconds": time.monotonic() - began, **figures}
        print(f"{name}: {'failed' if 'error' in figures else 'done'} in {servers[name]['seconds']:.0f} s",
              file=sys.stderr)
        # Kept as each server ends: a long run's figures survive an interruption.
        (work / "servers.json").write_text(json.dumps(servers, indent=2))
    return {
        "command": replay_command("scripts/measure/vllm_serve_bench.py", sys.argv[1:]),
        "load_average": {"start": started, "end": os.getloadavg()},
        "model": {"size": args.model, "shape": MODEL_SHAPES.get(args.model, MODEL_SHAPES["small"]),
                  "parameters": parameter_count(MODEL_SHAPES.get(args.model, MODEL_SHAPES["small"]))},
        "engine": {"gpu_blocks": gpu_blocks, "block_size": shape.block_size, "max_model_len": max_len,
                   "max_num_seqs": shape.max_num_seqs, "num_cpu_blocks": args.num_cpu_blocks},
        "workloads": {"chat": asdict(chat), "prefix_repetition": asdict(prefix), "no_reuse": asdict(no_reuse)},
        "servers": servers,
        "ratios_to_baseline": ratios(servers, args.model),
    }


if __name__ == "__main__":
    options = sys.argv[1:]
    report = main(options)
    text = json.dumps(report, indent=2)
    print(text)
    parsed = parse_args(options)
    if parsed.out:
        parsed.out.write_text(text + "\n")
    if parsed.plot:
        from kvoffload_lab.benchmarks.serving.plot import plot

        plot(report, parsed.plot)
