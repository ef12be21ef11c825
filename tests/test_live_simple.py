"""The live check of SimpleCPUOffloadConnector, without vLLM: the scheduler-side recorder on a
fake manager (drain report, lost blocks), the checked copies of the worker, a run's verdict from
its files, the per-mode results and the report."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kvoffload_lab.vllm.common.live.checks import run_engine_checks
from kvoffload_lab.vllm.common.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, FindingLog, TraceLog, read_ndjson
from kvoffload_lab.vllm.common.live.report import engine_report, format_report
from kvoffload_lab.vllm.common.live.workloads import KINDS, LAZY_IDLE, RELOAD, Workload, build
from kvoffload_lab.vllm.simple.backend import LateCopyBackend
from kvoffload_lab.vllm.simple.live import connector as simple_connector
from kvoffload_lab.vllm.simple.live import judge as simple_judge
from kvoffload_lab.vllm.simple.live.connector import (
    LOSS,
    LOSSES_FILE,
    WORKER_FILE,
    _checked_backend,
    _SchedulerRecorder,
    copy_delay,
    simple_transfer_config,
)
from kvoffload_lab.vllm.simple.live.judge import SIMPLE, SIMPLE_KINDS, judge, results

# ---------------------------------------------------------------------- a fake SimpleCPUOffloadScheduler


class _Pool:
    """The parts of vLLM's BlockPool the recorder reads: blocks with ref counts, cached hashes."""

    def __init__(self, num_blocks: int) -> None:
        self.num_gpu_blocks = num_blocks
        self.blocks = [SimpleNamespace(block_id=i, ref_cnt=0, is_null=i == 0) for i in range(num_blocks)]
        self.cached: set[str] = set()

    def get_cached_block(self, block_hash: str, group_ids: list[int]) -> list[Any] | None:
        assert group_ids == [0]
        return [object()] if block_hash in self.cached else None


def _manager(cpu_blocks: int = 8, gpu_blocks: int = 12, lazy: bool = False, target: int = 0) -> SimpleNamespace:
    manager = SimpleNamespace(block_size=4, num_cpu_blocks=cpu_blocks, _lazy_mode=lazy, _target_free=target,
                              _cursor=None, _gpu_block_pool=_Pool(gpu_blocks), cpu_block_pool=_Pool(cpu_blocks),
                              _store_event_to_blocks={}, pending=False)
    manager.has_pending_stores = lambda: manager.pending
    return manager


