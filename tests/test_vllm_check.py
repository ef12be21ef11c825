"""kvoffload.vllm: finding vLLM, the recording proxy, the pattern worker (no vLLM needed), and the
adapter against a real vLLM (only when one is importable: installed or $KVOFFLOAD_VLLM_SRC)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.vllm.common.findings import (
    UNSUPPORTED,
    CheckerVerdict,
    UnsupportedVllmApi,
    crash_message,
    harness_error,
)
from kvoffload_lab.vllm.common.locate import VllmNotFound, locate_vllm
from kvoffload_lab.vllm.offloading.compat import PrivateReads027, PrivateReads034, private_reads
from kvoffload_lab.vllm.offloading.proxy import RecordingManager
from kvoffload_lab.vllm.offloading.worker import PatternWorker, pattern


def test_missing_vllm_src_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "check", "--vllm-src", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0] and "vllm/__init__.py" in err[0]


def test_unknown_manager_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "check", "--manager", "fifo"]) == 2
    assert "--manager 'fifo'" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "expected"), [
    (["--connector", "kvoffload", "--manager", "lru"], "--connector kvoffload takes --scheduling"),
    (["--connector", "kvoffload", "--scheduling", "bogus"], "--scheduling 'bogus' is unknown"),
    (["--connector", "kvoffload", "--checker", "engine"], "--checker engine is for vLLM's connectors"),
    (["--connector", "kvoffload", "--async-scheduling", "--scheduling", "sync"], "contradicts --scheduling sync"),
    (["--async-scheduling"], "are for --connector kvoffload"),
])
def test_kvoffload_connector_options_are_one_line_exit_2(args: list[str], expected: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "check", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err


def test_locate_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(VllmNotFound, match=r"no vllm/__init__\.py"):
        locate_vllm(str(tmp_path))


def test_private_reads_by_version() -> None:
    assert type(private_reads("0.26.0")) is not PrivateReads027
    assert isinstance(private_reads("0.33.0"), PrivateReads027)
    assert isinstance(private_reads("0.27.0.dev3+gabc"), PrivateReads027)
    # 0.34.0 re-sends resumed requests as new ones and no longer asserts on a second reset
    behaviour = {v: (r.resumed_as_new_request(), r.second_reset_asserts())
                 for v in ("0.26.0", "0.33.0", "0.34.0", "0.35.0.dev1") for r in [private_reads(v)]}
    assert behaviour == {"0.26.0": (False, True), "0.33.0": (False, True), "0.34.0": (True, False),
                         "0.35.0.dev1": (True, False)}
    assert isinstance(private_reads("0.34.0"), PrivateReads034)


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
    from kvoffload_lab.vllm.offloading.sim import run_sim

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
    from kvoffload_lab.vllm.offloading.build import region_files
    from kvoffload_lab.vllm.offloading.explorer import run_explorer
    from kvoffload_lab.vllm.offloading.harness import Harness, HarnessConfig
    from kvoffload_lab.vllm.offloading.sim import run_sim
    from kvoffload_lab.vllm.offloading.stateful import run_hypothesis

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
    from kvoffload_lab.vllm.common.findings import CheckerVerdict, requests_named
    from kvoffload_lab.vllm.common.runner import format_table, to_json

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


# --- whose exception: vLLM's connector crashing, or kvoffload's harness failing to drive this vLLM ---

FAKE_VLLM = '''
class NewRequestData:
    @classmethod
    def from_request(cls, request, block_ids, prefill_token_ids):
        return cls()


class Output:
    pass


def prepare_store(keys):
    assert not keys, "a store of keys still in flight"


def add(value):
    return value + 1


def call_back(backend):
    return backend.launch_copy(1, 2, 3)


def use(backend):
    return backend.new_attribute


def lazy_import():
    from fake_vllm import moved_away  # noqa: F401
'''
FAKE_HARNESS = '''
from fake_vllm import api


class Backend:
    def launch_copy(self, src, dst):
        return None


def build():
    return api.NewRequestData.from_request(None, ([1],))


def resumed():
    return api.Output().resumed_req_ids


def store():
    api.prepare_store([b"k"])


def add():
    api.add(None)


def call_back():
    api.call_back(Backend())


def use():
    api.use(Backend())


def lazy_import():
    api.lazy_import()
'''


@pytest.fixture
def fake_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path, Path]]:
    """A package ``fake_harness`` (kvoffload's part) calling a package ``fake_vllm`` (vLLM's part)."""
    for package, source in (("fake_vllm", FAKE_VLLM), ("fake_harness", FAKE_HARNESS)):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / ("api.py" if package == "fake_vllm" else "adapter.py")).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fake_vllm", "fake_vllm.api", "fake_harness", "fake_harness.adapter"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    adapter = importlib.import_module("fake_harness.adapter")
    yield adapter, (tmp_path / "fake_harness").resolve(), (tmp_path / "fake_vllm").resolve()
    for name in ("fake_vllm", "fake_vllm.api", "fake_harness", "fake_harness.adapter"):
        sys.modules.pop(name, None)


def _line(source: str, text: str) -> int:
    """The number of the line of ``source`` that holds ``text``."""
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


def _raised(call: Any) -> Exception:
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError(f"{call} raised nothing")


@pytest.mark.parametrize(("call", "says"), [
    # kvoffload's call into vLLM with a signature vLLM changed: raised in kvoffload's frame (0.34.0)
    ("build", "TypeError: NewRequestData.from_request() missing 1 required positional argument: "
              f"'prefill_token_ids' at fake_harness/adapter.py:{_line(FAKE_HARNESS, 'from_request(None')} in build: "
              "return api.NewRequestData.from_request(None, ([1],))"),
    # an attribute vLLM's object no longer has, read by kvoffload
    ("resumed", "AttributeError: 'Output' object has no attribute 'resumed_req_ids' at "
                f"fake_harness/adapter.py:{_line(FAKE_HARNESS, 'Output()')} in resumed"),
    # vLLM calling kvoffload's object with a signature or an attribute it does not have
    ("call_back", f"at fake_vllm/api.py:{_line(FAKE_VLLM, 'launch_copy(1')} in call_back "
                  "(vLLM's code using fake_harness's Backend.launch_copy)"),
    ("use", "AttributeError: 'Backend' object has no attribute 'new_attribute' at "
            f"fake_vllm/api.py:{_line(FAKE_VLLM, 'backend.new_attribute')} in use "
            "(vLLM's code using fake_harness's Backend)"),
    # a module vLLM's code imports and this vLLM lacks is no crash of its connector either
    ("lazy_import", "ImportError: cannot import name 'moved_away' from 'fake_vllm'"),
])
def test_kvoffloads_own_failure_is_named_with_its_frame(fake_packages: tuple[Any, Path, Path], call: str,
                                                       says: str) -> None:
    adapter, ours, theirs = fake_packages
    found = harness_error(_raised(getattr(adapter, call)), (ours,), theirs)
    assert found is not None and says in found


@pytest.mark.parametrize(("call", "says"), [
    ("store", "AssertionError: a store of keys still in flight at "
              f"fake_vllm/api.py:{_line(FAKE_VLLM, 'assert not keys')} in prepare_store"),
    # a TypeError vLLM's own code raises is vLLM's, though kvoffload's frames called it
    ("add", "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int' at "
            f"fake_vllm/api.py:{_line(FAKE_VLLM, 'value + 1')} in add"),
])
def test_an_exception_raised_inside_vllm_stays_a_crash(fake_packages: tuple[Any, Path, Path], call: str,
                                                      says: str) -> None:
    adapter, ours, theirs = fake_packages
    error = _raised(getattr(adapter, call))
    assert harness_error(error, (ours,), theirs) is None
    assert crash_message(error, theirs) == says


def test_cells_stop_at_the_first_unsupported_one() -> None:
    from kvoffload_lab.vllm.common.runner import run_cells

    ran: list[tuple[str, str]] = []

    def checker_of(name: str) -> Any:
        def run(manager: str, reads: object) -> CheckerVerdict:
            ran.append((manager, name))
            if name == "hypothesis":
                raise UnsupportedVllmApi("TypeError: f() missing 1 required positional argument: 'x' at a.py:1 in g")
            if name == "sim":
                return CheckerVerdict(manager, name, "violation", "Crash", "AssertionError at vllm/x.py:3 in f")
            raise RuntimeError("never reached")
        return run

    results = run_cells([("lru", "sim"), ("lru", "hypothesis"), ("lru", "explore")], checker_of, None)
    assert ran == [("lru", "sim"), ("lru", "hypothesis")]
    assert [(r.result, r.invariant) for r in results] == [("violation", "Crash"), ("unsupported", UNSUPPORTED)]
    assert "f() missing 1 required positional argument" in (results[1].error or "")


def test_an_exception_escaping_a_checker_is_unsupported_not_a_violation() -> None:
    from kvoffload_lab.vllm.common.runner import run_cells

    def checker_of(name: str) -> Any:
        def run(manager: str, reads: object) -> CheckerVerdict:
            raise ValueError("this configuration is not accepted")
        return run

    [result] = run_cells([("arc", "explore"), ("lru", "sim")], checker_of, None)
    assert (result.manager, result.result, result.invariant) == ("arc", "unsupported", UNSUPPORTED)
    assert "ValueError: this configuration is not accepted" in (result.error or "")


@pytest.mark.parametrize(("as_json", "earlier"), [(False, False), (True, False), (False, True)])
def test_unsupported_api_is_one_line_and_exit_3(as_json: bool, earlier: bool, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import kvoffload_lab.commands.vllm as command
    import kvoffload_lab.vllm.common.locate as locate
    import kvoffload_lab.vllm.common.vllm_objects as vllm_objects

    install = locate.VllmInstall("0.99.0", Path("/src/vllm"), "--vllm-src")
    monkeypatch.setattr(locate, "locate_vllm", lambda src, simple=False: install)
    monkeypatch.setattr(vllm_objects, "warm_up", lambda: None)
    error = "TypeError: NewRequestData.from_request() missing 1 required positional argument: 'prefill_token_ids'"
    before = [CheckerVerdict("lru", "sim", seconds=1.0)] if earlier else []
    monkeypatch.setattr(command, "_run_checkers", lambda *args: [
        *before, CheckerVerdict("lru", "hypothesis", "unsupported", UNSUPPORTED, error)])
    assert main(["vllm", "check", "--vllm-src", "/src", *(["--json"] if as_json else [])]) == 3
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert "vLLM 0.99.0" in line and "unsupported vLLM API" in line and "lru x hypothesis" in line and error in line
    assert "violation" not in (out + err).lower()
    if as_json:
        assert json.loads(out)["results"][0]["result"] == "unsupported"
    elif earlier:  # the cells that ran before it are shown as usual
        assert "ok (1.0 s)" in out and "UNSUPPORTED vLLM API" in out
    else:
        assert out == ""


# --- a vLLM tree whose API kvoffload does not know, and one whose code really crashes ---

# Appended to a copy of a release's module: a required argument kvoffload's calls do not pass.
NEW_REQUIRED_ARGUMENT = '''

# Added by kvoffload's tests: an API kvoffload does not know.
def _with_a_new_argument(function, qualname):
    def changed(*args, a_new_required_argument, **kwargs):
        return function(*args, **kwargs)

    changed.__qualname__ = qualname
    return changed
'''
UNKNOWN_API = {
    # kvoffload's adapter calls it in each step (0.34.0 made its third argument required)
    "offloading": ("v1/core/sched/output.py", NEW_REQUIRED_ARGUMENT + '''
NewRequestData.from_request = classmethod(
    _with_a_new_argument(NewRequestData.from_request.__func__, "NewRequestData.from_request"))
'''),
    # the simple connector's harness builds each request
    "simple": ("v1/request.py", NEW_REQUIRED_ARGUMENT + '''
Request.__init__ = _with_a_new_argument(Request.__init__, "Request.__init__")
'''),
}
# Appended to the copy of vLLM's CPU manager: vLLM's own code failing an assertion.
CRASHING_MANAGER = '''

# Added by kvoffload's tests: vLLM's own code fails an assertion.
def _prepare_store_fails(self, *args, **kwargs):
    assert False, "injected into vLLM's manager by kvoffload's tests"


CPUOffloadingManager.prepare_store = _prepare_store_fails
'''


def _vllm_tree_copy(tmp_path: Path) -> Path:
    """A copy of the importable vLLM's Python sources (``$KVOFFLOAD_VLLM_SRC``, else the installed
    package) and its version, in ``tmp_path/vllm-copy``."""
    source = os.environ.get("KVOFFLOAD_VLLM_SRC")
    if source:
        package = Path(source) / "vllm"
    else:
        spec = importlib.util.find_spec("vllm")
        assert spec is not None and spec.submodule_search_locations
        package = Path(next(iter(spec.submodule_search_locations)))
    root = tmp_path / "vllm-copy"
    shutil.copytree(package, root / "vllm", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    for info in package.parent.glob("vllm-*.dist-info"):
        (root / info.name).mkdir()
        shutil.copy(info / "METADATA", root / info.name / "METADATA")
    return root


def _check(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvoffload_lab.cli", "vllm", "check", "--vllm-src", str(root),
                           "--checker", "sim", *argv], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_available(), reason="vLLM is not importable (install it or set KVOFFLOAD_VLLM_SRC)")
@pytest.mark.parametrize(("connector", "mode"), [("offloading", ["--manager", "lru"]),
                                                 ("simple", ["--offload-mode", "eager"])])
def test_a_vllm_api_kvoffload_does_not_know_is_one_line_exit_3(tmp_path: Path, connector: str,
                                                              mode: list[str]) -> None:
    root = _vllm_tree_copy(tmp_path)
    module, patch = UNKNOWN_API[connector]
    with (root / "vllm" / module).open("a") as source:
        source.write(patch)
    run = _check(root, "--connector", connector, *mode)
    said = [line for line in run.stderr.splitlines() if line.startswith("kvoffload vllm")]
    # stdout holds no table (only what vLLM itself may log there, e.g. 0.26.0's missing triton)
    assert run.returncode == 3 and "kvoffload vllm check" not in run.stdout, run.stderr[-2000:]
    assert "violation" not in (run.stdout + run.stderr).lower()
    assert len(said) == 1 and "unsupported vLLM API" in said[0], run.stderr[-2000:]
    assert "missing 1 required keyword-only argument: 'a_new_required_argument'" in said[0]
    where = "offloading/adapter" if connector == "offloading" else "simple/compat"
    assert f"at kvoffload_lab/vllm/{where}.py:" in said[0]
    assert "violation" not in said[0].lower() and "Crash" not in said[0]


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_available(), reason="vLLM is not importable (install it or set KVOFFLOAD_VLLM_SRC)")
def test_an_assertion_failing_inside_vllms_manager_is_still_a_crash(tmp_path: Path) -> None:
    root = _vllm_tree_copy(tmp_path)
    with (root / "vllm" / "v1" / "kv_offload" / "cpu" / "manager.py").open("a") as source:
        source.write(CRASHING_MANAGER)
    run = _check(root, "--manager", "lru", "--json")
    assert run.returncode == 1, run.stderr[-2000:]
    [result] = json.loads(run.stdout.splitlines()[-1])["results"]
    assert (result["result"], result["invariant"]) == ("violation", "Crash")
    assert "injected into vLLM's manager" in result["error"]
    assert "at vllm/v1/kv_offload/cpu/manager.py:" in result["error"] and result["trace"]
