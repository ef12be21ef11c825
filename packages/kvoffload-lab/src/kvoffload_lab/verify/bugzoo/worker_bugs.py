"""Worker-side historical bugs: what a lying worker reports instead of the truth.

A worker bug is a function from the worker's true report of a step to the report the scheduler
receives (a ``WorkerReport``); the explorer, the simulator and the hypothesis tests all apply
the same function, so each bug exists once.
"""

from __future__ import annotations

from kvoffload.offload.types import WorkerOutput


def report_failure_as_done(output: WorkerOutput) -> WorkerOutput:
    """Dynamo #15079: every finished transfer is reported as done, the failed ones included.

    Interleaving: a load fails (its GPU blocks hold garbage) but is reported as done; the request
    runs on the garbage KV, and a failed store's key is served to later lookups
    (``DataIntegrity``)."""
    return WorkerOutput(dict.fromkeys(output.completed, True))
