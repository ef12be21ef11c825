"""The live check's common part, without vLLM: the connector registry, and one run of the checks over
a connector (a stand-in driver in place of the engines). That the common part imports no connector's
folder is a rule of tests/test_layout.py."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from kvoffload_lab.commands.vllm import CONNECTOR_CHOICES
from kvoffload_lab.vllm.common.live import checks
from kvoffload_lab.vllm.common.live.driver import BASELINE, MAX_STEPS
from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.common.live.report import engine_report, format_report
from kvoffload_lab.vllm.common.live.workloads import DOUBLE_RESET, KINDS, LAZY_IDLE, RELOAD, build
from kvoffload_lab.vllm.live.registry import CONNECTORS


def test_the_registry_has_the_cli_names_and_each_connectors_parts(tmp_path: Path) -> None:
    assert set(CONNECTORS) == set(CONNECTOR_CHOICES) - {"kvoffload"}
    offloading, simple = CONNECTORS["offloading"], CONNECTORS["simple"]
    assert (offloading.managers, offloading.kinds, offloading.drain_limit) == (
        ("lru", "arc", "tiering"), (*KINDS, DOUBLE_RESET), MAX_STEPS)
    assert (simple.managers, simple.kinds, simple.drain_limit) == (("eager", "lazy"), (*KINDS, RELOAD, LAZY_IDLE), 300)
    for row in (offloading, simple):
        config = row.transfer_config(row.managers[-1], build("tiny_cpu", 0), tmp_path, "engine-1")
        assert importlib.util.find_spec(config["kv_connector_module_path"]) is not None
        assert config["kv_connector_extra_config"]["live_check_dir"] == str(tmp_path)
        assert config["engine_id"] == "engine-1"
    assert offloading.transfer_config("tiering", build("tiny_cpu", 0), tmp_path, "e")[
        "kv_connector_extra_config"]["secondary_tiers"] == [{"type": "ByteKeepingTier"}]
    with pytest.raises(ValueError, match="unknown manager 'eager'; known: lru, arc, tiering"):
        offloading.transfer_config("eager", build("tiny_cpu", 0), tmp_path, "e")


# ---------------------------------------------------------------------- the checks with a stand-in driver
STAND_IN = """
import json, sys
assert sys.argv[1:3] == ["-m", "kvoffload_lab.vllm.live"], sys.argv
plan = json.loads(open(sys.argv[3]).read())
if plan["mode"] == "mp" and plan["runs"][0]["manager"] == "broken":
    sys.exit(7)
outcomes = [{"workload": r["workload"]["name"], "seed": r["workload"]["seed"], "connector": r["connector"],
             "manager": r["manager"], "mode": plan["mode"], "folder": "", "tokens": {}, "aborted": [],
             "resets": [], "error": None, "seconds": 0.5} for r in plan["runs"]]
open(sys.argv[4], "w").write(json.dumps(outcomes))
"""


def _stand_in(tmp_path: Path) -> str:
    """An interpreter that runs the stand-in in place of ``python -m kvoffload_lab.vllm.live``."""
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "stand_in.py"}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def _connector(calls: dict[str, Any]) -> LiveConnector:
    def judge(outcome: dict[str, Any], baseline: dict[str, Any], workload: Any, tlc_jar: str | None) -> tuple:
        assert (baseline["workload"], baseline["seed"]) == (workload.name, workload.seed)
        return outcome["workload"], outcome["manager"], outcome["mode"], baseline["manager"], baseline["mode"], tlc_jar

    def results(verdicts: list[Any], managers: Any, kinds: dict[str, tuple[str, ...]]) -> list[Any]:
        calls["results"] = (list(verdicts), tuple(managers), kinds)
        return []

    return LiveConnector(name="fake", managers=("m1", "m2"), kinds=("reset", "abort"),
                         transfer_config=lambda *_: {}, drain_limit=1, judge=judge, results=results,
                         summary=lambda verdicts: {"runs": len(verdicts)},
                         report_lines=lambda report: [f"fake: {report['runs']}"])


def test_each_run_is_judged_against_its_baseline_run_in_process_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checks, "build_tiny_model", lambda folder: folder)
    calls: dict[str, Any] = {}
    connector = _connector(calls)
    out = tmp_path / "both"
    _, report = checks.run_engine_checks(connector, ("m2",), (0,), mp_kinds=("reset",), tlc_jar="tlc.jar",
                                         out=out, python=_stand_in(tmp_path))
    inproc = json.loads((out / "plan-inproc.json").read_text())["runs"]
    assert [(r["workload"]["name"], r["connector"], r["manager"]) for r in inproc] == [
        ("reset", "fake", BASELINE), ("abort", "fake", BASELINE), ("reset", "fake", "m2"), ("abort", "fake", "m2")]
    verdicts, managers, kinds = calls["results"]
    assert verdicts == [("reset", "m2", "inproc", BASELINE, "inproc", "tlc.jar"),
                        ("abort", "m2", "inproc", BASELINE, "inproc", "tlc.jar"),
                        ("reset", "m2", "mp", BASELINE, "inproc", "tlc.jar")]
    assert (managers, kinds) == (("m2",), {"inproc": ("reset", "abort"), "mp": ("reset",)})
    assert (list(report["seconds_per_mode"]), report["runs"], report["out"]) == (["inproc", "mp"], 3, str(out))
    assert format_report(report, connector).splitlines()[1:3] == ["fake: 3", report_line(report)]

    only_mp = tmp_path / "mp"
    _, report = checks.run_engine_checks(connector, None, (0, 1), ("mp",), out=only_mp, python=_stand_in(tmp_path))
    assert list(report["seconds_per_mode"]) == ["baseline", "mp"]
    assert {r["manager"] for r in json.loads((only_mp / "plan-inproc.json").read_text())["runs"]} == {BASELINE}
    assert {v[4] for v in calls["results"][0]} == {"inproc"} and len(calls["results"][0]) == 8


def report_line(report: dict[str, Any]) -> str:
    seconds = ", ".join(f"{mode} {s:.0f} s" for mode, s in report["seconds_per_mode"].items())
    return f"  engine time: {seconds}; runs kept in {report['out']}"


def test_a_failing_driver_is_a_runtime_error_and_bad_names_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checks, "build_tiny_model", lambda folder: folder)
    connector = _connector({})
    broken = LiveConnector(**{**connector.__dict__, "managers": ("broken",)})
    with pytest.raises(RuntimeError, match=r"the mp driver exited 7 after 0 of 1 runs"):
        checks.run_engine_checks(broken, None, (0,), ("mp",), ("reset",), out=tmp_path / "a",
                                 python=_stand_in(tmp_path))
    with pytest.raises(ValueError, match="unknown manager 'lru' of the fake connector; known: m1, m2"):
        checks.run_engine_checks(connector, ("lru",), out=tmp_path / "b")
    assert not (tmp_path / "b").exists()
    assert engine_report(connector, [], {"inproc": 1.26}, tmp_path)["seconds_per_mode"] == {"inproc": 1.3}
