"""Embedded, pure-Python explicit-state TLA+ model checker.

Reads the same ``.tla`` and ``.cfg`` files as TLC and reports like TLC (verdicts, counters, exit
codes, shortest error traces, liveness lassos), so ``make tla`` works without Java::

    from kvoffload.statemachine.tlaplus import check_model, TlaError
    result = check_model(Path("tla/KVOffload.tla"))          # KVOffload.cfg beside it

See ``check_model`` for the contract and the package README section of the project for the
supported TLA+ subset; anything outside it fails with a located :class:`TlaError` message
("unsupported construct: ..."), never with a wrong answer.
"""

from __future__ import annotations

from .check import check_model, load_model
from .errors import EvalError, TlaError

__all__ = ["EvalError", "TlaError", "check_model", "load_model"]
