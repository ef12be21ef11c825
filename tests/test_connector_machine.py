"""kvoffload_lab.vllm.common.search: the hypothesis machine the connector folders subclass records the
program it ran, and that program, pasted, reproduces the finding; a pinned seed, not the class's name,
decides the programs (no vLLM needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

from hypothesis.stateful import initialize

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.vllm.common.connector_actions import ABORT, ADD, RESET, STEP
from kvoffload_lab.vllm.common.search import ConnectorMachine, run_machine, search


class AbortBesideHarness:
    """A harness whose check fails when a request is aborted while another one is live."""

    reset_blocked = False

    def __init__(self) -> None:
        self.config = SimpleNamespace(shape=SimpleNamespace(gpu_blocks=10, block_size=4))
        self.live: list[str] = []
        self.findings: list[Violation] = []
        self.resets = 0

    @property
    def failed(self) -> bool:
        return bool(self.findings)

    @property
    def busy(self) -> bool:
        return bool(self.live)

    def live_requests(self) -> list[str]:
        return sorted(self.live)

    def add_request(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        self.live.append(request_id)

    def step(self) -> None:
        self.live = self.live[1:]

    def abort(self, request_id: str) -> None:
        self.live.remove(request_id)
        if self.live:
            self.findings.append(Violation("AbortAlone", f"{request_id} aborted beside {self.live}"))

    def reset_cache(self) -> None:
        self.resets += 1

    def drain(self) -> None:
        self.live = []


class AbortBesideMachine(ConnectorMachine):
    actions = (ADD, STEP, ABORT, RESET)
    extends_output = False

    @initialize()
    def build(self) -> None:
        self.start(AbortBesideHarness(), "AbortBesideHarness()")


def test_a_finding_is_the_shrunk_program_that_reproduces_it() -> None:
    result = run_machine("fake", AbortBesideMachine, examples=200, steps=10)
    assert result.result == "violation" and result.invariant == "AbortAlone", result
    assert result.trace[0] == "harness = AbortBesideHarness()"
    assert [line.partition("(")[0] for line in result.trace[1:]] == [
        "harness.add_request", "harness.add_request", "harness.abort"]
    pasted: dict[str, object] = {"AbortBesideHarness": AbortBesideHarness}
    exec("\n".join(result.trace), pasted)
    harness = pasted["harness"]
    assert isinstance(harness, AbortBesideHarness)
    assert [(v.invariant, v.message) for v in harness.findings] == [(result.invariant, result.error)]


def test_a_rule_runs_only_when_the_folder_lists_its_action() -> None:
    class NoAbortMachine(AbortBesideMachine):
        actions = (ADD, STEP, RESET)

    result = run_machine("fake", NoAbortMachine, examples=30, steps=10)
    assert result.result == "success", result.trace


class QuietMachine(AbortBesideMachine):
    """Adds and steps only (no finding), keeping every program it ran in ``programs``."""

    actions = (ADD, STEP)
    programs: ClassVar[list[list[str]]]

    def teardown(self) -> None:
        super().teardown()
        self.programs.append(self.program)


def _programs(name: str, seed: int) -> list[list[str]]:
    machine = type(name, (QuietMachine,), {"search_seed": seed, "programs": []})
    assert search(machine, examples=10, steps=6) is None
    return machine.programs


def test_a_pinned_seed_decides_the_programs_not_the_class_name() -> None:
    # Without search_seed, hypothesis' derandomized search derives its seed from the class's name.
    assert _programs("SimpleMachine_lazy", 7) == _programs("SimpleMachine_lazy_", 7)
    assert _programs("SimpleMachine_lazy", 7) != _programs("SimpleMachine_lazy", 8)
