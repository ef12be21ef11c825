"""Runs live-check workloads in real vLLM engines: one process per mode, many engines in turn.

``python -m kvoffload_lab.vllm.live PLAN.json OUT.json`` (:mod:`kvoffload_lab.vllm.live.__main__`,
which gives :func:`main` the connectors of :mod:`kvoffload_lab.vllm.live.registry`) reads a plan (the
mode, the model folder, and runs: a workload, a connector and its manager, or ``none`` for the run
without offloading), sets
``VLLM_ENABLE_V1_MULTIPROCESSING`` for the mode before vLLM is imported (``inproc``: the engine
core in this process; ``mp``: in its own process, with the worker in another, as ``vllm serve``
runs it), runs each workload step by step through ``LLMEngine`` and writes what each run did:
the tokens of every request, the resets and what they returned or raised, whether the engine
died, and the seconds. What the connector saw is in each run's folder (:mod:`.logs`).

The connector's row (:class:`~.interface.LiveConnector`) gives the engine's ``kv_transfer_config``
and how many steps the drain of an idle in-process engine may take; the outcome says how many it
took and whether the engine still had work.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.common.live.workloads import BLOCK_SIZE, Workload

BASELINE = "none"
MAX_STEPS = 2_000
IDLE_STEP_S = 0.02


@dataclass
class RunOutcome:
    """What one run did, as the driver saw it from outside the engine."""

    workload: str
    connector: str
    manager: str
    mode: str
    folder: str
    tokens: dict[str, list[int]] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)
    error: str | None = None
    steps: int = 0
    drain_steps: int = 0
    drain_busy: bool = False
    seconds: float = 0.0


def _build_llm(model_dir: Path, workload: Workload, transfer: dict[str, Any] | None) -> Any:
    from vllm import LLM
    from vllm.config import KVTransferConfig

    budget = workload.max_num_batched_tokens
    extra = {} if budget is None else {"max_num_batched_tokens": budget}
    return LLM(
        model=str(model_dir),
        skip_tokenizer_init=True,
        dtype="float32",
        enforce_eager=True,
        enable_prefix_caching=True,
        block_size=BLOCK_SIZE,
        num_gpu_blocks_override=workload.gpu_blocks,
        max_model_len=(workload.gpu_blocks - 1) * BLOCK_SIZE,
        max_num_seqs=workload.max_num_seqs,
        kv_transfer_config=KVTransferConfig(**transfer) if transfer else None,
        seed=0,
        **extra,
    )


def _reset(engine: Any, outcome: RunOutcome, step: int) -> None:
    try:
        result = engine.reset_prefix_cache(reset_connector=True)
        outcome.resets.append(f"before step {step}: returned {result}")
    except Exception as error:  # the double reset: vLLM's assertion, or the client's wrapper of it
        outcome.resets.append(f"before step {step}: raised {type(error).__name__}: {str(error)[:200]}")


def _drain(engine: Any, mode: str, max_steps: int = MAX_STEPS) -> tuple[int, bool]:
    """Step an idle engine while it has work, at most ``max_steps`` times: the steps, and whether
    it still had work (in process; with multiprocessing the engine core steps on its own)."""
    if mode == "inproc":
        core = engine.engine_core.engine_core
        for steps in range(max_steps):
            if not core.scheduler.has_requests():
                return steps, False
            core.step()
        return max_steps, bool(core.scheduler.has_requests())
    # With multiprocessing the engine core steps on its own while its connector has work left.
    time.sleep(1.0)
    return 0, False


def _remove_region(engine_id: str) -> None:
    """The tiering spec's /dev/shm region of this engine (vLLM leaves it when it does not unlink)."""
    for stale in Path("/dev/shm").glob(f"vllm_offload_{engine_id}*"):
        stale.unlink(missing_ok=True)


