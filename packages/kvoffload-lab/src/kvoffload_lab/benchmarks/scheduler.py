"""Connector overhead per live request per step, and lifecycle overhead per request lifetime.

Steady decode: N requests each compute one token per step; every ``block_size`` steps a request
fills a block, which the scheduler stores (staggered, so stores happen every step). The worker
completes each store one step later. Timed: ``build_connector_meta`` + ``update_connector_output``.
``full_gc_collections`` counts Python's full (oldest-generation) garbage collections during the
steps: each walks every live object, so at 10^4 live requests a few of them are a visible part of
the figure, and an object allocated per request per step that lives through the step makes them
frequent (docs/benchmarks.md, "Connector and lifecycle overhead").

Lifecycle: one request lifetime (load, load_done, finish, signal, clean, with the guard) through
the shipped runtime, through one ``transitions`` Machine per request (the obvious design), and
through a bare dict table (the floor), all in the same run.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transitions import Machine

from kvoffload.lifecycles.request import REQUEST_LIFECYCLE
from kvoffload.offload import OffloadConfig, OffloadingScheduler, SchedulerOutput, WorkerOutput
from kvoffload.offload.scheduler import RequestTracker, request_machine
from kvoffload.statemachine.runtime import build_transitions_machine

LIFETIME = ("load", "load_done", "finish", "signal", "clean")
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--live", type=int, nargs="+", default=[1024, 10240], help="live request counts")
    parser.add_argument("--steps", type=int, default=64, help="decode steps timed per size")
    parser.add_argument("--lifetimes", type=int, default=20000, help="request lifetimes timed per runtime")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall",
        help="time the connector calls by wall clock, or by this thread's CPU time (less affected by other "
        "processes on a busy machine)",
    )


@dataclass
class _Request:
    request_id: str
    block_hashes: list[int] = field(default_factory=list)
    num_tokens: int = 0


def connector_overhead(live: int, steps: int, block_size: int = 16, clock: str = "wall") -> dict[str, Any]:
    """µs per live request per step spent in the two per-step connector calls, by ``clock``."""
    now = CLOCKS[clock]
    config = OffloadConfig(gpu_block_size=block_size, blocks_per_chunk=1, num_cpu_blocks=live * 8)
    scheduler = OffloadingScheduler(config)
    requests = []
    next_block = 0
    for index in range(live):
        # Staggered so that a different 1/block_size of the requests fills a block each step.
        prompt = 4 * block_size + index % block_size
        request = _Request(f"r{index}", [hash((index, b)) for b in range(prompt // block_size)], prompt)
        scheduler.get_num_new_matched_tokens(request, 0)
        blocks = list(range(next_block, next_block + prompt // block_size + 1))
        next_block += len(blocks) + steps // block_size + 2
        scheduler.update_state_after_alloc(request, blocks, 0)
        requests.append((request, blocks))
    scheduled = {request.request_id: request.num_tokens for request, _ in requests}
    scheduler.build_connector_meta(SchedulerOutput(scheduled))
    pending: dict[int, bool] = {}
    elapsed = 0.0
    stores = 0
    full_collections = gc.get_stats()[-1]["collections"]
    for _ in range(steps):
        new_blocks: dict[str, list[int]] = {}
        for request, blocks in requests:
            request.num_tokens += 1
            if request.num_tokens % block_size == 0:
                request.block_hashes.append(hash((request.request_id, request.num_tokens)))
                blocks.append(blocks[-1] + 1)
                new_blocks[request.request_id] = [blocks[-1]]
        output = SchedulerOutput(dict.fromkeys(scheduled, 1), new_blocks)
        worker_output = WorkerOutput(pending)
        started = now()
        metadata = scheduler.build_connector_meta(output)
        scheduler.update_connector_output(worker_output)
        scheduler.take_events()  # an engine publishing KV events drains them every step
        elapsed += now() - started
        pending = {job.job_id: True for job in metadata.stores}
        stores += len(metadata.stores)
    return {
        "live_requests": live,
        "steps": steps,
        "clock": clock,
        "stores": stores,
        "connector_us_per_request_step": round(elapsed / (steps * live) * 1e6, 3),
        "full_gc_collections": gc.get_stats()[-1]["collections"] - full_collections,
    }


def _shipped(lifetimes: int) -> float:
    machine = request_machine()
    started = time.perf_counter()
    for index in range(lifetimes):
        tracker = RequestTracker(f"r{index}", None)  # type: ignore[arg-type]
        for trigger in LIFETIME:
            machine.fire(tracker, trigger)
    return time.perf_counter() - started


class _Model:
    def __init__(self) -> None:
        self.no_jobs_in_flight = True


def _transitions_per_request(lifetimes: int) -> float:
    machine = build_transitions_machine(REQUEST_LIFECYCLE)
    states, transitions = machine.states.keys(), [
        {"trigger": t, "source": s, "dest": d, **({"conditions": [g]} if g else {})}
        for (s, t), (d, g) in sorted(request_machine().table.items())
    ]
    started = time.perf_counter()
    for _ in range(lifetimes):
        model = _Model()
        Machine(model=model, states=list(states), transitions=transitions, initial="waiting", auto_transitions=False)
        for trigger in LIFETIME:
            model.trigger(trigger)  # type: ignore[attr-defined]
    return time.perf_counter() - started


def _dict_table(lifetimes: int) -> float:
    table = {(s, t): d for (s, t), (d, _) in request_machine().table.items()}
    started = time.perf_counter()
    for index in range(lifetimes):
        tracker = RequestTracker(f"r{index}", None)  # type: ignore[arg-type]
        for trigger in LIFETIME:
            tracker.state = table[(tracker.state, trigger)]
    return time.perf_counter() - started


def lifecycle_overhead(lifetimes: int) -> dict[str, float]:
    slow = max(1, lifetimes // 20)  # a Machine per request is ~100x slower: time fewer
    return {
        "shipped": round(_shipped(lifetimes) / lifetimes * 1e6, 3),
        "transitions_per_request": round(_transitions_per_request(slow) / slow * 1e6, 3),
        "dict_table": round(_dict_table(lifetimes) / lifetimes * 1e6, 3),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    lifecycle = lifecycle_overhead(args.lifetimes)
    results = []
    for live in args.live:
        result = connector_overhead(live, args.steps, clock=args.clock)
        result["lifecycle_us"] = lifecycle
        results.append(result)
    return {
        "device": f"cpu ({platform.processor() or platform.machine()}, python {platform.python_version()})",
        "lifecycle_transitions_per_lifetime": len(LIFETIME),
        "results": results,
    }
