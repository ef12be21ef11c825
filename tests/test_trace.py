"""Traces: the writer records every transition; the mirror of the spec replays simulator traces and
rejects hand-made bad ones at the right line; the generated TLA+ trace module checks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload.cli import main
from kvoffload.sim import Engine, EngineConfig, MultiTurnWorkload, WorkloadConfig
from kvoffload.spec.lifecycle import REQUEST_LIFECYCLE
from kvoffload.spec.mirror import MalformedTrace, check_trace_file, check_trace_lines
from kvoffload.statemachine.runtime import TransitionEvent
from kvoffload.statemachine.trace import TraceWriter, default_variables
from kvoffload.statemachine.trace_tla import write_trace_module


def run_engine(config: EngineConfig, writer: TraceWriter | None = None, users: int = 4, turns: int = 2) -> Engine:
    engine = Engine(config)
    if writer is not None:
        writer.attach(engine.scheduler.lifecycle, step=lambda: engine.scheduler.step)
    workload = MultiTurnWorkload(WorkloadConfig(users=users, turns=turns, seed=config.seed))
    workload.attach(engine)
    for _ in range(20_000):
        workload.tick(engine)
        if workload.done and engine.idle:
            return engine
        engine.step()
    raise AssertionError("the engine did not finish the workload")


# Small enough to preempt, faulty enough to fail loads, abort and reset: every trigger fires.
FAULTY = EngineConfig(
    num_gpu_blocks=28, num_cpu_blocks=48, fault_rate=0.1, abort_probability=0.05, reset_probability=0.02, seed=2
)


# ---------------------------------------------------------------------- the writer
def test_writer_writes_every_transition(tmp_path: Path) -> None:
    path = tmp_path / "trace.ndjson"
    fired: list[tuple[Any, ...]] = []
    writer = TraceWriter.open(path)
    engine = Engine(FAULTY)
    writer.attach(engine.scheduler.lifecycle, step=lambda: engine.scheduler.step)
    engine.scheduler.lifecycle.add_observer(
        lambda event, _: fired.append((event.instance_id, event.trigger, event.source, event.dest))
    )
    workload = MultiTurnWorkload(WorkloadConfig(users=4, turns=3, seed=2))
    workload.attach(engine)
    while not (workload.done and engine.idle):
        workload.tick(engine)
        engine.step()
    writer.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["request"], r["trigger"], r["from"], r["to"]) for r in lines] == fired
    assert [r["seq"] for r in lines] == list(range(1, len(lines) + 1))
    assert {r["lifecycle"] for r in lines} == {"request"}
    steps = [r["step"] for r in lines]
    assert steps == sorted(steps)
    # The run exercised more than the happy path, or this test would prove little.
    assert {r["trigger"] for r in lines} == set(REQUEST_LIFECYCLE.triggers)
    guarded = [r for r in lines if r["trigger"] in ("clean", "resume")]
    assert guarded and all(r["jobs_in_flight"] == 0 for r in guarded)


def test_writer_detaches_on_close() -> None:
    stream = io.StringIO()
    writer = TraceWriter(stream)
    engine = Engine(EngineConfig(seed=1))
    writer.attach(engine.scheduler.lifecycle, step=lambda: engine.scheduler.step)
    writer.close()
    engine.add_request(list(range(1, 40)), 2)
    engine.drain()
    assert stream.closed
    assert writer.seq == 0


def test_custom_variables_and_defaults() -> None:
    stream = io.StringIO()
    writer = TraceWriter(stream)

    class Instance:
        request_id = "r"
        state = "running"
        load_job = None
        store_jobs = frozenset({3, 1})
        signals = 0

    assert default_variables(Instance()) == {"load_job": None, "store_jobs": [1, 3], "signals": 0, "jobs_in_flight": 2}
    writer.write(TransitionEvent("request", "r", "preempt", "running", "preempted"), 7, {"extra": 1})
    line = json.loads(stream.getvalue())
    assert line == {
        "seq": 1, "step": 7, "lifecycle": "request", "request": "r", "trigger": "preempt",
        "from": "running", "to": "preempted", "extra": 1,
    }


# ---------------------------------------------------------------------- simulator traces
@pytest.mark.parametrize("faults", ["0", "0.1"])
def test_simulated_traces_replay_cleanly(tmp_path: Path, faults: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sim.ndjson"
    argv = ["simulate", "--users", "5", "--turns", "2", "--gpu-blocks", "40", "--faults", faults, "--seed", "2"]
    assert main([*argv, "--json", "--trace", str(path)]) == 0
    capsys.readouterr()
    assert main(["trace", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: OK: ") and "transitions: " in out
    assert main(["trace", "check", "--json", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] and summary["lines"] == len(path.read_text().splitlines())
    assert summary["transitions"]["signal"] == summary["transitions"]["finish"] == summary["requests"]
    assert summary["unfinished"] == []


def test_many_simulator_traces_replay(tmp_path: Path) -> None:
    """Preemption, failed loads, resets and aborts, over several seeds."""
    seen: set[str] = set()
    for seed in range(4):
        path = tmp_path / f"sim{seed}.ndjson"
        config = EngineConfig(
            num_gpu_blocks=28, num_cpu_blocks=40, fault_rate=0.15, abort_probability=0.05,
            reset_probability=0.02, job_delay_steps=seed % 3, seed=seed,
        )
        with TraceWriter.open(path) as writer:
            engine = run_engine(config, writer, users=5, turns=2)
        assert engine.leaks() == []
        result = check_trace_file(path)
        assert result.ok, result.error
        seen |= set(result.transitions)
    assert seen == set(REQUEST_LIFECYCLE.triggers)


# ---------------------------------------------------------------------- bad traces
def line(request: str, trigger: str, source: str, dest: str, step: int = 1, jobs: int = 0, **extra: Any) -> str:
    store_jobs = extra.pop("store_jobs", list(range(100, 100 + jobs)))
    record = {
        "step": step, "lifecycle": "request", "request": request, "trigger": trigger, "from": source, "to": dest,
        "load_job": extra.pop("load_job", None), "store_jobs": store_jobs, "jobs_in_flight": jobs, **extra,
    }
    return json.dumps(record)


GOOD = [
    line("a", "schedule", "waiting", "running", 1),
    line("a", "finish", "running", "finished_pending_store", 2, jobs=1),
    line("a", "signal", "finished_pending_store", "signaled", 3, jobs=1),
    line("a", "clean", "signaled", "cleaned", 4),
]


def with_seq(lines: list[str]) -> list[str]:
    return [json.dumps({"seq": n, **json.loads(text)}) for n, text in enumerate(lines, 1)]


def test_hand_made_good_trace() -> None:
    result = check_trace_lines(with_seq(GOOD))
    assert result.ok and result.lines == 4 and result.requests == 1
    assert dict(result.transitions) == {"schedule": 1, "finish": 1, "signal": 1, "clean": 1}


BAD: dict[str, tuple[list[str], int, str]] = {
    "trigger not allowed from state": (
        [GOOD[0], line("a", "load_done", "running", "running", 2)],
        2, "trigger 'load_done' is not allowed from state 'running'",
    ),
    "clean with jobs in flight": (
        [*GOOD[:3], line("a", "clean", "signaled", "cleaned", 4, jobs=1)],
        4, "'clean' needs guard 'no_jobs_in_flight' but 1 job(s) are in flight",
    ),
    "resume with jobs in flight": (
        [GOOD[0], line("a", "preempt", "running", "preempted", 2, jobs=1),
         line("a", "resume", "preempted", "waiting", 3, jobs=1)],
        3, "'resume' needs guard 'no_jobs_in_flight'",
    ),
    "transition after cleaned": (
        [*GOOD, line("a", "schedule", "waiting", "running", 5)],
        5, "'schedule' after the request was cleaned (line 4)",
    ),
    "unknown trigger": (
        [GOOD[0], line("a", "evict", "running", "running", 2)],
        2, "unknown trigger 'evict'",
    ),
    "unknown request": (
        [GOOD[0], line("b", "finish", "running", "finished_pending_store", 2)],
        2, "request 'b': unknown request: its first transition starts in 'running'",
    ),
    "from does not match": (
        [GOOD[0], line("a", "finish", "waiting", "finished_pending_store", 2)],
        2, "recorded from 'waiting', but the request is in 'running'",
    ),
    "wrong destination": (
        [line("a", "schedule", "waiting", "loading", 1)],
        1, "goes to 'running', not 'loading'",
    ),
    "load and stores at once": (
        [line("a", "load", "waiting", "loading", 1, jobs=2, load_job=7, store_jobs=[8])],
        1, "JobsExclusive",
    ),
    "signal long after finish": (
        [GOOD[0], GOOD[1], line("a", "signal", "finished_pending_store", "signaled", 5, jobs=1)],
        3, "signaled at step 5, but it finished at step 2",
    ),
    "step goes back": (
        [line("a", "schedule", "waiting", "running", 3), line("b", "schedule", "waiting", "running", 2)],
        2, "step 2 is before the previous line's step 3",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_trace_rejected_at_the_right_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, bad_line, reason = BAD[case]
    result = check_trace_lines(lines)
    assert result.error is not None
    assert result.error.line == bad_line
    assert reason in result.error.reason
    assert result.lines == bad_line - 1
    path = tmp_path / "bad.ndjson"
    path.write_text("\n".join(lines) + "\n")
    assert main(["trace", "check", str(path)]) == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"{path}:{bad_line}: ") and reason in out
    assert main(["trace", "check", "--json", str(path)]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["line"] == bad_line


def test_seq_gap_is_rejected() -> None:
    lines = with_seq(GOOD)
    del lines[1]
    result = check_trace_lines(lines)
    assert result.error is not None and result.error.line == 2 and "seq 3 does not follow seq 1" in result.error.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"request": "a", "from": "waiting", "to": "running"}), "missing field 'trigger'"),
        (json.dumps({"request": "a", "trigger": 3, "from": "waiting", "to": "running"}), "field 'trigger'"),
    ],
)
def test_malformed_line_is_one_clear_error(
    text: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(MalformedTrace) as raised:
        check_trace_lines([GOOD[0], "", text])
    assert raised.value.line == 3 and reason in raised.value.reason
    path = tmp_path / "malformed.ndjson"
    path.write_text(f"{GOOD[0]}\n\n{text}\n")
    assert main(["trace", "check", str(path)]) == 2
    captured = capsys.readouterr()
    err_lines = captured.err.strip().splitlines()
    assert len(err_lines) == 1 and f"{path}:3: " in err_lines[0] and reason in err_lines[0]
    assert "Traceback" not in captured.err


def test_missing_file_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "check", str(tmp_path / "nope.ndjson")]) == 2
    assert "no such file" in capsys.readouterr().err


# ---------------------------------------------------------------------- TLA+ trace validation
def _embedded() -> Any:
    try:
        from kvoffload.tla import check_model
    except ImportError:  # pragma: no cover - the embedded checker is another module's work
        pytest.skip("kvoffload.tla (the embedded checker) is not available")
    return check_model


def test_trace_tla_module_checks_with_the_embedded_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_model = _embedded()
    path = tmp_path / "sim.ndjson"
    config = EngineConfig(num_gpu_blocks=28, num_cpu_blocks=40, fault_rate=0.15, abort_probability=0.05,
                          reset_probability=0.03, seed=1)
    with TraceWriter.open(path) as writer:
        run_engine(config, writer, users=3, turns=2)
    out = tmp_path / "tla"
    assert main(["trace", "tla", str(path), "--out", str(out)]) == 0
    assert "TraceKVOffload.tla" in capsys.readouterr().out
    result = check_model(out / "TraceKVOffload.tla")
    lines = len(path.read_text().splitlines())
    assert result.result == "success", result.message
    # One state per line consumed, plus the initial state: the whole trace was explained.
    assert result.distinct_states == lines + 1
    # The same module through the command the README shows.
    assert main(["tla", "check", str(out / "TraceKVOffload.tla"), "--engine", "embedded"]) == 0
    assert "No error has been found" in capsys.readouterr().out


def test_trace_tla_module_rejects_a_bad_line(tmp_path: Path) -> None:
    check_model = _embedded()
    lines, bad_line, _ = BAD["clean with jobs in flight"]
    records = [json.loads(text) for text in lines]
    tla_path, _ = write_trace_module(records, REQUEST_LIFECYCLE, tmp_path)
    result = check_model(tla_path)
    assert result.result == "safety failure" and result.violated == "NotStuck"
    assert result.trace[-1].state["i"] == str(bad_line)
    lines, bad_line, _ = BAD["trigger not allowed from state"]
    tla_path, _ = write_trace_module([json.loads(text) for text in lines], REQUEST_LIFECYCLE, tmp_path / "b")
    result = check_model(tla_path)
    assert result.violated == "NotStuck" and result.trace[-1].state["i"] == str(bad_line)


def test_trace_tla_rejects_empty_and_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.ndjson"
    empty.write_text("")
    assert main(["trace", "tla", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "empty" in capsys.readouterr().err
    bad = tmp_path / "bad.ndjson"
    bad.write_text("{oops\n")
    assert main(["trace", "tla", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}:1: malformed JSON" in capsys.readouterr().err
