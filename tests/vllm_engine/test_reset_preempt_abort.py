"""A request preempted by ``reset_prefix_cache(reset_running_requests=True, reset_connector=True)``
and aborted before the next step, in a real engine (``make check-vllm-engine``).

vLLM preempts every running request inside ``reset_prefix_cache`` (between two steps) and lists
those preemptions in the next step's ``SchedulerOutput.preempted_req_ids`` whether or not a
request was aborted meanwhile (vllm/v1/core/sched/scheduler.py 0.32.0: ``_preempt_request``
adds to ``reset_preempted_req_ids``, line 1614, which ``schedule()`` reports, line 1509, and
clears only after scheduling, line 1648). kvoffload's scheduler refused that late preemption of a
finished request (``IllegalTransition`` from ``build_connector_meta``: the engine died); the
simulator's hypothesis machine found it. Every run must give the tokens of the run without
offloading, for both integrations, and a later request with the same prefix must still work.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from kvoffload_lab.vllm.common.engine import (
    InProcessEngine,
    build_tiny_model,
    connector_transfer_config,
    kvoffload_state,
    spec_transfer_config,
)

BLOCK_SIZE = 32
MAX_TOKENS = 16
INTEGRATIONS: dict[str, Callable[[], dict[str, Any] | None]] = {
    "baseline": lambda: None,
    "connector": lambda: connector_transfer_config(256),
    "spec": lambda: spec_transfer_config(256),
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _schedule(engine: InProcessEngine, prompts: list[list[int]], reset_after: int, abort: int) -> dict[str, list[int]]:
    """Step the engine; after ``reset_after`` steps reset with every running request preempted,
    abort request ``abort`` at once, then step to the end. Tokens per request id."""
    from vllm import SamplingParams

    llm_engine = engine.llm.llm_engine
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    ids = [f"r{index}" for index in range(len(prompts))]
    for request_id, prompt in zip(ids, prompts, strict=True):
        llm_engine.add_request(request_id, {"prompt_token_ids": prompt}, params)
    tokens: dict[str, list[int]] = {}
    steps = 0
    while llm_engine.has_unfinished_requests():
        for output in llm_engine.step():
            tokens[output.request_id] = list(output.outputs[0].token_ids)
        steps += 1
        if steps == reset_after:
            engine.llm.reset_prefix_cache(reset_running_requests=True, reset_connector=True)
            llm_engine.abort_request([ids[abort]])
    return tokens


def _workload() -> tuple[list[list[int]], list[int]]:
    rng = random.Random(3)
    shared = [rng.randrange(1000) for _ in range(3 * BLOCK_SIZE)]
    prompts = [shared + [rng.randrange(1000) for _ in range(BLOCK_SIZE + 5)] for _ in range(3)]
    return prompts, shared + [rng.randrange(1000) for _ in range(7)]


@pytest.mark.parametrize("reset_after", [2, 6])
def test_a_request_aborted_after_a_reset_that_preempted_it(model_dir: Path, reset_after: int) -> None:
    prompts, again = _workload()
    runs: dict[str, tuple[dict[str, list[int]], list[list[int]]]] = {}
    for name, config in INTEGRATIONS.items():
        engine = InProcessEngine(model_dir, config(), block_size=BLOCK_SIZE, num_gpu_blocks=32)
        try:
            tokens = _schedule(engine, prompts, reset_after, abort=1)
            later, _ = engine.generate([again], MAX_TOKENS)
            engine.drain()
            violations, leaks, _ = kvoffload_state(engine.scheduler_connector)
            assert (violations, leaks) == ([], []), f"{name}: {violations} {leaks}"
        finally:
            engine.shutdown()
        runs[name] = (tokens, later)
    baseline_tokens, baseline_later = runs.pop("baseline")
    for name, (tokens, later) in runs.items():
        for request_id in ("r0", "r2"):
            assert tokens[request_id] == baseline_tokens[request_id], f"{name}: {request_id} differs"
        aborted, expected = tokens.get("r1", []), baseline_tokens.get("r1", [])
        shorter = min(len(aborted), len(expected))
        assert aborted[:shorter] == expected[:shorter], f"{name}: the aborted request's tokens differ"
        assert later == baseline_later, f"{name}: the prefix sent again differs"
