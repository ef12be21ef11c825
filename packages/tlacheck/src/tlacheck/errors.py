"""Errors raised by the embedded TLA+ checker."""

from __future__ import annotations

from typing import NoReturn


class TlaError(Exception):
    """A parse error, an unsupported construct or a configuration error.

    ``file``, ``line`` and ``column`` (1-based) locate the offending text when known; the message
    always names the construct and ``file:line:col`` so it can be acted on without a debugger.
    """

    def __init__(
        self,
        message: str,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        *,
        kind: str = "error",
    ) -> None:
        self.file = file
        self.line = line
        self.column = column
        # "parse", "config", "unsupported", "semantic" or "error": selects TLC's exit code.
        self.kind = kind
        where = ""
        if file is not None:
            where = f"{file}:{line if line is not None else 0}:{column if column is not None else 0}: "
        super().__init__(f"{where}{message}")
        self.bare_message = message


class EvalError(Exception):
    """A run-time evaluation error (TLC's "spec eval" failures: bad application, CHOOSE with no
    witness, a non-enumerable set, ...). Carries a location string once known."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
        self.bare_message = message

    def locate(self, where: str) -> None:
        """Attach ``where`` unless an inner, more precise location is already attached."""
        if self.where is None:
            self.where = where
            self.args = (f"{where}: {self.bare_message}",)


def raise_located(exc: Exception, where: str) -> NoReturn:
    """Raise ``exc`` again located at ``where``: an :class:`EvalError` keeps any inner location;
    a ``TypeError``/``ValueError`` from a Python operation on TLA+ values becomes one."""
    if isinstance(exc, EvalError):
        exc.locate(where)
        raise exc
    raise EvalError(str(exc), where) from exc


class AssertionFailed(EvalError):
    """TLC!Assert failed."""
