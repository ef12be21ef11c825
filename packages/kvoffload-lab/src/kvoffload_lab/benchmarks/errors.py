"""The error a benchmark raises for bad input: ``kvoffload bench`` prints it as one line, exit 2.

The benchmarks' own type, so that they do not import the commands that run them.
"""


class BenchmarkError(Exception):
    """Bad benchmark input (a flag and its value); the message is the whole line the user sees."""
