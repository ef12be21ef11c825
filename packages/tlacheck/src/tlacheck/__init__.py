"""TLA+ for kvoffload: a front-end (parser wrapper, module loader, config reader), an embedded
pure-Python explicit-state model checker, and a runner for the real TLC.

Both engines read the same ``.tla``/``.cfg`` files and return a
:class:`kvoffload.statemachine.checkresult.CheckResult` with TLC's verdicts, counters, exit codes
and traces, so ``make tla`` works without Java::

    from kvoffload.tla import check_model, run_tlc, TlaError
    result = check_model(Path("tla/KVOffload.tla"))          # embedded; KVOffload.cfg beside it
    result = run_tlc(Path("tla/KVOffload.tla"))              # TLC, when java and the jar exist

Public API: :func:`check_model` and :func:`load_model` (embedded checker), :class:`TlaError`
(static problem with file/line/column) and :class:`EvalError` (evaluation failure),
:func:`run_tlc`, :func:`tlc_available`, :func:`find_tlc` and :class:`TlcNotFound` (TLC runner).
This package depends on :mod:`kvoffload.statemachine` only, never on the product modules.
Anything outside the supported TLA+ subset fails with a located :class:`TlaError`
("unsupported construct: ..."), never with a wrong answer.
"""

from __future__ import annotations

from .check import check_model, load_model
from .errors import EvalError, TlaError
from .tlc import TlcNotFound, find_tlc, run_tlc, tlc_available

__all__ = [
    "EvalError",
    "TlaError",
    "TlcNotFound",
    "check_model",
    "find_tlc",
    "load_model",
    "run_tlc",
    "tlc_available",
]
