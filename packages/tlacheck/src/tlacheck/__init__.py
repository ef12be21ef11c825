"""tlacheck, TLA+ model checking in Python: a front-end (parser wrapper, module loader, config reader), an embedded
pure-Python explicit-state model checker, and a runner for the real TLC.

Both engines read the same ``.tla``/``.cfg`` files and return a
:class:`tlacheck.result.CheckResult` with TLC's verdicts, counters, exit codes
and traces, so a spec is checked without Java::

    from tlacheck import check_model, run_tlc, TlaError
    result = check_model(Path("Spec.tla"))          # embedded; Spec.cfg beside it
    result = run_tlc(Path("Spec.tla"))              # TLC, when java and the jar exist

Public API: :func:`check_model` and :func:`load_model` (embedded checker), :class:`TlaError`
(static problem with file/line/column) and :class:`EvalError` (evaluation failure),
:func:`run_tlc`, :func:`tlc_available`, :func:`find_tlc` and :class:`TlcNotFound` (TLC runner).
It depends on the ``tla`` parser only; the command line is :mod:`tlacheck.cli` (``tlacheck``).
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
