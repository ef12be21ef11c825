"""kvoffload.vllm: finding vLLM, the recording proxy, the pattern worker (no vLLM needed), and the
adapter against a real vLLM (only when one is importable: installed or $KVOFFLOAD_VLLM_SRC)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvoffload.cli import main
from kvoffload.vllm.check.compat import PrivateReads027, private_reads
from kvoffload.vllm.check.proxy import RecordingManager
from kvoffload.vllm.check.worker import PatternWorker, pattern
from kvoffload.vllm.locate import VllmNotFound, locate_vllm


def test_missing_vllm_src_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "check", "--vllm-src", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0] and "vllm/__init__.py" in err[0]


def test_unknown_manager_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "check", "--manager", "fifo"]) == 2
    assert "--manager 'fifo'" in capsys.readouterr().err


def test_locate_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(VllmNotFound, match=r"no vllm/__init__\.py"):
        locate_vllm(str(tmp_path))


def test_private_reads_by_version() -> None:
    assert type(private_reads("0.26.0")) is not PrivateReads027
    assert isinstance(private_reads("0.33.0"), PrivateReads027)
    assert isinstance(private_reads("0.27.0.dev3+gabc"), PrivateReads027)


@dataclass
class FakeManager:
    """Answers like vLLM's CPU manager: stores go to the next free block, evicting the oldest key."""

    blocks: int = 2
    resident: dict[bytes, int] = field(default_factory=dict)

    def on_new_request(self, ctx: object) -> None:
        return None

    def lookup(self, key: bytes, ctx: object) -> bool:
        return key in self.resident

    def touch(self, keys: list[bytes], ctx: object) -> None:
        return None

    def prepare_load(self, keys: list[bytes], ctx: object) -> SimpleNamespace:
        return SimpleNamespace(block_ids=[self.resident[k] for k in keys])

    def complete_load(self, keys: list[bytes], ctx: object) -> None:
        return None

    def prepare_store(self, keys: list[bytes], ctx: object) -> SimpleNamespace:
        evicted, ids = [], []
        for key in keys:
            if len(self.resident) >= self.blocks:
                oldest = next(iter(self.resident))
                evicted.append(oldest)
                block = self.resident.pop(oldest)
            else:
                block = len(self.resident)
            self.resident[key] = block
            ids.append(block)
        spec = SimpleNamespace(block_ids=ids)
        return SimpleNamespace(keys_to_store=list(keys), store_spec=spec, evicted_keys=evicted)

    def complete_store(self, keys: list[bytes], ctx: object, success: bool = True) -> None:
        return None

    def on_request_finished(self, ctx: object) -> None:
        return None


def ctx(request_id: str) -> SimpleNamespace:
    return SimpleNamespace(req_id=request_id)


def test_proxy_reports_a_store_after_the_signal() -> None:
    proxy = RecordingManager(FakeManager(), lambda: 3, lambda rid: [])
    proxy.on_new_request(ctx("r1"))
    proxy.on_request_finished(ctx("r1"))
    proxy.prepare_store([b"a"], ctx("r1"))
    assert [v.invariant for v in proxy.ledger.violations] == ["NoManagerCallAfterSignal"]
    assert "'r1'" in proxy.ledger.violations[0].message


def test_proxy_signal_twice_never_and_owed_chunks() -> None:
    proxy = RecordingManager(FakeManager(), lambda: 1, lambda rid: [b"x"] if rid == "r1" else [])
    for rid in ("r1", "r2", "r3"):
        proxy.on_new_request(ctx(rid))
    proxy.on_request_finished(ctx("r1"))
    proxy.on_request_finished(ctx("r2"))
    proxy.on_request_finished(ctx("r2"))
    assert [v.invariant for v in proxy.ledger.violations] == ["SignalExactlyOnce"]
    drained = {(v.invariant, v.message.split("'")[1]) for v in proxy.drain_violations()}
    assert drained == {("SignalExactlyOnce", "r3"), ("SignalAfterFinalStore", "r1")}


def test_proxy_reports_eviction_of_a_key_being_loaded() -> None:
    proxy = RecordingManager(FakeManager(blocks=1), lambda: 1, lambda rid: [])
    proxy.prepare_store([b"a"], ctx("r1"))
    proxy.complete_store([b"a"], ctx("r1"))
    proxy.prepare_load([b"a"], ctx("r2"))
    proxy.prepare_store([b"b"], ctx("r3"))
    assert {v.invariant for v in proxy.ledger.violations} == {"NoEvictWhileInUse"}
    proxy.complete_load([b"a"], ctx("r2"))
    proxy.complete_store([b"b"], ctx("r3"))
    assert proxy.drain_violations() == []


