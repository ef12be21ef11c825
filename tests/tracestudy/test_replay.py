"""Replaying block traces through the real scheduler: hand-computed hits, invariants, the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload.offload.policies import POLICIES
from kvoffload_lab.cli import main
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.tracestudy.cpu_oracle import NEVER, BeladyCPUPolicy
from kvoffload_lab.tracestudy.mooncake import TraceRequest, block_chains
from kvoffload_lab.tracestudy.replay import ReplayError, TraceReplay, replay_trace

TRACE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


def _request(ids: list[int], full: int, at: float = 0) -> TraceRequest:
    # ``full`` full 512-token blocks plus a partial one, which is never cached.
    return TraceRequest(0, at, full * 512 + 100, 20, tuple(ids))


def _run(requests: list[TraceRequest], gpu: int, cpu: int, policy: str = "lru", **kw: int) -> dict:
    result = replay_trace(requests, gpu, cpu, policy, check_every=1, **kw).as_dict()
    assert result["violations"] == 0, result["violation_messages"]
    assert result["leaks"] == 0, result["leak_messages"]
    assert result["invariant_checks"] >= len(requests)
    return result


def test_gpu_prefix_hits() -> None:
    a = _request([1, 2, 3, 9], 3)
    b = _request([1, 2, 3, 4, 9], 4)
    result = _run([a, b], gpu=16, cpu=16)
    # b finds a's three blocks in the GPU prefix cache; nothing comes from CPU.
    assert (result["blocks"], result["hit_ratio"], result["gpu_hit_ratio"]) == (7, 3 / 7, 3 / 7)
    assert result["cpu_hit_ratio"] == 0


def test_cpu_hits_after_the_gpu_evicted_everything() -> None:
    a = _request([1, 2, 3, 9], 3)  # 3 full blocks + 1 partial: 4 of the 5 GPU blocks
    x = _request([7, 8, 9, 10, 11], 4)  # 5 blocks: every cached block of a is reallocated
    result = _run([a, x, a], gpu=5, cpu=16)
    assert result["blocks"] == 10
    assert result["gpu_hit_ratio"] == 0
    assert result["cpu_hit_ratio"] == 3 / 10
    assert result["infinite_hit_ratio"] == result["belady_hit_ratio"] == result["cpu_oracle_hit_ratio"] == 3 / 10


def test_cpu_oracle_bypasses_keys_without_a_future() -> None:
    # GPU and CPU tiers of 4 and 3 blocks: x takes every GPU block of a, and LRU stores x's three
    # one-off blocks over a's three; the oracle never stores them (no next use) and keeps a's.
    a = _request([1, 2, 3, 9], 3)
    x = _request([7, 8, 10, 11], 3)
    lru = _run([a, x, a], gpu=4, cpu=3)
    assert lru["gpu_hit_ratio"] == lru["cpu_hit_ratio"] == 0
    assert lru["cpu_oracle_hit_ratio"] == 3 / 9
    assert lru["ratio_to_cpu_oracle"] == 0


def test_cpu_oracle_evicts_the_furthest_next_use() -> None:
    policy = BeladyCPUPolicy([[1, 2], [3], [2], [1], [3]], capacity=2)
    policy.advance(0, [1, 2])
    assert policy.next_use(1) == 3 and policy.next_use(2) == 2 and policy.next_use(99) == NEVER
    assert policy.admit(1) and policy.admit(2)
    policy.on_insert(1, None)
    policy.on_insert(2, 1)
    policy.advance(1, [3])
    assert policy.next_use(3) == 4
    assert not policy.admit(3)  # next used at 4, after every resident key: bypassed
    policy.advance(2, [2])  # 2 is used again: its next use is now never
    assert policy.admit(3)  # displaces 2, whose next use is now the furthest
    assert policy.victims(1, lambda key: True, [3]) == [2]
    policy.on_remove(2)
    policy.on_insert(3, None)
    policy.advance(3, [1])
    assert policy.victims(1, lambda key: key != 3, []) == [1]  # 3 is furthest but not evictable
    assert policy.victims(2, lambda key: key != 3, []) is None


def test_gpu_then_cpu_hits_in_one_request() -> None:
    # GPU of 6: after a, the free queue is [4, 5, 3(tail of a), 2(a3), 1(a2), 0(a1)]: vLLM frees a
    # request's blocks tail first. y takes 5 blocks: 4, 5, 3, 2, 1, so only a1 stays in GPU.
    a = _request([1, 2, 3, 9], 3)
    y = _request([7, 8, 9, 10, 11], 4)
    for delay in (0, 1, 2):
        result = _run([a, y, a], gpu=6, cpu=16, worker_delay=delay)
        assert result["blocks"] == 10
        assert result["gpu_hit_ratio"] == 1 / 10
        assert result["cpu_hit_ratio"] == 2 / 10


def test_gpu_prefix_cache_frees_tail_first() -> None:
    cache = BlockPool(4)
    blocks = cache.allocate(3)
    assert blocks is not None
    for block, key in zip(blocks, (11, 12, 13), strict=True):
        cache.register(block, key)
    cache.free(blocks)
    cache.allocate(2)  # block 3 (never used), then the tail block of the chain
    assert cache.cached_prefix([11, 12, 13]) == blocks[:2]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_under_pressure(policy: str) -> None:
    # Small tiers, shared prefixes and repeats: evictions, admissions and loads all happen.
    requests = [_request([i % 3, 10 + i % 5, 20 + i % 7, 30 + i], 3) for i in range(60)]
    result = _run(requests, gpu=8, cpu=6, policy=policy)
    assert result["hit_ratio"] <= result["infinite_hit_ratio"]
    assert result["requests"] == 60


def test_request_larger_than_the_gpu_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ReplayError, match="raise --gpu-blocks"):
        TraceReplay(4, 4).run(block_chains([_request([1, 2, 3, 4], 4)]))
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3, 4]}))
    assert main(["replay", str(path), "--gpu-blocks", "3"]) == 2
    assert "raise --gpu-blocks" in capsys.readouterr().err
    assert main(["replay", str(path), "--policy", "nope"]) == 2
    assert "unknown eviction policy" in capsys.readouterr().err


def test_command_json_on_a_synthetic_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        {"timestamp": 10, "input_length": 1600, "output_length": 5, "hash_ids": [1, 2, 3, 4]},
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 5]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["replay", str(path), "--json", "--gpu-blocks", "16", "--cpu-blocks", "16"]) == 0
    data = json.loads(capsys.readouterr().out)
    # Sorted by timestamp: [1, 2] first, then [1, 2, 3] hits its two blocks in GPU.
    assert (data["requests"], data["blocks"], data["hit_ratio"]) == (2, 5, 2 / 5)
    for key in (
        "gpu_hit_ratio", "cpu_hit_ratio", "belady_hit_ratio", "infinite_hit_ratio", "cpu_oracle_hit_ratio",
        "ratio_to_cpu_oracle", "violations", "leaks",
        "seconds", "policy", "gpu_blocks", "cpu_blocks", "skipped_lines",
    ):
        assert key in data
    assert main(["replay", str(path), "--gpu-blocks", "16", "--cpu-blocks", "16"]) == 0
    assert "hit_ratio" in capsys.readouterr().out


@pytest.mark.slow
def test_sweep_writes_a_png_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": 2000, "output_length": 5, "hash_ids": [0, i % 4, i % 6, i]})
            + "\n"
            for i in range(40)
        )
    )
    plot = tmp_path / "out" / "sweep.png"
    code = main(
        ["replay", str(path), "--sweep", "--json", "--cpu-sizes", "2,4", "--gpu-blocks", "6", "--plot", str(plot)]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data["runs"]) == 2 * len(POLICIES)
    assert data["violations"] == data["leaks"] == 0
    assert all(run["hit_ratio"] <= data["infinite_hit_ratio"] for run in data["runs"])
    assert set(data["cpu_oracle_hit_ratio"]) == {"2", "4"}
    oracle = data["cpu_oracle_hit_ratio"]
    assert all(run["cpu_oracle_hit_ratio"] == oracle[str(run["cpu_blocks"])] for run in data["runs"])
    assert main(["replay", str(path), "--sweep", "--cpu-sizes", "2", "--gpu-blocks", "6", "--plot", str(plot)]) == 0
    assert "belady" in capsys.readouterr().out


@pytest.mark.skipif(
    not TRACE.exists(), reason="Mooncake trace not found at ../shared/traces/mooncake_conversation_trace.jsonl"
)
@pytest.mark.parametrize("policy", ["lru", "doorkeeper"])
def test_real_trace_prefix(policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(TRACE), "--limit", "500", "--json", "--policy", policy, "--check-every", "25"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 500 and data["skipped_lines"] == 0
    assert data["violations"] == 0 and data["leaks"] == 0
    assert 0 < data["hit_ratio"] <= data["infinite_hit_ratio"]
    assert data["belady_hit_ratio"] <= data["infinite_hit_ratio"]
    assert data["hit_ratio"] <= data["cpu_oracle_hit_ratio"] <= data["infinite_hit_ratio"]
    assert data["ratio_to_cpu_oracle"] == pytest.approx(data["hit_ratio"] / data["cpu_oracle_hit_ratio"])
    assert data["hit_ratio"] == pytest.approx(data["gpu_hit_ratio"] + data["cpu_hit_ratio"])


def test_errors_and_broken_invariants_are_counted_as_violations(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvoffload.lifecycles.invariants import Violation
    from kvoffload.offload.errors import LifecycleViolation
    from kvoffload_lab.tracestudy import replay as trace_replay

    chains = block_chains([_request([1, 2, 3], 2), _request([1, 2, 4], 2)])
    replay = TraceReplay(8, 8, check_every=1)

    def broken(*args: object, **kwargs: object) -> None:
        raise LifecycleViolation("NoManagerCallAfterSignal", "r0", "prepare_store", "retired")

    monkeypatch.setattr(replay.manager, "prepare_store", broken)
    result = replay.run(chains)
    assert result.violations == 1 and result.error is not None
    assert "NoManagerCallAfterSignal" in result.violation_messages[0]

    monkeypatch.setattr(trace_replay, "check_invariants", lambda snapshot: [Violation("JobsExclusive", "fake")])
    result = TraceReplay(8, 8, check_every=1).run(chains)
    assert result.error is None
    assert result.violations == result.invariant_checks == 3  # after each request, and at the end
    assert result.violation_messages[0] == "JobsExclusive: fake"


def _trace_file(tmp_path: Path, count: int) -> Path:
    # Request i repeats request i - 2's two blocks: every third-on request can hit.
    lines = [
        json.dumps({"timestamp": i, "input_length": 1100, "output_length": 5, "hash_ids": [i % 2, 10 + i % 2, 99 + i]})
        for i in range(count)
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_requests_window_replays_that_slice_in_arrival_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _trace_file(tmp_path, 10)
    assert main(["replay", str(path), "--json", "--requests", "6:", "--gpu-blocks", "8", "--cpu-blocks", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["request_window"] == [6, None] and data["requests"] == 4
    # The window starts cold: its first two requests miss, the next two hit both blocks.
    assert data["blocks"] == 8 and data["hit_ratio"] == 4 / 8


@pytest.mark.parametrize(
    ("window", "message"),
    [("5", "expected START:END, got '5'"), ("4:2", "expected 0 <= START < END"), ("x:", "expected START:END")],
)
def test_bad_requests_window_is_one_line(
    window: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", str(_trace_file(tmp_path, 3)), "--requests", window])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_requests_window_past_the_end_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(_trace_file(tmp_path, 3)), "--requests", "3:"]) == 2
    assert "--requests 3: selects no request of the 3" in capsys.readouterr().err
