"""The hypothesis machine every connector folder subclasses, and the search that runs it.

:class:`ConnectorMachine`'s rules are the actions of :mod:`.connector_actions`: add a request (a
fresh prompt, or an extension of the last request, so that prefixes are shared), step the engine, abort
a live request, reset the cache with the connector, and make the next transfer fail. A rule runs
only when the folder's ``actions`` list it. After every rule every check of the harness must hold;
at the end the engine drains. A folder configures the machine by subclassing: its own
``@initialize`` ``build`` (the harness, whose shape hypothesis draws) and the strategies of the
rules' arguments. The machine records the program it ran, as
:meth:`~.connector_actions.Action.describe` writes each call, and a :class:`Finding` carries it:
hypothesis shrinks a failing program, and the step list is the shrunk run's own record.
:class:`~kvoffload_lab.vllm.common.findings.UnsupportedVllmApi` (kvoffload's harness failing, not vLLM)
is no finding: it leaves the search as raised.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.vllm.common.connector_actions import ABORT, ADD, DRAIN, FAIL_TRANSFER, RESET, STEP, Action
from kvoffload_lab.vllm.common.findings import CheckerVerdict

LOSS_PASS = "losses"


class Finding(AssertionError):
    """A check of the harness failed; ``program`` is the run that led to it."""

    def __init__(self, message: str, program: list[str]) -> None:
        super().__init__(message)
        self.program = program


def _option(name: str) -> st.SearchStrategy[Any]:
    """The strategy a subclass names in its class attribute ``name``."""
    return st.runner().flatmap(lambda machine: getattr(machine, name))


def _takes(action: Action) -> Any:
    return lambda self: self.harness is not None and action in self.actions


class ConnectorMachine(RuleBasedStateMachine):
    """Random programs of a folder's actions against its harness (see the module docstring)."""

    actions: ClassVar[tuple[Action, ...]] = ()
    tokens: ClassVar[st.SearchStrategy[list[int]]] = st.lists(st.integers(1, 3), min_size=3, max_size=10)
    max_tokens: ClassVar[st.SearchStrategy[int]] = st.integers(1, 5)
    abort_options: ClassVar[st.SearchStrategy[dict[str, Any]]] = st.just({})
    reset_options: ClassVar[st.SearchStrategy[dict[str, Any]]] = st.just({})
    request_prefix: ClassVar[str] = "r"
    # Whether an extending request continues the last request's tokens, its output included (a
    # harness whose ``requests`` keep vLLM's requests), or the last prompt.
    extends_output: ClassVar[bool] = True
    # The second pass of a connector that loses blocks: only a lost block (``harness.losses``,
    # reported as ``loss_invariant``) fails it.
    losses: ClassVar[bool] = False
    loss_invariant: ClassVar[str] = ""
    # The search's seed. None derives it from the class's name (hypothesis' derandomized search); a
    # folder whose findings a test pins sets it, so that they do not hang on what a class is called.
    search_seed: ClassVar[int | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.harness: Any = None
        self.program: list[str] = []
        self.prompts: list[list[int]] = []

    def start(self, harness: Any, built: str) -> None:
        """Called by a subclass's ``build``: the harness, and the line that builds it."""
        self.harness = harness
        self.program = [f"harness = {built}"]

    def apply(self, action: Action, **args: Any) -> None:
        self.program.append(action.describe(args))
        action.apply(self.harness, args)

    def earlier_prompt(self) -> list[int] | None:
        """What an extending request continues (see ``extends_output``); None before the first."""
        if not self.extends_output:
            return self.prompts[-1] if self.prompts else None
        earlier = list(self.harness.requests.values())
        return list(earlier[-1].request.all_token_ids) if earlier else None

    def close(self) -> None:
        """Release what the harness holds once the run is over (nothing, unless a subclass says)."""

    def finding(self, violation: Violation, suffix: str = "") -> Finding:
        return Finding(f"{violation.invariant}: {violation.message}{suffix}", list(self.program))

    @precondition(_takes(ADD))
    @rule(tokens=_option("tokens"), extend=st.booleans(), max_tokens=_option("max_tokens"))
    def add_request(self, tokens: list[int], extend: bool, max_tokens: int) -> None:
        earlier = self.earlier_prompt()
        prompt = earlier + tokens if extend and earlier else tokens
        # The whole conversation must fit the GPU cache, or vLLM refuses the request.
        shape = self.harness.config.shape
        if len(prompt) + max_tokens > (shape.gpu_blocks - 1) * shape.block_size:
            prompt = tokens
        self.apply(ADD, request_id=f"{self.request_prefix}{len(self.prompts)}", prompt=prompt, max_tokens=max_tokens)
        self.prompts.append(prompt)

    @precondition(_takes(STEP))
    @rule()
    def step(self) -> None:
        self.apply(STEP)

    @precondition(lambda self: _takes(ABORT)(self) and bool(self.harness.live_requests()))
    @rule(data=st.data(), options=_option("abort_options"))
    def abort(self, data: Any, options: dict[str, Any]) -> None:
        self.apply(ABORT, request_id=data.draw(st.sampled_from(self.harness.live_requests())), **options)

    @precondition(lambda self: _takes(RESET)(self) and not self.harness.reset_blocked)
    @rule(options=_option("reset_options"))
    def reset_cache(self, options: dict[str, Any]) -> None:
        self.apply(RESET, **options)

    @precondition(_takes(FAIL_TRANSFER))
    @rule()
    def fail_next_transfer(self) -> None:
        self.apply(FAIL_TRANSFER)

    @invariant()
    def checks_hold(self) -> None:
        if self.harness is not None and self.harness.findings and not self.losses:
            raise self.finding(self.harness.findings[0])

    def teardown(self) -> None:
        # Hypothesis runs teardown after a failing rule too: a finding made before was raised already,
        # and kvoffload's harness failing (UnsupportedVllmApi) leaves nothing to drain.
        harness = self.harness
        if harness is None:
            return
        found_before = harness.failed
        try:
            if not found_before:
                self.apply(DRAIN)
        finally:
            self.close()
        if self.losses and harness.losses:
            raise Finding(f"{self.loss_invariant}: {harness.losses[0]} (after the drain)", list(self.program))
        if harness.findings and not found_before and not self.losses:
            raise self.finding(harness.findings[0], " (after the drain)")


def search(machine: type[ConnectorMachine], examples: int, steps: int) -> Finding | None:
    """Run ``machine`` (derandomized, or from its ``search_seed``; no database): the first
    :class:`Finding` it raises, from hypothesis' shrunk program, or None when every example passed."""
    if machine.search_seed is not None:
        machine = seed(machine.search_seed)(machine)
    budget = settings(max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck), print_blob=False,
                      report_multiple_bugs=False)
    try:
        # Hypothesis' own print of the program is not wanted: the Finding carries the machine's.
        with with_reporter(lambda text: None):
            run_state_machine_as_test(machine, settings=budget)
    except Finding as finding:
        return finding
    return None


def run_machine(name: str, machine: type[ConnectorMachine], examples: int, steps: int,
                passes: tuple[str, ...] = ("safety",)) -> CheckerVerdict:
    """Search with ``machine``; with the :data:`LOSS_PASS` in ``passes``, search again for a lost
    block alone, so that a loss never hides a safety violation. Each finding is reported with its
    program (a loss beside a violation in ``details["loss"]``)."""
    started = time.perf_counter()
    result = CheckerVerdict(name, "hypothesis", details={"examples": examples, "steps_per_example": steps})
    for kind in passes:
        losses = kind == LOSS_PASS
        found = search(type(machine.__name__, (machine,), {"losses": losses}), examples, steps)
        if found is None:
            continue
        invariant_name, _, message = str(found).partition(": ")
        if result.result == "success":
            result.result = "loss" if losses else "violation"
            result.invariant, result.error, result.trace = invariant_name, message, found.program
        else:
            result.details["loss"] = {"invariant": invariant_name, "error": message, "trace": found.program}
    result.seconds = time.perf_counter() - started
    return result