def _job(req: str, gpu: list[int], cpu: list[int], store: bool) -> SimpleNamespace:
    gpu_spec, cpu_spec = SimpleNamespace(block_ids=gpu), SimpleNamespace(block_ids=cpu)
    src, dst = (gpu_spec, cpu_spec) if store else (cpu_spec, gpu_spec)
    return SimpleNamespace(req_id=req, src_spec=src, dst_spec=dst)


def test_worker_defers_stores_and_copies_at_completion() -> None:
    worker = PatternWorker(num_gpu_blocks=4, num_cpu_chunks=2, delay_steps=0)
    worker.write_block(0, 111)  # engine block 0 is vLLM block 1
    step = worker.execute(SimpleNamespace(jobs_to_flush=set(), store_jobs={1: _job("r", [1], [0], True)}, load_jobs={}))
    assert worker.blocks_read_by_stores() == {} and step.finish().completed == {}
    worker.execute(SimpleNamespace(jobs_to_flush=set(), store_jobs={}, load_jobs={})).finish()
    assert bool((worker.cpu[0] == pattern(111)).all())
    load = SimpleNamespace(jobs_to_flush=set(), store_jobs={}, load_jobs={2: _job("q", [3], [0], False)})
    step = worker.execute(load)
    assert step.finish().finished_recving == {"q"} and worker.block_matches(2, 111)


def test_flushed_store_completes_before_the_forward_pass() -> None:
    worker = PatternWorker(num_gpu_blocks=2, num_cpu_chunks=1, delay_steps=5)
    worker.write_block(0, 7)
    meta = SimpleNamespace(jobs_to_flush={4}, store_jobs={4: _job("r", [1], [0], True)}, load_jobs={})
    step = worker.execute(meta)
    assert step.completed == {4: 1} and bool((worker.cpu[0] == pattern(7)).all())


def _vllm_available() -> bool:
    return bool(os.environ.get("KVOFFLOAD_VLLM_SRC")) or importlib.util.find_spec("vllm") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_available(), reason="vLLM is not importable (install it or set KVOFFLOAD_VLLM_SRC)")
def test_adapter_runs_vllm_connector_through_the_simulator() -> None:
    install = locate_vllm()
    from kvoffload.vllm.check.sim import run_sim

    result = run_sim("lru", private_reads(install.version), seeds=1)
    assert result.details["admissions"] > 0
    if install.version.startswith("0.26."):
        assert result.result == "violation" and result.invariant == "NoManagerCallAfterSignal"
    else:
        assert result.result == "success", result.error


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_available(), reason="vLLM is not importable (install it or set KVOFFLOAD_VLLM_SRC)")
def test_checkers_leave_no_shared_memory_file_in_dev_shm() -> None:
    # vLLM's tiering manager keeps its CPU tier in /dev/shm/vllm_offload_{engine_id}.mmap until
    # its shutdown; every checker builds many connectors.
    install = locate_vllm()
    from kvoffload.vllm.check.build import region_files
    from kvoffload.vllm.check.explorer import run_explorer
    from kvoffload.vllm.check.harness import Harness, HarnessConfig
    from kvoffload.vllm.check.sim import run_sim
    from kvoffload.vllm.check.stateful import run_hypothesis

    reads = private_reads(install.version)
    before = region_files(os.getpid())
    harness = Harness("tiering", HarnessConfig(), reads)
    assert len(region_files(os.getpid())) == len(before) + 1  # the files are where region_files looks
    harness.close()
    assert region_files(os.getpid()) == before and not harness.findings
    results = [run_sim("tiering", reads, seeds=3), run_hypothesis("tiering", reads, examples=5),
               run_explorer("tiering", reads)]
    assert all(r.details for r in results)
    assert region_files(os.getpid()) == before


def test_json_shape_and_table_of_a_violation() -> None:
    from kvoffload.vllm.check.findings import CheckerVerdict, requests_named
    from kvoffload.vllm.check.runner import format_table, to_json

    bad = CheckerVerdict("lru", "sim", "violation", "NoManagerCallAfterSignal", "prepare_store for 'req-0' after 'k3'",
                      ["step 1: add req-0", "step 2: finish req-0"], 1.5)
    good = CheckerVerdict("arc", "sim", seconds=0.5)
    out = to_json("0.26.0", [bad, good], 3.0)
    assert out["vllm_version"] == "0.26.0"
    keys = {"manager", "checker", "result", "invariant", "error", "trace", "seconds"}
    assert all(keys <= set(r) for r in out["results"])
    assert [r["result"] for r in out["results"]] == ["violation", "success"]
    table = format_table("0.26.0", [bad, good])
    assert "VIOLATION NoManagerCallAfterSignal" in table and "  2. step 2: finish req-0" in table
    assert requests_named(bad.error or "") == {"req-0"}
