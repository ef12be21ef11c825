"""The calls a checker makes on a connector's harness, shared by every folder that checks a vLLM
connector (check/, simple/, own/).

A folder's ``actions.py`` lists the actions its connector takes. Its hypothesis machine
(:mod:`~kvoffload_lab.vllm.common.search`), its explorer (:mod:`~kvoffload_lab.vllm.common.action_explore`)
and its simulated run make only those calls, each through :meth:`Action.apply`, and print each as
:meth:`Action.describe` writes it: a line that runs as it reads against the folder's harness, so
that a step list is a program to paste.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kvoffload.lifecycles.invariants import Violation


class ConnectorHarness(Protocol):
    """What every folder's harness offers its checkers, besides the actions themselves."""

    findings: list[Violation]

    @property
    def failed(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    @property
    def reset_blocked(self) -> bool: ...

    def live_requests(self) -> list[str]: ...

    def drain(self) -> None: ...


@dataclass(frozen=True)
class Action:
    """One call on a harness: its method ``name``, with keyword arguments."""

    name: str

    def apply(self, harness: Any, args: Mapping[str, Any]) -> None:
        getattr(harness, self.name)(**args)

    def describe(self, args: Mapping[str, Any]) -> str:
        return f"harness.{self.name}({', '.join(f'{key}={value!r}' for key, value in args.items())})"


ADD = Action("add_request")
STEP = Action("step")
ABORT = Action("abort")
RESET = Action("reset_cache")
FAIL_TRANSFER = Action("fail_next_transfer")
DRAIN = Action("drain")


def step_while_busy(harness: ConnectorHarness, limit: int) -> None:
    """Step as vLLM's engine does while it has work, at most ``limit`` times; a finding stops it."""
    for _ in range(limit):
        if harness.failed or not harness.busy:
            return
        STEP.apply(harness, {})