def _request(rid: str, tokens: int, status: str = "RUNNING") -> SimpleNamespace:
    return SimpleNamespace(request_id=rid, status=SimpleNamespace(name=status), num_tokens=tokens,
                           num_computed_tokens=tokens - 1, block_hashes=[f"{rid}/h{i}" for i in range(tokens // 4)])


def _output(scheduled: list[str] = (), finished: list[str] = ()) -> SimpleNamespace:
    return SimpleNamespace(num_scheduled_tokens={r: 4 for r in scheduled}, finished_req_ids=set(finished),
                           preempted_req_ids=set())


def _meta(gpu: list[int] = (), cpu: list[int] = (), event: int = -1) -> SimpleNamespace:
    return SimpleNamespace(store_gpu_blocks=list(gpu), store_cpu_blocks=list(cpu), store_event=event,
                           load_gpu_blocks=[], load_cpu_blocks=[], load_event=-1)


def _serve(recorder: _SchedulerRecorder, rid: str, tokens: int, stored: list[int]) -> None:
    """Admit ``rid``, store ``stored`` of its blocks in one step, finish it by length."""
    request = _request(rid, tokens)
    recorder.after("get_num_new_matched_tokens", (request, 0), (0, False))
    recorder.after("update_state_after_alloc", (request, None, 0), None)
    recorder.after("build_connector_meta", (_output([rid]),), _meta(stored, [b + 1 for b in stored], 0))
    recorder.manager.cpu_block_pool.cached.update(request.block_hashes[i] for i in stored)
    recorder.after("request_finished_all_groups", (_request(rid, tokens, "FINISHED_LENGTH_CAPPED"), ([],)),
                   (False, None))


def _drain(folder: Path) -> dict[str, Any]:
    return json.loads((folder / DRAIN_FILE).read_text())


def test_a_final_block_missing_from_the_cpu_tier_is_a_loss_one_step_after_the_finish(tmp_path: Path) -> None:
    recorder = _SchedulerRecorder(_manager(), tmp_path)
    _serve(recorder, "a", 13, stored=[0, 1])  # 12 computed tokens: 3 full blocks, block 2 never stored
    assert read_ndjson(tmp_path / LOSSES_FILE) == []  # lazy mode would store it at the next step
    recorder.after("build_connector_meta", (_output(finished=["a"]),), _meta())
    losses = read_ndjson(tmp_path / LOSSES_FILE)
    assert [line["invariant"] for line in losses] == [LOSS]
    assert "request 'a' finished by length with 3 full block(s)" in losses[0]["message"]
    assert "block 2 (its final full block)" in losses[0]["message"]
    assert "no longer in the GPU prefix cache" in losses[0]["message"]
    drain = _drain(tmp_path)
    assert (drain["when"], drain["held"], drain["lost_blocks"], drain["finished_counted"]) == ("idle", [], 1, 1)
    assert drain["idle_steps"] == 1 and drain["seq"] == recorder.trace.seq


def test_losses_wait_for_pending_stores_and_need_a_whole_tier_and_no_reset(tmp_path: Path) -> None:
    for name in "abcd":
        (tmp_path / name).mkdir()
    waiting = _SchedulerRecorder(_manager(), tmp_path / "a")
    waiting.manager.pending = True
    _serve(waiting, "a", 13, stored=[0])
    waiting.after("build_connector_meta", (_output(),), _meta())
    assert read_ndjson(tmp_path / "a" / LOSSES_FILE) == [] and waiting.counted == 0
    waiting.manager.pending = False
    waiting.after("build_connector_meta", (_output(),), _meta())
    assert len(read_ndjson(tmp_path / "a" / LOSSES_FILE)) == 2

    reset = _SchedulerRecorder(_manager(), tmp_path / "b")
    reset.after("reset_cache", (), True)
    _serve(reset, "a", 13, stored=[])
    reset.after("build_connector_meta", (_output(),), _meta())
    assert (reset.counted, reset.uncounted, reset.lost) == (0, 1, 0)

    full = _SchedulerRecorder(_manager(cpu_blocks=3), tmp_path / "c")  # 2 CPU blocks besides the null one
    _serve(full, "a", 13, stored=[0, 1])
    full.after("build_connector_meta", (_output(),), _meta())
    assert (full.counted, full.uncounted, full.allocated_twice) == (0, 1, 0)

    lazy = _SchedulerRecorder(_manager(lazy=True, target=40), tmp_path / "d")  # lazy mode: never counted
    lazy.manager._gpu_block_pool.free_block_queue = SimpleNamespace(iter_blocks_after=lambda cursor: iter(()))
    lazy.manager.cpu_block_pool.cached_block_hash_to_block = SimpleNamespace(get_one_block=lambda h: None)
    _serve(lazy, "a", 13, stored=[])
    lazy.after("build_connector_meta", (_output(),), _meta())
    assert (lazy.counted, lazy.uncounted) == (0, 1)


def test_the_drain_report_lists_what_is_held_and_counts_steps_and_stores_while_idle(tmp_path: Path) -> None:
    recorder = _SchedulerRecorder(_manager(), tmp_path)
    _serve(recorder, "a", 9, stored=[0, 1])
    recorder.manager._gpu_block_pool.blocks[3].ref_cnt = 1
    recorder.manager.cpu_block_pool.blocks[2].ref_cnt = 1
    recorder.manager._store_event_to_blocks = {7: object()}
    recorder.manager.pending = True
    for step in range(3):
        recorder.after("build_connector_meta", (_output(),), _meta([3], [2], 7 + step))
    drain = _drain(tmp_path)
    assert drain["held"] == ["GPU blocks [3] (ref_cnt > 0)", "CPU blocks [2] (ref_cnt > 0)",
                             "SimpleCPUOffloadScheduler._store_event_to_blocks = [7]"]
    assert (drain["idle_steps"], drain["idle_store_events"], drain["idle_store_blocks"],
            drain["idle_distinct_gpu_blocks"], drain["cpu_allocated_twice"]) == (3, 3, 3, 1, 3)
    recorder.drain_report("shutdown")
    assert _drain(tmp_path)["when"] == "shutdown"
    # A live request: no idle report.
    (tmp_path / "busy").mkdir()
    busy = _SchedulerRecorder(_manager(), tmp_path / "busy")
    busy.after("get_num_new_matched_tokens", (_request("b", 9), 0), (0, False))
    assert not (tmp_path / "busy" / DRAIN_FILE).exists()
    lines = read_ndjson(tmp_path / TRACE_FILE)
    assert [line["call"] for line in lines[:4]] == ["get_num_new_matched_tokens", "update_state_after_alloc",
                                                    "build_connector_meta", "request_finished"]
    assert lines[2]["store"] == [0, [0, 1], [1, 2]]


# ---------------------------------------------------------------------- the worker's checked copies
def _backend(tmp_path: Path) -> LateCopyBackend:
    gpu = {"kv.0": torch.zeros((4, 8), dtype=torch.int8), "kv.1": torch.zeros((4, 8), dtype=torch.int8)}
    cpu = {name: torch.zeros_like(region) for name, region in gpu.items()}
    return _checked_backend(LateCopyBackend(gpu, cpu, delay=2), FindingLog(tmp_path / FINDINGS_FILE),
                            tmp_path / WORKER_FILE)


def test_a_load_must_bring_back_the_bytes_its_cpu_block_last_stored(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    backend.gpu["kv.0"][1] = 5
    backend.gpu["kv.1"][1] = 6
    stores: list[tuple[int, Any]] = []
    backend.launch_copy([1], [2], True, 0, stores)
    assert not stores[0][1].query() and stores[0][1].query()  # done at the second poll
    loads: list[tuple[int, Any]] = []
    backend.launch_copy([2], [3], False, 0, loads)
    loads[0][1].synchronize()
    assert torch.equal(backend.gpu["kv.1"][3], backend.gpu["kv.1"][1])
    assert read_ndjson(tmp_path / FINDINGS_FILE) == []
    backend.cpu["kv.1"][2, 0] = 99  # the CPU block changes behind the tier's back
    backend.launch_copy([2], [0], False, 1, loads)
    backend.launch_copy([3], [1], False, 2, loads)  # never stored
    for _, event in loads[1:]:
        event.synchronize()
    found = read_ndjson(tmp_path / FINDINGS_FILE)
    assert [f["invariant"] for f in found] == ["DataIntegrity", "DataIntegrity"]
    assert "GPU block 0 from CPU block 2: the loaded bytes differ" in found[0]["message"]
    assert "from CPU block 3, which no store had written" in found[1]["message"]
    counts = json.loads((tmp_path / WORKER_FILE).read_text())
    assert (counts["blocks_stored"], counts["blocks_loaded_checked"], counts["integrity_failures"]) == (1, 1, 2)


def test_a_store_whose_gpu_block_changes_before_its_copy_breaks_the_fence(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    events: list[tuple[int, Any]] = []
    backend.launch_copy([1, 2], [1, 2], True, 4, events)
    backend.gpu["kv.1"][2, 3] = 1
    events[0][1].synchronize()
    found = read_ndjson(tmp_path / FINDINGS_FILE)
    assert [f["invariant"] for f in found] == ["GpuBlockFence"]
    assert "store event 4 copied GPU block 2 to CPU block 2" in found[0]["message"]
    backend.launch_copy([], [], True, 5, events)  # nothing to copy: no event
    assert len(events) == 1


# ---------------------------------------------------------------------- a run's verdict
def _run(folder: Path, findings: list[tuple[str, str]] = (), drain: dict[str, Any] | None = None,
         losses: list[str] = (), trace_lines: int = 2) -> Path:
    folder.mkdir(parents=True)
    trace = TraceLog(folder / TRACE_FILE)
    for _ in range(trace_lines):
        trace.call(1, "simple", "get_num_new_matched_tokens", "r0-0123abcd", local_tokens=0)
    trace.close()
    for invariant, message in findings:
        FindingLog(folder / FINDINGS_FILE).add(invariant, message)
    for message in losses:
        FindingLog(folder / LOSSES_FILE).add(LOSS, message)
    if drain is not None:
        (folder / DRAIN_FILE).write_text(json.dumps({"seq": trace_lines, "step": 1, "when": "shutdown", "held": [],
                                                     "live": [], "idle_steps": 0, **drain}))
    return folder


def _outcome(folder: Path, tokens: dict[str, list[int]], **extra: Any) -> dict[str, Any]:
    return {"folder": str(folder), "connector": "simple", "manager": "lazy", "mode": "mp", "tokens": tokens,
            "aborted": [], "resets": [], "error": None, "seconds": 1.0, "drain_steps": 1, "drain_busy": False, **extra}


def test_a_simple_run_is_judged_by_crash_findings_leaks_then_tokens(tmp_path: Path) -> None:
    workload = build("final_store", 0)
    baseline = {"tokens": {"r0": [1, 2, 3]}}
    same = {"r0": [1, 2, 3]}

    def verdict(name: str, tokens: dict[str, list[int]] = same, **run: Any) -> Any:
        extra = run.pop("outcome", {})
        return judge(_outcome(_run(tmp_path / name, **run), tokens, **extra), baseline, workload)

    clean = verdict("clean", drain={})
    assert (clean.invariant, clean.mode, clean.run_mode, clean.losses) == (None, "lazy", "mp", [])
    lossy = verdict("lossy", drain={}, losses=["request 'r0-0123abcd' finished by length ..."])
    assert lossy.invariant is None and len(lossy.losses) == 1 and lossy.trace
    wrong = verdict("wrong", {"r0": [1, 9, 3]}, drain={})
    assert wrong.invariant == "SameTokens" and "token 1: 9 with offloading, 2 without" in wrong.error
    assert clean.tokens == "same" and wrong.tokens == wrong.error
    leaking = verdict("leaking", {"r0": [1, 9, 3]}, drain=None)
    assert leaking.invariant == "NoLeak" and "token 1: 9" in leaking.tokens
    crash = verdict("crash", findings=[("GpuBlockFence", "store event 1 ..."), ("Crash", "KeyError: 3 at vllm/x.py:1")],
                    drain={})
    assert (crash.invariant, crash.error) == ("Crash", "KeyError: 3 at vllm/x.py:1")
    fence = verdict("fence", findings=[("GpuBlockFence", "store event 1 ...")], drain={})
    assert fence.invariant == "GpuBlockFence"
    died = verdict("died", drain={}, outcome={"error": "EngineDeadError: gone"})
    assert died.invariant == "Crash" and "the engine died" in died.error
    assert "never idle" in verdict("never", drain=None).error
    spinning = {"idle_steps": 300, "idle_store_events": 299, "held": ["GPU blocks [5] (ref_cnt > 0)"]}
    busy = verdict("busy", drain=spinning, outcome={"drain_busy": True, "drain_steps": 300})
    assert busy.invariant == "NoLeak" and "still steps after 300 drain steps" in busy.error
    assert "300 engine step(s) and 299 store event(s)" in busy.error
    late = verdict("late", drain={"when": "idle", "seq": 1})
    assert late.invariant == "NoLeak" and "last idle at trace line 1 of 2" in late.error
    held = verdict("held", drain={"held": ["SimpleCPUOffloadScheduler._reqs_to_load = ['r0']"]})
    assert held.invariant == "NoLeak" and held.error.startswith("at shutdown, the connector still holds")


def test_each_mode_gets_one_engine_result_violations_before_losses(tmp_path: Path) -> None:
    def run(mode: str, invariant: str | None = None, losses: int = 0) -> simple_judge.SimpleVerdict:
        return simple_judge.SimpleVerdict("multi_turn", 0, mode, "inproc", invariant=invariant,
                                    error=f"{invariant} here" if invariant else None, losses=["lost"] * losses,
                                    stats={"store_events": 2, "idle_steps": 3}, worker={"blocks_loaded_checked": 4})

    verdicts = [run("eager", losses=2), run("lazy", losses=1), run("lazy", "NoLeak")]
    per_mode = results(verdicts, ("eager", "lazy"))
    assert [(r.manager, r.checker, r.result, r.invariant) for r in per_mode] == [
        ("eager", "engine", "loss", LOSS), ("lazy", "engine", "violation", "NoLeak")]
    assert per_mode[0].error == "multi_turn (seed 0, inproc): lost (2 block(s) lost in 1 run(s))"
    assert per_mode[1].error == "multi_turn (seed 0, inproc): NoLeak here"
    assert len(per_mode[1].details["runs"]) == 2
    assert results([run("eager")], ("eager",))[0].result == "success"
    report = engine_report(SIMPLE, verdicts, {"inproc": 12.3}, tmp_path)
    assert report["per_mode"]["lazy-inproc"]["violations"] == {"NoLeak": 1}
    assert report["per_mode"]["eager-inproc"]["blocks_loaded_checked"] == 4
    json.dumps(report)
    text = format_report(report, SIMPLE)
    assert "lazy-inproc: 2 run(s), violations: NoLeak 1; 0 run(s) with other tokens; 1 lost block(s)" in text
    assert "inproc 12 s" in text


# ---------------------------------------------------------------------- configuration and workloads
def test_the_transfer_config_loads_the_live_connector_with_the_mode_and_the_tier(tmp_path: Path) -> None:
    config = simple_transfer_config("lazy", build("tiny_cpu", 4), tmp_path, "engine-1")
    assert (config["kv_connector"], config["kv_connector_module_path"]) == ("LiveSimpleConnector",
                                                                            "kvoffload_lab.vllm.simple.live.connector")
    extra = config["kv_connector_extra_config"]
    assert extra["lazy_offload"] is True and extra["cpu_bytes_to_use"] == 2 * 32768
    assert extra["live_check_dir"] == str(tmp_path) and extra["live_copy_delay"] == copy_delay(4) == 1
    assert [copy_delay(seed) for seed in range(4)] == [2, 1, 3, 2]
    with pytest.raises(ValueError, match="unknown simple connector mode 'fast'"):
        simple_transfer_config("fast", build("tiny_cpu", 0), tmp_path, "e")
    with pytest.raises(AttributeError, match="NoSuchConnector"):
        _ = simple_connector.NoSuchConnector


def test_the_simple_workloads_are_seeded_survive_json_and_stay_out_of_the_offloading_kinds() -> None:
    assert (*KINDS, RELOAD, LAZY_IDLE) == SIMPLE_KINDS
    assert RELOAD not in KINDS and LAZY_IDLE not in KINDS
    for kind in (RELOAD, LAZY_IDLE):
        workload = build(kind, 2)
        assert workload == build(kind, 2) != build(kind, 3)
        assert Workload.from_json(json.loads(json.dumps(workload.to_json()))) == workload
    idle = build(LAZY_IDLE, 0)
    assert (idle.cpu_chunks, idle.gpu_blocks, idle.max_num_batched_tokens) == (6, 24, 256)
    assert build("multi_turn", 0).max_num_batched_tokens is None
    again = [r for r in build(RELOAD, 0).requests if r.request_id.endswith("b")]
    first = {r.request_id: r for r in build(RELOAD, 0).requests}
    assert len(again) == 4 and all(r.prompt[:len(first[r.request_id[:-1]].prompt)] == first[r.request_id[:-1]].prompt
                                   for r in again)


def test_bad_modes_and_kinds_are_refused_before_any_engine_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown manager 'fifo' of the simple connector; known: eager, lazy"):
        run_engine_checks(SIMPLE, ("fifo",), (0,), out=tmp_path)
    with pytest.raises(ValueError, match="unknown run mode 'gpu'"):
        run_engine_checks(SIMPLE, ("eager",), (0,), ("gpu",), out=tmp_path)
    with pytest.raises(ValueError, match="unknown workload kind 'nope'"):
        run_engine_checks(SIMPLE, ("eager",), (0,), kinds=("nope",), out=tmp_path)
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------- the release assertion
def _release_report(eager_error: str | None = None, lazy_error: str | None = "the engine still steps after 300",
                    tokens: str = "same") -> dict[str, Any]:
    def run(mode: str, workload: str, error: str | None) -> dict[str, Any]:
        return {"workload": workload, "seed": 0, "run_mode": "inproc", "invariant": "NoLeak" if error else None,
                "error": error, "tokens": tokens, "losses": []}

    return {"results": [
        {"manager": "eager", "checker": "engine", "seconds": 1.0, "result": "success", "invariant": None,
         "error": None, "details": {"runs": [run("eager", "reset", eager_error), run("eager", LAZY_IDLE, None)]}},
        {"manager": "lazy", "checker": "engine", "seconds": 1.0, "result": "violation", "invariant": "NoLeak",
         "error": lazy_error, "details": {"runs": [run("lazy", "reset", None), run("lazy", LAZY_IDLE, lazy_error)]}},
    ]}


def test_the_0_32_release_must_show_the_lazy_engine_that_never_idles_and_nothing_else() -> None:
    from check_vllm_live_simple_release import check

    assert check("0.32.0", _release_report()) == []
    assert any("expected NoLeak" in p for p in check("0.32.0", _release_report(lazy_error=None)))
    assert any("eager inproc reset-0: expected every check" in p
               for p in check("0.32.0", _release_report(eager_error="held")))
    assert any("tokens differ" in p for p in check("0.32.0", _release_report(tokens="r0 differs at 3")))


def test_an_engine_that_kept_stepping_with_no_request_is_a_leak_in_either_run_mode() -> None:
    drain = {"when": "idle", "seq": 9, "held": ["GPU blocks [4] (ref_cnt > 0)"], "idle_steps": 622,
             "idle_store_events": 622, "idle_store_blocks": 1555, "idle_distinct_gpu_blocks": 20,
             "cpu_blocks": 6, "lazy_target_free": 16}
    leak = simple_judge._leak({"drain_busy": False}, drain, 9)
    assert leak is not None and leak.startswith("the engine still steps with every request finished: 622")
    quiet = {**drain, "held": [], "idle_steps": 2, "idle_store_events": 0}
    assert simple_judge._leak({"drain_busy": False}, quiet, 9) is None
