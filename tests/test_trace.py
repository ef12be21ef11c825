"""Traces: the writer records every transition; the mirror of the spec replays simulator traces and
rejects hand-made bad ones at the right line; the generated TLA+ trace module checks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload.lifecycles import JOB_LIFECYCLE, REQUEST_LIFECYCLE
from kvoffload.statemachine.runtime import TransitionEvent
from kvoffload.statemachine.trace import TraceWriter
from kvoffload_lab.cli import main
from kvoffload_lab.sim import Engine, EngineConfig, MultiTurnWorkload, WorkloadConfig
from kvoffload_lab.statemachine.trace_tla import write_trace_module
from kvoffload_lab.verify.bugzoo import MUTANTS, Mutant
from kvoffload_lab.verify.mirror import MalformedTrace, check_trace_file, check_trace_lines
from kvoffload_lab.verify.trace_tla_rules import check_trace_module, write_product_trace_module
from tlacheck import check_model


def run_engine(config: EngineConfig, writer: TraceWriter | None = None, users: int = 4, turns: int = 2) -> Engine:
    engine = Engine(config)
    if writer is not None:
        engine.scheduler.attach_trace(writer)
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
    num_gpu_blocks=28, num_cpu_blocks=48, fault_rate=0.1, abort_probability=0.05, reset_probability=0.02, seed=3
)


# ---------------------------------------------------------------------- the writer
def test_writer_writes_every_transition(tmp_path: Path) -> None:
    path = tmp_path / "trace.ndjson"
    fired: list[tuple[Any, ...]] = []
    writer = TraceWriter.open(path)
    engine = Engine(FAULTY)
    engine.scheduler.attach_trace(writer)
    engine.scheduler.lifecycle.add_observer(
        lambda event, _: fired.append((event.instance_id, event.trigger, event.source, event.dest))
    )
    workload = MultiTurnWorkload(WorkloadConfig(users=4, turns=3, seed=2))
    workload.attach(engine)
    while not (workload.done and engine.idle):
        workload.tick(engine)
        engine.step()
    writer.close()
    everything = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["seq"] for r in everything] == list(range(1, len(everything) + 1))
    lines = [r for r in everything if r.get("lifecycle") == "request"]
    assert [(r["id"], r["trigger"], r["from"], r["to"]) for r in lines] == fired
    steps = [r["step"] for r in everything]
    assert steps == sorted(steps)
    # The run exercised more than the happy path, or this test would prove little.
    assert {r["trigger"] for r in lines} == set(REQUEST_LIFECYCLE.triggers)
    jobs = [r for r in everything if r.get("lifecycle") == "job"]
    assert {"prepare", "submit", "flush", "complete", "fail"} <= {r["trigger"] for r in jobs}
    assert all(r["chunks"] and r["kind"] in ("load", "store") for r in jobs if r["trigger"] == "prepare")
    calls = {(r["object"], r["call"]) for r in everything if "call" in r}
    assert {("manager", "prepare_store"), ("manager", "on_request_finished"), ("scheduler", "reset_cache")} <= calls
    guarded = [r for r in lines if r["trigger"] in ("clean", "resume")]
    assert guarded and all(r["jobs_in_flight"] == 0 for r in guarded)


def test_writer_detaches_on_close() -> None:
    stream = io.StringIO()
    writer = TraceWriter(stream)
    engine = Engine(EngineConfig(seed=1))
    engine.scheduler.attach_trace(writer)
    writer.close()
    engine.add_request(list(range(1, 40)), 2)
    engine.drain()
    assert stream.closed
    assert writer.seq == 0


def test_line_format_and_recorded_calls() -> None:
    stream = io.StringIO()
    writer = TraceWriter(stream)
    writer.write(TransitionEvent("request", "r", "preempt", "running", "preempted"), 7, {"extra": 1})

    class Target:
        def hello(self, name: str) -> str:
            return f"hi {name}"

    target = Target()
    writer.record_calls(target, "target", ["hello"], lambda: 8, lambda call, args: {"id": args[0]})
    assert target.hello("x") == "hi x"
    text = stream.getvalue()
    writer.close()
    assert "hello" not in vars(target)  # unwrapped on close
    first, second = (json.loads(raw) for raw in text.splitlines())
    assert first == {
        "seq": 1, "step": 7, "lifecycle": "request", "id": "r", "trigger": "preempt",
        "from": "running", "to": "preempted", "extra": 1,
    }
    assert second == {"seq": 2, "step": 8, "object": "target", "call": "hello", "id": "x"}


# ---------------------------------------------------------------------- simulator traces
@pytest.mark.parametrize("faults", ["0", "0.1"])
def test_simulated_traces_replay_cleanly(tmp_path: Path, faults: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sim.ndjson"
    argv = ["simulate", "--users", "5", "--turns", "2", "--gpu-blocks", "40", "--faults", faults, "--seed", "2"]
    assert main([*argv, "--json", "--trace", str(path)]) == 0
    capsys.readouterr()
    assert main(["trace", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: OK: ") and " request(s) (" in out and " job(s) (" in out
    assert main(["trace", "check", "--json", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] and summary["lines"] == len(path.read_text().splitlines())
    requests = summary["transitions"]["request"]
    assert requests["signal"] == requests["finish"] == summary["instances"]["request"]
    assert summary["transitions"]["job"]["prepare"] == summary["instances"]["job"]
    assert summary["unfinished"] == {"request": [], "job": []}
    # Each lifecycle alone, by name.
    for name in ("request", "job"):
        assert main(["trace", "check", "--lifecycle", name, "--json", str(path)]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert alone["ok"] and list(alone["transitions"]) == [name]


def test_many_simulator_traces_replay(tmp_path: Path) -> None:
    """Preemption, failed loads, resets and aborts, over several seeds."""
    seen: set[str] = set()
    seen_jobs: set[str] = set()
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
        seen |= set(result.replay.counts.transitions["request"])
        seen_jobs |= set(result.replay.counts.transitions["job"])
    assert seen == set(REQUEST_LIFECYCLE.triggers)
    assert seen_jobs == set(JOB_LIFECYCLE.triggers)


# ---------------------------------------------------------------------- bad traces
def line(request: str, trigger: str, source: str, dest: str, step: int = 1, jobs: int = 0, **extra: Any) -> str:
    store_jobs = extra.pop("store_jobs", list(range(100, 100 + jobs)))
    record = {
        "step": step, "lifecycle": "request", "id": request, "trigger": trigger, "from": source, "to": dest,
        "load_job": extra.pop("load_job", None), "store_jobs": store_jobs, "jobs_in_flight": jobs, **extra,
    }
    return json.dumps(record)


def job(job_id: int, trigger: str, source: str, dest: str, step: int = 1, **extra: Any) -> str:
    record = {
        "step": step, "lifecycle": "job", "id": job_id, "trigger": trigger, "from": source, "to": dest,
        "request": extra.pop("request", "a"), "kind": extra.pop("kind", "store"), "chunks": [0],
        "request_signals": extra.pop("request_signals", 0), **extra,
    }
    return json.dumps(record)


def call(obj: str, name: str, step: int = 1, request: str | None = None) -> str:
    return json.dumps({"step": step, "object": obj, "call": name, **({"id": request} if request else {})})


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
    assert result.ok and result.lines == 4 and result.replay.counts.instances["request"] == 1
    assert dict(result.replay.counts.transitions["request"]) == {"schedule": 1, "finish": 1, "signal": 1, "clean": 1}


BAD: dict[str, tuple[list[str], int, str]] = {
    "trigger not allowed from state": (
        [GOOD[0], line("a", "load_done", "running", "running", 2)],
        2, "trigger 'load_done' is not allowed from state 'running'",
    ),
    "clean with jobs in flight": (
        [*GOOD[:3], line("a", "clean", "signaled", "cleaned", 4, jobs=1)],
        4, "'clean' needs guard 'no_jobs_in_flight' (jobs_in_flight == 0) but jobs_in_flight = 1",
    ),
    "resume with jobs in flight": (
        [GOOD[0], line("a", "preempt", "running", "preempted", 2, jobs=1),
         line("a", "resume", "preempted", "waiting", 3, jobs=1)],
        3, "'resume' needs guard 'no_jobs_in_flight'",
    ),
    "transition after cleaned": (
        [*GOOD, line("a", "schedule", "waiting", "running", 5)],
        5, "'schedule' after the request reached 'cleaned' (line 4), a terminal state",
    ),
    "unknown trigger": (
        [GOOD[0], line("a", "evict", "running", "running", 2)],
        2, "unknown trigger 'evict'",
    ),
    "unknown request": (
        [GOOD[0], line("b", "finish", "running", "finished_pending_store", 2)],
        2, "request 'b': DeclaredLifecycle: unknown request: its first transition starts in 'running'",
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
    # The eager-signal bug, three ways a trace shows it.
    "manager told before the signal": (
        [GOOD[0], GOOD[1], call("manager", "on_request_finished", 2, "a")],
        3, "NoManagerCallAfterSignal: on_request_finished for request 'a' in state 'finished_pending_store'",
    ),
    "signal with chunks never stored": (
        [GOOD[0], GOOD[1],
         line("a", "signal", "finished_pending_store", "signaled", 3, jobs=1, pending_store_chunks=1)],
        3, "SignalAfterFinalStore: signaled with 1 chunk(s) never offered to prepare_store",
    ),
    "signal moved into request_finished": (
        [GOOD[0], call("scheduler", "request_finished", 2, "a"), GOOD[1],
         line("a", "signal", "finished_pending_store", "signaled", 2, jobs=1)],
        4, "SignalAfterFinalStore: signaled inside request_finished()",
    ),
    "manager call after the signal": (
        [*GOOD[:3], call("manager", "on_request_finished", 3, "a"), call("manager", "prepare_store", 4, "a")],
        5, "NoManagerCallAfterSignal: prepare_store() for request 'a' after on_request_finished (line 4)",
    ),
    "second on_request_finished": (
        [*GOOD[:3], call("manager", "on_request_finished", 3, "a"), call("manager", "on_request_finished", 3, "a")],
        5, "SignalExactlyOnce: on_request_finished for request 'a' again (first: line 4)",
    ),
    "load while a store is in flight": (
        [GOOD[0], job(1, "prepare", "new", "prepared", 2), job(2, "prepare", "new", "prepared", 2, kind="load")],
        3, "JobsExclusive: load job 2 of request 'a' while its store job(s) ['1'] are in flight",
    ),
    "cleaned with a job in flight": (
        [GOOD[0], job(100, "prepare", "new", "prepared", 2), GOOD[1], GOOD[2],
         line("a", "clean", "signaled", "cleaned", 4)],
        5, "CleanOnlyWhenDrained: 'clean' while job(s) ['100'] are in flight",
    ),
    "job built after the signal": (
        [*GOOD[:3], job(1, "prepare", "new", "prepared", 3, request_signals=1)],
        4, "'prepare' needs guard 'request_not_signaled' (request_signals == 0) but request_signals = 1",
    ),
    "job reported twice": (
        [GOOD[0], job(1, "prepare", "new", "prepared", 2), job(1, "submit", "prepared", "submitted", 2),
         job(1, "complete", "submitted", "completed", 3), job(1, "fail", "completed", "failed", 4)],
        5, "'fail' after the job reached 'completed' (line 4), a terminal state",
    ),
    "waiting with a job in flight": (
        [GOOD[0], line("a", "reset", "running", "waiting", 2, jobs=1)],
        2, "entered 'waiting' with 1 job(s) in flight",
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
        (json.dumps({"lifecycle": "request", "id": "a", "from": "waiting", "to": "running"}),
         "missing field 'trigger'"),
        (json.dumps({"lifecycle": "request", "id": "a", "trigger": 3, "from": "waiting", "to": "running"}),
         "field 'trigger'"),
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
@pytest.mark.slow
def test_trace_tla_module_checks_with_the_embedded_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sim.ndjson"
    config = EngineConfig(num_gpu_blocks=28, num_cpu_blocks=40, fault_rate=0.15, abort_probability=0.05,
                          reset_probability=0.03, seed=1)
    with TraceWriter.open(path) as writer:
        run_engine(config, writer, users=3, turns=2)
    out = tmp_path / "tla"
    assert main(["trace", "tla", str(path), "--out", str(out), "--check"]) == 0
    assert "TraceRequestJob.tla" in capsys.readouterr().out
    result = check_model(out / "TraceRequestJob.tla")
    lines = len(path.read_text().splitlines())
    assert result.result == "success", result.message
    # One state per line consumed, plus the initial state: the whole trace was explained.
    assert result.distinct_states == lines + 1
    # The same module through the command docs/checkers.md shows.
    assert main(["tla", "check", str(out / "TraceRequestJob.tla"), "--engine", "embedded"]) == 0
    assert "No error has been found" in capsys.readouterr().out
    # One lifecycle alone: a module named after it.
    assert main(["trace", "tla", str(path), "--out", str(out), "--lifecycle", "job", "--check"]) == 0
    assert (out / "TraceJob.tla").exists()


@pytest.mark.parametrize("case", sorted(BAD))
def test_trace_tla_module_rejects_what_the_mirror_rejects(case: str, tmp_path: Path) -> None:
    lines, bad_line, _ = BAD[case]
    numbered = [(number, json.loads(text)) for number, text in enumerate(with_seq(lines), 1)]
    tla_path, _ = write_product_trace_module(numbered, (REQUEST_LIFECYCLE, JOB_LIFECYCLE), tmp_path)
    verdict = check_trace_module(tla_path)
    assert not verdict.ok and verdict.line == bad_line, verdict


def test_trace_tla_module_rejects_a_seq_gap(tmp_path: Path) -> None:
    lines = with_seq(GOOD)
    del lines[1]
    tla_path, _ = write_trace_module([json.loads(text) for text in lines], (REQUEST_LIFECYCLE,), tmp_path)
    result = check_model(tla_path)
    assert result.violated == "InOrder" and result.trace[-1].state["line"] == "2"


def test_trace_tla_rejects_empty_and_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.ndjson"
    empty.write_text("")
    assert main(["trace", "tla", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "empty" in capsys.readouterr().err
    bad = tmp_path / "bad.ndjson"
    bad.write_text("{oops\n")
    assert main(["trace", "tla", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}:1: malformed JSON" in capsys.readouterr().err


# ---------------------------------------------------------------------- bug-zoo mutants in traces
TRACE_VISIBLE = [mutant for mutant in MUTANTS.values() if mutant.trace_visible]


def test_the_headline_bug_is_visible_in_a_trace() -> None:
    assert "eager_finish_signal" in {mutant.name for mutant in TRACE_VISIBLE}


@pytest.mark.slow
@pytest.mark.parametrize("mutant", TRACE_VISIBLE, ids=[mutant.name for mutant in TRACE_VISIBLE])
def test_a_mutant_trace_fails_both_checkers_at_the_same_line(
    mutant: Mutant, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{mutant.name}.ndjson"
    argv = ["simulate", "--mutant", mutant.name, "--backend", "model", "--json", "--trace", str(path)]
    # The run reports what it saw (exit 1), and its trace is complete up to the crash, if any.
    assert main([*argv, *mutant.simulate_options]) == 1
    assert json.loads(capsys.readouterr().out)["violations"] > 0
    result = check_trace_file(path)
    assert result.error is not None, f"{mutant.name}: trace check found nothing"
    assert main(["trace", "check", str(path)]) == 1
    assert capsys.readouterr().out.startswith(f"{path}:{result.error.line}: ")
    assert main(["trace", "tla", str(path), "--out", str(tmp_path / "tla"), "--check"]) == 1
    out = capsys.readouterr().out.splitlines()[-1]
    assert out.startswith(f"{path}:{result.error.line}: TLA+ invariant "), out


@pytest.mark.slow
def test_the_eager_signal_trace_names_the_invariant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mutant = MUTANTS["eager_finish_signal"]
    path = tmp_path / "eager.ndjson"
    main(["simulate", "--mutant", mutant.name, "--backend", "model", "--json", "--trace", str(path),
          *mutant.simulate_options])
    capsys.readouterr()
    result = check_trace_file(path)
    assert result.error is not None and "NoManagerCallAfterSignal: on_request_finished" in result.error.reason
    record = json.loads(path.read_text().splitlines()[result.error.line - 1])
    assert (record["object"], record["call"]) == ("manager", "on_request_finished")
    tla_path, _ = write_product_trace_module(
        list(enumerate((json.loads(text) for text in path.read_text().splitlines()), 1)),
        (REQUEST_LIFECYCLE, JOB_LIFECYCLE), tmp_path / "tla",
    )
    verdict = check_trace_module(tla_path)
    assert (verdict.line, verdict.reason) == (result.error.line, "TLA+ invariant NoManagerCallAfterSignal is violated")
