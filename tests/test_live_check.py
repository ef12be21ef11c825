"""The live check's judging, without vLLM: the engine-model rules, the workloads, a run's verdict
from its files, and what ``make check-vllm-live`` asserts per release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from check_vllm_live_release import check as check_release
from kvoffload_lab.vllm.common.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, FindingLog, TraceLog, write_drain
from kvoffload_lab.vllm.common.live.workloads import DOUBLE_RESET, KINDS, Workload, build
from kvoffload_lab.vllm.offloading.live.conformance import check_conformance
from kvoffload_lab.vllm.offloading.live.judge import judge

DATA = Path(__file__).parent / "data" / "live"


def _s(call: str, request: str | None = None, **fields: Any) -> dict[str, Any]:
    line: dict[str, Any] = {"object": "scheduler", "call": call, "step": 0, "seq": 0, **fields}
    if request is not None:
        line["id"] = request
    return line


def _m(call: str, request: str, keys: int = 0) -> dict[str, Any]:
    return {"object": "manager", "call": call, "id": request, "keys": [f"k{i}" for i in range(keys)]}


def _admit(request: str, local: int = 0) -> list[dict[str, Any]]:
    return [_s("on_new_request", request), _s("get_num_new_matched_tokens", request, local_tokens=local),
            _m("lookup", request, 1), _s("update_state_after_alloc", request, external_tokens=0)]


def _step(scheduled: list[str], finished: list[str] = (), preempted: list[str] = ()) -> list[dict[str, Any]]:
    return [_s("build_connector_meta", scheduled=scheduled, finished=list(finished), preempted=list(preempted)),
            _s("update_connector_output")]


def test_a_trace_the_model_can_produce_has_no_gap_and_counts_what_it_reached() -> None:
    lines = [*_admit("a"), *_step(["a"]), _m("prepare_store", "a", 2),
             _s("request_finished", "a", status="FINISHED_LENGTH_CAPPED"), *_step([], ["a"]),
             _s("reset_cache"), *_admit("b", local=32), *_step(["b"])]
    result = check_conformance(lines)
    assert result.gaps == []
    assert result.reached["finish_store_in_flight"] == 1
    assert result.reached["reset_store_in_flight"] == 1
    assert result.reached["gpu_prefix_hit"] == 1


def test_what_the_model_learned_from_live_traces_is_no_gap() -> None:
    """vLLM 0.32.0 re-allocates a request after its load without a lookup, drops an empty step's
    empty worker output and resets the connector while requests run; the model does all three."""
    lines = [*_admit("a"), _s("build_connector_meta", scheduled=[], finished=[], preempted=[]),
             _m("complete_load", "a", 1), _s("update_state_after_alloc", "a", external_tokens=0),
             *_step(["a"]), _s("reset_cache"), *_step(["a"]),
             _s("build_connector_meta", scheduled=[], finished=[], preempted=[]),
             _s("update_connector_output", reported=0)]
    result = check_conformance(lines)
    assert result.gaps == []
    assert (result.reached["empty_step_unreported"], result.reached["realloc_after_load"],
            result.reached["reset_while_running"], result.reached["empty_step_reported"]) == (1, 1, 1, 1)


@pytest.mark.parametrize(("rule", "lines"), [
    ("M1", [_s("get_num_new_matched_tokens", "a", local_tokens=0)]),
    ("M2", [_s("on_new_request", "a"), _s("update_state_after_alloc", "a", external_tokens=0)]),
    ("M3", [*_admit("a"), *_step(["a"]), _s("request_finished", "a", status="FINISHED_ABORTED"), *_step([])]),
    ("M4", [*_admit("a"), _s("build_connector_meta", scheduled=["a"], finished=[], preempted=[]), *_step(["a"])]),
    ("M4", [_s("build_connector_meta", scheduled=[], finished=[], preempted=[]),
            _s("update_connector_output", reported=0), _s("update_connector_output", reported=0)]),
    ("M5", [_s("on_new_request", "a"), *_step(["a"])]),
    ("M6", [*_admit("a"), *_step([], preempted=["a"])]),
    ("M7", [*_admit("a"), _s("build_connector_meta", scheduled=["a"], finished=[], preempted=[]),
            _s("reset_cache")]),
    ("M8", [_s("reset_cache"), _s("reset_cache")]),
])
def test_each_rule_of_the_model_is_checked(rule: str, lines: list[dict[str, Any]]) -> None:
    assert [gap.rule for gap in check_conformance(lines).gaps] == [rule]


def test_workloads_are_seeded_and_survive_json() -> None:
    for kind in (*KINDS, DOUBLE_RESET):
        workload = build(kind, 3)
        assert workload == build(kind, 3)
        assert Workload.from_json(json.loads(json.dumps(workload.to_json()))) == workload
    assert build("multi_turn", 3) != build("multi_turn", 4)
    with pytest.raises(ValueError, match="unknown workload kind 'fifo'"):
        build("fifo", 0)


def _run_folder(tmp_path: Path, findings: list[tuple[str, str]], drained: int | None = 2,
                leaks: tuple[str, ...] = ()) -> Path:
    """A run's files: a two-line trace, ``findings``, and a drain report at line ``drained``."""
    tmp_path.mkdir(parents=True)
    trace = TraceLog(tmp_path / TRACE_FILE)
    trace.call(0, "scheduler", "on_new_request", "r0-0123abcd")
    trace.call(0, "manager", "on_new_request", "r0-0123abcd")
    trace.close()
    log = FindingLog(tmp_path / FINDINGS_FILE)
    for invariant, message in findings:
        log.add(invariant, message)
    if drained is not None:
        write_drain(tmp_path / DRAIN_FILE, drained, 3, "idle", [{"invariant": "NoLeak", "message": m} for m in leaks])
    return tmp_path


