"""Bad input to simulate, replay, explore and trace check: one line naming it, a documented exit
status, no traceback and no output file; Ctrl-C stops simulate and explore with exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from kvoffload_lab.cli import main

HUGE = "1000000000000"


def _fails(args: list[str], message: str, capsys: pytest.CaptureFixture[str], status: int = 2) -> None:
    assert main(args) == status
    captured = capsys.readouterr()
    stream = captured.err if status == 2 else captured.out
    assert message in stream, stream
    assert len(stream.strip().splitlines()) == 1, stream


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-steps", "5"], "did not finish within --max-steps 5: 5 steps, 0 finished"),
        (["--users", "1", "--turns", "1", "--delay", "1000000", "--max-steps", "300"],
         "did not finish within --max-steps 300"),
        (["--gpu-blocks", HUGE], f"--gpu-blocks {HUGE} x --cpu-blocks 512 x --block-size 16 (model backend) needs"),
        (["--cpu-blocks", HUGE], f"--gpu-blocks 96 x --cpu-blocks {HUGE} x --block-size 16 (model backend) needs"),
        (["--block-size", "100000000", "--backend", "torch"],
         "--gpu-blocks 96 x --cpu-blocks 512 x --block-size 100000000 (torch backend) needs about"),
        (["--gpu-blocks", "2"], "the run finished no request (0 aborted, 24 conversation(s) truncated"),
        (["--device", "cuda"], "--device cuda moves real tensors: it needs --backend torch, not model"),
    ],
)
def test_simulate_refuses(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["simulate", "--backend", "model", *args], f"kvoffload simulate: error: {message}", capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer of a machine without CUDA")
def test_simulate_on_cuda_without_cuda_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    message = f"--device cuda, but torch {torch.__version__} sees no CUDA device"
    _fails(["simulate", "--device", "cuda"], f"kvoffload simulate: error: {message}", capsys)


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        ("missing-dir/t.ndjson", "missing-dir/t.ndjson: directory"),
        (".", "--trace .: is a directory; name a file"),
        ("/proc/t.ndjson", "--trace /proc/t.ndjson: not writable"),
    ],
)
def test_simulate_checks_the_trace_path_first(
    trace: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _fails(["simulate", "--backend", "model", "--trace", trace], message, capsys)
    assert list(tmp_path.iterdir()) == []


def test_simulate_leaves_no_partial_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.ndjson"
    _fails(["simulate", "--backend", "model", "--max-steps", "60", "--trace", str(trace)], "--max-steps 60", capsys)
    assert not trace.exists()


def test_simulate_reports_truncated_conversations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--backend", "model", "--users", "4", "--turns", "6", "--gpu-blocks", "12", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["truncated_conversations"] > 0 and result["finished"] > 0


@pytest.fixture
def mooncake(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [{"timestamp": i, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2 + i % 2]} for i in range(6)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-blocks", HUGE], f"--gpu-blocks {HUGE} + --cpu-blocks 4000 needs about"),
        (["--cpu-blocks", HUGE], f"--gpu-blocks 1000 + --cpu-blocks {HUGE} needs about"),
        (["--sweep", "--cpu-sizes", f"4,{HUGE}"], f"--gpu-blocks 1000 + --cpu-blocks {HUGE} needs about"),
        (["--sweep", "--plot", "/proc/x/sweep.png"], "--plot /proc/x/sweep.png: cannot create directories in '/proc'"),
        (["--sweep", "--plot", "sweep.gif"], "--plot sweep.gif: extension '.gif'; use one of .png, .pdf, .svg"),
        (["--sweep", "--plot", "sweep"], "--plot sweep: no extension; use one of .png, .pdf, .svg"),
        (["--sweep", "--plot", "."], "--plot .: is a directory; name a file"),
        (["--plot", "sweep.png"], "--plot needs --sweep"),
    ],
)
def test_replay_refuses_before_running(
    args: list[str], message: str, mooncake: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(mooncake.parent)
    _fails(["replay", str(mooncake), *args], f"kvoffload replay: error: {message}", capsys)
    assert [p.name for p in mooncake.parent.iterdir()] == ["trace.jsonl"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "bogus"], "--policy 'bogus' is unknown; known: arc,"),
        (["--max-resets", "-1"], "--max-resets must be >= 0, got -1"),
        (["--max-preemptions", "-3"], "--max-preemptions must be >= 0, got -3"),
    ],
)
def test_explore_refuses(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["explore", *args], f"kvoffload explore: error: {message}", capsys)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A complete trace of a small simulation."""
    path = tmp_path_factory.mktemp("trace") / "run.ndjson"
    assert main(["simulate", "--backend", "model", "--users", "2", "--turns", "1", "--json", "--trace", str(path)]) == 0
    return path.read_text().splitlines()


