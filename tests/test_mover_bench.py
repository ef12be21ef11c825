"""``kvoffload bench mover``: what it measures and how it orders its runs (never how fast)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kvoffload.benchmarks import mover as bench
from kvoffload.benchmarks import mover_workload


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("settle", [True, False])
def test_runs_are_interleaved_rounds_after_a_warm_up(settle: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variant runs once to warm up, then once per round, each round in its own order; with
    settle, every timed run (and only those) first waits for the process to go idle."""
    calls: list[str] = []
    settles: list[int] = []
    monkeypatch.setattr(mover_workload, "_settle", lambda: settles.append(len(calls)))
    variants = {name: (lambda name=name: calls.append(name)) for name in "abcd"}
    timings = mover_workload.median_seconds(variants, 5, lambda: None, settle)
    assert calls[:4] == list("abcd")
    rounds = [calls[4 + 4 * r : 8 + 4 * r] for r in range(5)]
    assert len(calls) == 4 + 5 * 4 and all(sorted(r) == list("abcd") for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # shuffled, so no variant always follows the same one
    assert settles == (list(range(4, 24)) if settle else [])
    assert set(timings) == set("abcd")
    assert all(t.seconds >= 0 and t.cpu_seconds >= 0 for t in timings.values())


def test_figures_come_from_one_run_of_every_variant() -> None:
    out = bench.run(parse("--device", "cpu", "--total-mib", "1", "--repeats", "1", "--block-sizes", "4096,65536"))
    json.dumps(out)  # JSON-ready
    assert out["settle"] is True and out["total_mib"] == 1 and out["repeats"] == 1
    assert [r["block_bytes"] for r in out["results"]] == [4096, 65536]
    for r in out["results"]:
        assert r["blocks"] * r["block_bytes"] == 1 << 20
        for key in ("store", "load", "naive", "gather_store", "gather_load"):
            assert r[f"{key}_ratio"] > 0
        for key in ("store", "load", "contiguous"):
            assert r[f"{key}_cpu_ms"] >= 0
        if out["cpu_kernel"] == "numba":
            assert r["torch_store_ratio"] > 0 and r["torch_load_ratio"] > 0


def test_no_settle_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mover_workload, "_settle", lambda: pytest.fail("--no-settle must not wait"))
    args = parse("--device", "cpu", "--total-mib", "1", "--repeats", "1", "--block-sizes", "4096", "--no-settle")
    out = bench.run(args)
    assert out["settle"] is False and len(out["results"]) == 1


@pytest.mark.parametrize("flag", [[], ["--no-huge-pages"]])
def test_mover_and_reference_buffers_share_one_page_size(flag: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine side, the CPU tier and both reference buffers are allocated alike (huge pages
    where offered, unless --no-huge-pages), so the ratio compares copies, not page sizes."""
    from kvoffload.dataplane import host_memory

    real = host_memory.empty
    asked: list[bool] = []

    def recording(shape: tuple[int, ...], dtype: object, huge_pages: bool = True) -> object:
        asked.append(huge_pages)
        return real(shape, dtype, huge_pages)  # type: ignore[arg-type]

    monkeypatch.setattr(host_memory, "empty", recording)
    args = parse("--device", "cpu", "--total-mib", "1", "--repeats", "1", "--block-sizes", "4096", *flag)
    out = bench.run(args)
    expected = not flag and host_memory.huge_pages_available()
    assert out["huge_pages"] is expected
    assert asked == [expected] * (2 * args.layers + 2)  # engine and tier per layer, two references


@pytest.mark.parametrize("ids", ["list", "array"])
def test_jobs_get_the_id_type_asked_for(ids: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--ids array hands every mover job int64 numpy arrays (as vLLM's specs hold them), list plain lists."""
    import numpy as np

    from kvoffload.dataplane.mover import BlockMover

    seen: set[str] = set()
    real = BlockMover.store

    def recording(self: BlockMover, job_id: int, gpu_ids: object, cpu_ids: object) -> None:
        seen.update(type(v).__name__ for v in (gpu_ids, cpu_ids))
        if isinstance(gpu_ids, np.ndarray):
            assert gpu_ids.dtype == np.int64
        real(self, job_id, gpu_ids, cpu_ids)  # type: ignore[arg-type]

    monkeypatch.setattr(BlockMover, "store", recording)
    args = parse("--device", "cpu", "--total-mib", "1", "--repeats", "1", "--block-sizes", "4096", "--ids", ids)
    out = bench.run(args)
    assert out["ids"] == ids
    assert seen == ({"ndarray"} if ids == "array" else {"list"})


def test_array_ids_without_numpy_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from kvoffload.benchmarks.errors import BenchmarkError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a))
    with pytest.raises(BenchmarkError, match=r"^--ids array needs numpy, which is not installed"):
        bench.run(parse("--device", "cpu", "--ids", "array"))