def _outcome(folder: Path, tokens: dict[str, list[int]], **extra: Any) -> dict[str, Any]:
    return {"folder": str(folder), "manager": "lru", "mode": "inproc", "tokens": tokens, "aborted": [],
            "resets": [], "error": None, "seconds": 1.0, **extra}


def test_a_run_is_judged_by_its_findings_tokens_and_drain(tmp_path: Path) -> None:
    workload = build("final_store", 0)
    baseline = {"tokens": {"r0": [1, 2, 3]}}
    clean = judge(_outcome(_run_folder(tmp_path / "a", []), {"r0": [1, 2, 3]}), baseline, workload, None)
    assert clean.invariant is None and clean.traces == ["mirror: ok", "embedded: ok"]
    wrong = judge(_outcome(_run_folder(tmp_path / "b", []), {"r0": [1, 9, 3]}), baseline, workload, None)
    assert wrong.invariant == "SameTokens" and "token 1: 9 with offloading, 2 without" in wrong.error
    aborted = _outcome(_run_folder(tmp_path / "c", []), {"r0": [1, 2]}, aborted=["r0"])
    assert judge(aborted, baseline, workload, None).invariant is None
    found = [("NoManagerCallAfterSignal", "step 3: manager.prepare_store for request 'r0-0123abcd' after ...")]
    broken = judge(_outcome(_run_folder(tmp_path / "d", found), {"r0": [1, 2, 3]}), baseline, workload, None)
    assert broken.invariant == "NoManagerCallAfterSignal"
    assert any("r0-0123abcd" in line for line in broken.trace)
    never_idle = _outcome(_run_folder(tmp_path / "e", [], drained=None), {"r0": [1, 2, 3]})
    assert "(never)" in judge(never_idle, baseline, workload, None).error
    busy_at_end = judge(_outcome(_run_folder(tmp_path / "g", [], drained=1), {"r0": [1, 2, 3]}), baseline,
                        workload, None)
    assert busy_at_end.invariant == "NoLeak" and "last at trace line 1 of 2" in busy_at_end.error
    leaked = judge(_outcome(_run_folder(tmp_path / "h", [], leaks=("connector still has job 4",)), {"r0": [1, 2, 3]}),
                   baseline, workload, None)
    assert (leaked.invariant, leaked.error) == ("NoLeak", "connector still has job 4")
    died = _outcome(_run_folder(tmp_path / "f", [], drained=None), {}, error="EngineDeadError: gone")
    assert judge(died, baseline, workload, None).invariant == "Crash"


def _result(manager: str, checker: str, invariant: str | None = None, error: str = "",
            traces: tuple[str, ...] = ("mirror: ok", "embedded: ok", "tlc: ok")) -> dict[str, Any]:
    run = {"manager": manager, "mode": "inproc", "workload": "final_store", "seed": 0, "invariant": invariant,
           "error": error, "traces": list(traces)}
    return {"manager": manager, "checker": checker, "result": "violation" if invariant else "success",
            "invariant": invariant, "error": error, "seconds": 1.0, "details": {"runs": [run]}}