def run_workload(
    model_dir: Path, workload: Workload, connector: LiveConnector, manager: str, mode: str, root: Path
) -> RunOutcome:
    """Run ``workload`` with ``connector`` and its ``manager`` (or none: the baseline) in a fresh engine."""
    from vllm import SamplingParams

    folder = root / f"{workload.name}-{workload.seed}-{manager}-{mode}"
    folder.mkdir(parents=True, exist_ok=True)
    engine_id = f"kvoffload-live-{uuid.uuid4().hex[:10]}"
    outcome = RunOutcome(workload.name, connector.name, manager, mode, str(folder))
    started = time.perf_counter()
    try:
        transfer = None if manager == BASELINE else connector.transfer_config(manager, workload, folder, engine_id)
        llm = _build_llm(model_dir, workload, transfer)
    except Exception as error:  # the engine did not start: the connector's findings say why
        outcome.error = f"the engine did not start: {type(error).__name__}: {str(error)[:300]}"
        _remove_region(engine_id)
        outcome.seconds = time.perf_counter() - started
        return outcome
    engine = llm.llm_engine
    arrivals = sorted(workload.requests, key=lambda r: r.arrive_step)
    aborts = {r.request_id: r.abort_step for r in workload.requests if r.abort_step is not None}
    last_event = max([*workload.resets, *(r.arrive_step for r in arrivals), 0])
    finished: set[str] = set()
    try:
        step = 0
        while step < MAX_STEPS:
            while arrivals and arrivals[0].arrive_step <= step:
                request = arrivals.pop(0)
                params = SamplingParams(max_tokens=request.max_tokens, temperature=0.0, ignore_eos=True)
                engine.add_request(request.request_id, {"prompt_token_ids": list(request.prompt)}, params)
                outcome.tokens[request.request_id] = []
            for request_id, abort_step in aborts.items():
                if abort_step == step and request_id not in finished:
                    engine.abort_request([request_id])
                    outcome.aborted.append(request_id)
                    finished.add(request_id)
            # One after the other: LLMEngine's multiprocess client is not thread-safe, so with
            # multiprocessing the engine core may step between the two (the finding is then
            # timing-dependent there, as with concurrent clients of vllm serve).
            for _ in range(workload.resets.get(step, 0)):
                _reset(engine, outcome, step)
            busy = engine.has_unfinished_requests()
            if step >= last_event and not busy:
                break
            if not busy and mode == "mp":
                # An idle engine core sends no output, so step() would wait for ever; the core
                # steps by itself while its connector has work. The next event comes on the clock.
                time.sleep(IDLE_STEP_S)
                step += 1
                continue
            for output in engine.step():
                outcome.tokens[output.request_id] = list(output.outputs[0].token_ids)
                if output.finished:
                    finished.add(output.request_id)
            step += 1
        outcome.steps = step
        outcome.drain_steps, outcome.drain_busy = _drain(engine, mode, connector.drain_limit)
    except Exception as error:  # the engine died: the connector's findings say why
        outcome.error = f"{type(error).__name__}: {str(error)[:300]}"
    finally:
        try:
            engine.engine_core.shutdown()
        except Exception as error:
            outcome.error = outcome.error or f"shutdown: {type(error).__name__}: {error}"
        del llm, engine
        _remove_region(engine_id)
    outcome.seconds = time.perf_counter() - started
    return outcome


def main(argv: list[str], connectors: Mapping[str, LiveConnector]) -> int:
    """Run the plan ``argv[0]`` with the connectors it names, writing the outcomes to ``argv[1]``."""
    if len(argv) != 2:
        print("usage: python -m kvoffload_lab.vllm.live PLAN.json OUT.json", file=sys.stderr)
        return 2
    plan = json.loads(Path(argv[0]).read_text())
    mode = plan["mode"]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if mode == "mp" else "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import logging

    logging.getLogger("vllm").setLevel(logging.ERROR)
    root = Path(plan["out"])
    outcomes = []
    for run in plan["runs"]:
        workload = Workload.from_json(run["workload"])
        connector = connectors[run["connector"]]
        outcome = run_workload(Path(plan["model_dir"]), workload, connector, run["manager"], mode, root)
        outcomes.append(asdict(outcome))
        Path(argv[1]).write_text(json.dumps(outcomes))
    return 0