def test_the_cpu_kernel_is_a_mover_argument_not_a_module_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench hands each mover ``cpu_kernel``; the module flag the whole process reads stays put."""
    from kvoffload.dataplane import mover_cpu_kernel
    from kvoffload.dataplane.mover import BlockMover

    kernels: list[bool] = []
    real = BlockMover.__init__

    def recording(self: BlockMover, *args: object, **kwargs: object) -> None:
        kernels.append(bool(kwargs.get("cpu_kernel", True)))
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(BlockMover, "__init__", recording)
    before = mover_cpu_kernel.AVAILABLE
    out = bench.run(parse("--device", "cpu", "--total-mib", "1", "--repeats", "1", "--block-sizes", "4096"))
    assert mover_cpu_kernel.AVAILABLE is before
    assert kernels == ([True, False] if out["cpu_kernel"] == "numba" else [False])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only answer to --device cuda")
def test_device_cuda_without_a_gpu_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    from kvoffload.cli import main

    assert main(["bench", "mover", "--device", "cuda", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--device cuda, but torch" in lines[0] and "sees no CUDA device" in lines[0]


@pytest.mark.parametrize(
    ("block_bytes", "goal"), [(4096, 0.6), (8192, 0.6), (16384, 0.8), (32768, 0.8), (65536, 0.9), (1 << 20, 0.9)]
)
def test_goal_ratio_follows_the_issue(block_bytes: int, goal: float) -> None:
    from kvoffload.benchmarks import mover_cuda

    assert mover_cuda.goal_ratio(block_bytes) == goal


def test_goals_judge_the_chosen_path_of_each_direction() -> None:
    from kvoffload.benchmarks import mover_cuda

    paths = {
        "batched": {"store": {"ratio": 0.95, "slowdown": 0.01}, "load": {"ratio": 0.7, "slowdown": 0.0}},
        "gather": {"store": {"ratio": 0.99, "slowdown": 0.2}, "load": {"ratio": 0.85, "slowdown": None}},
    }
    chosen = {"store": {"path": "batched"}, "load": {"path": "gather"}}
    got = {g["direction"]: g for g in mover_cuda.goals(16384, chosen, paths)}
    assert got["store"]["ratio_met"] and got["store"]["slowdown_met"] and got["store"]["ratio_goal"] == 0.8
    assert got["load"]["path"] == "gather" and got["load"]["ratio_met"]
    assert not got["load"]["slowdown_met"]  # unknown slowdown is not a met goal


def test_table_option_writes_what_the_mover_reads(tmp_path: Path) -> None:
    from kvoffload.dataplane.copy_calibration import Measurement, read_table

    results = [
        {"measurements": [{"path": "merged", "direction": "store", "block_bytes": 4096, "gbps": 3.5, "slowdown": 0.0}]},
        {
            "measurements": [
                {"path": "gather", "direction": "load", "block_bytes": 65536, "gbps": 40.0, "slowdown": None}
            ]
        },
    ]
    bench._write_table(tmp_path / "t.json", results, "cuda:0 test")
    assert read_table(tmp_path / "t.json") == [
        Measurement("merged", "store", 4096, 3.5, 0.0),
        Measurement("gather", "load", 65536, 40.0, None),
    ]
    from kvoffload.benchmarks.errors import BenchmarkError

    with pytest.raises(BenchmarkError, match=r"^--table .*missing/t.json: No such file or directory$"):
        bench._write_table(tmp_path / "missing" / "t.json", results, "cuda:0 test")
