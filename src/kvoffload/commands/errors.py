"""The error every command raises for bad input: printed as one line, exit status 2, no traceback.

Its own module, so commands and benchmarks raise it without importing the CLI that dispatches
to them (``kvoffload.cli`` imports every command module while it builds its parser).
"""


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2, no traceback."""