def _write(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "t.ndjson"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _edit_first(lines: list[str], **fields: object) -> list[str]:
    return [json.dumps({**json.loads(lines[0]), **fields}), *lines[1:]]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"load_job": {"a": 1}}, ":1: field 'load_job' must be a non-negative integer, got {'a': 1}"),
        ({"signals": -1}, ":1: field 'signals' must be a non-negative integer, got -1"),
        ({"jobs_in_flight": -2}, ":1: field 'jobs_in_flight' must be a non-negative integer, got -2"),
        ({"store_jobs": [-4]}, ":1: field 'store_jobs' must be a list of non-negative integers, got [-4]"),
        ({"step": "7"}, ":1: field 'step' must be a non-negative integer, got '7'"),
    ],
)
def test_trace_check_reports_malformed_fields_as_malformed_input(
    fields: dict[str, object], message: str, recorded: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails(["trace", "check", _write(tmp_path, _edit_first(recorded, **fields))], message, capsys)


def test_trace_check_refuses_an_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [])
    _fails(["trace", "check", path], f"kvoffload trace: error: {path}: the trace is empty", capsys)


def test_trace_check_fails_a_trace_whose_clean_lines_were_deleted(
    recorded: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = [json.loads(line) for line in recorded if json.loads(line).get("trigger") != "clean"]
    lines = [json.dumps({**record, "seq": seq}) for seq, record in enumerate(kept, 1)]
    path = _write(tmp_path, lines)
    _fails(["trace", "check", path], "2 request(s) not cleaned at the end of the trace (req-0, req-1)", capsys, 1)
    assert main(["trace", "check", "--partial", path]) == 0
    assert main(["trace", "check", _write(tmp_path, recorded)]) == 0


def _sigint_as_in_a_terminal() -> None:
    # A test run started in the background (`make test &`, CI runners) inherits SIGINT ignored, and
    # Python then never raises KeyboardInterrupt: give the command the disposition a user's has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cpu_seconds(pid: int) -> float:
    """The CPU time a process and its running children (the explorer's workers) have used: utime +
    stime of /proc/PID/stat."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended while we looked
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _interrupt(
    args: list[str], ready: Callable[[subprocess.Popen[str]], bool], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "kvoffload_lab.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path, preexec_fn=_sigint_as_in_a_terminal,
    )
    deadline = time.monotonic() + 60
    while not ready(process) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()  # never leave a command running after a failed check
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def test_ctrl_c_stops_simulate_with_partial_figures(tmp_path: Path) -> None:
    trace = tmp_path / "t.ndjson"
    args = ["simulate", "--backend", "model", "--users", "400", "--turns", "50", "--trace", str(trace)]
    done = _interrupt(args, lambda process: trace.exists() and trace.stat().st_size > 0, tmp_path)
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("kvoffload simulate: interrupted at step "), done.stderr
    assert " finished, " in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not trace.exists(), "no partial trace is left behind"


def test_ctrl_c_stops_explore_with_partial_figures(tmp_path: Path) -> None:
    # Interrupted once it has worked a while: by its CPU seconds, not the wall clock, which on a loaded
    # machine can run out while the command is still importing.
    args = ["explore", "--requests", "3", "--chunks", "3"]
    done = _interrupt(args, lambda process: _cpu_seconds(process.pid) > 5, tmp_path)
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("kvoffload explore: interrupted after "), done.stderr
    assert " states, " in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []
