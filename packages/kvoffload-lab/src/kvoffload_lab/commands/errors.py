"""The error every command raises for bad input: printed as one line, no traceback.

Its own module, so commands and benchmarks raise it without importing the CLI that dispatches
to them (``kvoffload_lab.cli`` imports every command module while it builds its parser).
"""

from tlacheck.result import EXIT_INTERRUPTED

__all__ = ["EXIT_INTERRUPTED", "CommandError"]


class CommandError(Exception):
    """A user-facing error: printed as one line, no traceback; exit status ``status`` (2, or the
    command's documented code, e.g. TLC's 150/151 for a spec/config that does not parse)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status
