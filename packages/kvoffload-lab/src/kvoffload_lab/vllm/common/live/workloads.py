"""The seeded workloads of the live check: what each run asks of the engine, step by step.

A workload is data (:class:`Workload`): requests with the engine step they arrive at and,
optionally, the step they are aborted at; ``reset_prefix_cache(reset_connector=True)`` calls
before given steps; and the engine's sizes. :func:`workloads` builds one of each kind from a seed:

- ``multi_turn``: conversations whose every turn extends the previous turn's prompt, behind a
  shared system prompt, arriving over several steps;
- ``preempt``: a KV cache just large enough for one long request, so requests are preempted;
- ``abort``: requests aborted mid-generation through the engine's abort API;
- ``reset``: resets between steps, some while finished requests' stores are still in flight;
- ``tiny_cpu``: a CPU tier of two chunks, so ``prepare_store`` must give up and retry;
- ``final_store``: whole outputs offloaded (``offload_prompt_only`` false), the shape of #49635;
- ``double_reset``: two resets back to back, the finding reported in docs/vllm-double-reset.md;
- ``reload`` (not in :data:`KINDS`): a 16-block GPU cache; prompts, then fillers that evict them
  from it, then the prompts again, extended, so their prefixes come back from the CPU tier;
- ``lazy_idle`` (not in :data:`KINDS`): about 26 computed blocks in a 24-block GPU cache, a CPU
  tier of 6 and a token budget of 8 blocks (lazy mode's target: 16 free-or-offloaded blocks).

``offload_prompt_only`` alternates between workloads (vLLM's default is true).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

VOCAB = 1000
BLOCK_SIZE = 32
# Bytes of one block's KV in the tiny model (2 layers x K and V x 32 tokens x 2 heads x 32 x fp32).
BLOCK_BYTES = 2 * 2 * BLOCK_SIZE * 2 * 32 * 4
KINDS: tuple[str, ...] = ("multi_turn", "preempt", "abort", "reset", "tiny_cpu", "final_store")
# Expected to fail in every release that has the double-reset assertion; run on its own.
DOUBLE_RESET = "double_reset"
# Kinds written for SimpleCPUOffloadConnector (kvoffload_lab.vllm.simple.live.judge); any connector runs them.
RELOAD = "reload"
LAZY_IDLE = "lazy_idle"


@dataclass(frozen=True)
class RequestPlan:
    """One greedy ``ignore_eos`` request."""

    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    arrive_step: int = 0
    abort_step: int | None = None


@dataclass(frozen=True)
class Workload:
    """What one run does; ``resets`` maps an engine step to how many resets come before it."""

    name: str
    seed: int
    requests: tuple[RequestPlan, ...]
    resets: dict[int, int] = field(default_factory=dict)
    prompt_only: bool = True
    cpu_chunks: int = 32
    gpu_blocks: int = 48
    max_num_seqs: int = 8
    max_num_batched_tokens: int | None = None  # None: vLLM's default

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        requests = tuple(RequestPlan(**{**r, "prompt": tuple(r["prompt"])}) for r in data["requests"])
        resets = {int(step): int(count) for step, count in data.get("resets", {}).items()}
        return cls(**{**data, "requests": requests, "resets": resets})


def _tokens(rng: random.Random, count: int) -> tuple[int, ...]:
    return tuple(rng.randrange(VOCAB) for _ in range(count))


def _multi_turn(rng: random.Random) -> list[RequestPlan]:
    system = _tokens(rng, BLOCK_SIZE * 2 + rng.randrange(BLOCK_SIZE))
    requests = []
    for conversation in range(3):
        prompt = system
        for turn in range(3):
            prompt = prompt + _tokens(rng, rng.randrange(20, 90))
            requests.append(RequestPlan(f"c{conversation}t{turn}", prompt, rng.randrange(4, 24),
                                        arrive_step=turn * 12 + conversation * rng.randrange(1, 4)))
    return requests


def _simple(rng: random.Random, count: int, prompt_range: tuple[int, int], max_tokens: int) -> list[RequestPlan]:
    shared = _tokens(rng, BLOCK_SIZE * 2)
    return [
        RequestPlan(f"r{i}", shared + _tokens(rng, rng.randrange(*prompt_range)), max_tokens,
                    arrive_step=rng.randrange(0, 6))
        for i in range(count)
    ]


def build(kind: str, seed: int) -> Workload:
    """The workload of ``kind`` (one of :data:`KINDS` or :data:`DOUBLE_RESET`) for ``seed``."""
    rng = random.Random(f"{kind}-{seed}")
    prompt_only = rng.random() < 0.5
    if kind == "multi_turn":
        return Workload(kind, seed, tuple(_multi_turn(rng)), prompt_only=prompt_only)
    if kind == "preempt":
        requests = _simple(rng, 4, (96, 160), 48)
        return Workload(kind, seed, tuple(requests), prompt_only=prompt_only, gpu_blocks=12, max_num_seqs=4)
    if kind == "abort":
        requests = [
            RequestPlan(r.request_id, r.prompt, 40, r.arrive_step,
                        abort_step=r.arrive_step + rng.randrange(2, 20) if i % 2 == 0 else None)
            for i, r in enumerate(_simple(rng, 6, (40, 120), 40))
        ]
        return Workload(kind, seed, tuple(requests), prompt_only=prompt_only)
    if kind == "reset":
        first = _simple(rng, 3, (40, 100), 8)
        later = [RequestPlan(r.request_id + "b", r.prompt, 8, arrive_step=r.arrive_step + 30) for r in first]
        resets = {step: 1 for step in sorted({rng.randrange(10, 30), rng.randrange(30, 45), 60})}
        return Workload(kind, seed, tuple(first + later), resets=resets, prompt_only=prompt_only)
    if kind == "tiny_cpu":
        requests = _simple(rng, 4, (60, 120), rng.choice((1, 8)))
        return Workload(kind, seed, tuple(requests), prompt_only=prompt_only, cpu_chunks=2)
    if kind == "final_store":
        requests = [RequestPlan(f"r{i}", _tokens(rng, 64), 32) for i in range(4)]
        return Workload(kind, seed, tuple(requests), prompt_only=False)
    if kind == DOUBLE_RESET:
        # Three tries: with multiprocessing the engine core may collect the store in flight
        # between the two resets.
        requests = [RequestPlan(f"r{i}", _tokens(rng, 72), 1, arrive_step=4 * i) for i in range(3)]
        return Workload(kind, seed, tuple(requests), resets={4 * i + 1: 2 for i in range(3)}, prompt_only=True)
    if kind == RELOAD:
        first = [RequestPlan(f"p{i}", _tokens(rng, rng.randrange(96, 128)), 8, arrive_step=i) for i in range(4)]
        fillers = [RequestPlan(f"f{i}", _tokens(rng, rng.randrange(120, 160)), 8, arrive_step=14 + 2 * i)
                   for i in range(3)]
        again = [RequestPlan(f"{r.request_id}b", r.prompt + _tokens(rng, rng.randrange(8, 40)), 8,
                             arrive_step=34 + 2 * i) for i, r in enumerate(first)]
        return Workload(kind, seed, tuple(first + fillers + again), prompt_only=prompt_only, cpu_chunks=64,
                        gpu_blocks=16)
    if kind == LAZY_IDLE:
        requests = [RequestPlan(f"r{i}", _tokens(rng, rng.randrange(130, 160)), 4, arrive_step=i) for i in range(6)]
        return Workload(kind, seed, tuple(requests), prompt_only=prompt_only, cpu_chunks=6, gpu_blocks=24,
                        max_num_batched_tokens=8 * BLOCK_SIZE)
    known = (*KINDS, DOUBLE_RESET, RELOAD, LAZY_IDLE)
    raise ValueError(f"unknown workload kind {kind!r}; known: {', '.join(known)}")


def workloads(seed: int, kinds: tuple[str, ...] = KINDS) -> list[Workload]:
    """One workload of each kind for ``seed``."""
    return [build(kind, seed) for kind in kinds]