def _clean_0_32(**override: dict[str, Any]) -> dict[str, Any]:
    results = []
    for manager in ("lru", "arc", "tiering"):
        for checker in ("engine", "engine-mp"):
            results.append(override.get(f"{manager} {checker}") or _result(manager, checker))
        for checker in ("double-reset", "double-reset-mp"):
            results.append(_result(manager, checker, "Crash", "AssertionError:  at vllm/.../scheduler.py:2064"))
    return {"results": results}


def test_the_release_assertions_accept_0_32_clean_and_name_every_mismatch() -> None:
    assert check_release("0.32.0", _clean_0_32()) == []
    caught = _clean_0_32(**{"arc engine": _result("arc", "engine", "NoLeak", "connector still has job 3")})
    assert [p for p in check_release("0.32.0", caught) if "('arc', 'engine')" in p]
    rejected = _clean_0_32(**{"lru engine-mp": _result("lru", "engine-mp", traces=(
        "mirror: ok", "embedded: line 9: TLA+ invariant X is violated", "tlc: ok"))})
    assert any("trace rejected: embedded: line 9" in p for p in check_release("0.32.0", rejected))
    quiet_mp = _clean_0_32()
    for result in quiet_mp["results"]:
        if result["checker"] == "double-reset-mp":
            result.update(_result(result["manager"], "double-reset-mp"))
    assert check_release("0.32.0", quiet_mp) == ["vLLM 0.32.0: no multiprocess run showed the double reset"]


def test_the_release_assertions_want_0_26_caught_with_its_traces_rejected() -> None:
    report = _clean_0_32()
    assert len(check_release("0.26.0", report)) == 6  # LRU, ARC, tiering x two modes, all passed
    bad = "mirror: line 110: NoManagerCallAfterSignal"
    for result in report["results"]:
        if result["checker"] in ("engine", "engine-mp"):
            caught = ("Crash", "KeyError: 'r1' at vllm/v1/kv_offload/tiering/manager.py:542") if (
                result["manager"] == "tiering") else ("NoManagerCallAfterSignal", "manager.prepare_store for ...")
            result.update(_result(result["manager"], result["checker"], *caught,
                                  traces=(bad, bad.replace("mirror", "embedded"), bad.replace("mirror", "tlc"))))
    assert check_release("0.26.0", report) == []
    report["results"][0]["details"]["runs"][0]["traces"][2] = "tlc: ok"
    assert any("not rejected for the call after the signal: tlc: ok" in p for p in check_release("0.26.0", report))


@pytest.mark.parametrize("path", sorted(DATA.glob("*.ndjson")), ids=lambda p: p.stem)
def test_live_traces_that_exposed_model_gaps_now_conform(path: Path) -> None:
    """Traces of vLLM 0.32.0 engines that the engine model could not produce until it learned what
    they show (docs/vllm-live-check.md); the file name lists the rules they broke then."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    result = check_conformance(lines)
    assert result.gaps == []
    learned = {"M2": "realloc_after_load", "M4": "empty_step_unreported", "M7": "reset_while_running"}
    for rule in path.stem.split("-", 1)[0].split("+"):
        assert result.reached[learned[rule]] > 0, rule


@pytest.mark.parametrize(("argv", "named"), [
    (["--mode", "fast"], "--mode 'fast'"),
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--checker", "live"], "--checker 'live'"),
])
def test_bad_engine_options_are_one_line_and_exit_2(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvoffload_lab.cli import main

    assert main(["vllm", "check", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0]


def test_the_report_groups_gaps_by_rule_and_lists_what_no_run_reached(tmp_path: Path) -> None:
    from kvoffload_lab.vllm.common.live.report import engine_report, format_report
    from kvoffload_lab.vllm.offloading.live.judge import OFFLOADING, RunVerdict

    verdicts = [
        RunVerdict("double_reset", 0, manager, "inproc", explained=[f"M8 (...) broken at line {line}: ... (explained)"],
                   reached={"preempt": 2})
        for manager, line in (("lru", 13), ("arc", 15))
    ]
    report = engine_report(OFFLOADING, verdicts, {"inproc": 12.0}, tmp_path)
    assert report["model_gaps"] == []
    first = verdicts[0].explained[0]
    assert report["explained_gaps"] == [f"2 x in 2 run(s), first in double_reset-0 lru inproc (): {first}"]
    assert report["coverage"]["preempt"] == 4 and "preempt" not in " ".join(report["not_reached"])
    text = format_report(report, OFFLOADING)
    assert "0 unexplained model gap(s)" in text and "1 explained gap(s):" in text and "inproc 12 s" in text
