"""Watching a running check: TLC-style progress lines, the memory limit, and Ctrl-C.

The checker calls :meth:`Monitor.tick` every few hundred expanded states. A tick prints a progress
line (states generated, distinct states, queue, rate, memory) to the stream every ``interval``
seconds, whether or not it is a terminal, and raises :class:`Halt` when the process's memory
passed ``max_memory_mb`` or when :meth:`Monitor.interrupt` was called (Ctrl-C in the CLI).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from typing import TextIO

from tlacheck.result import EXIT_ERROR_STATESPACE_TOO_LARGE, EXIT_INTERRUPTED


def _default_max_memory_mb() -> int:
    """Half the machine's memory, at most 8 GiB: a check stops with a clear message well before
    the machine runs out (the CLI's --max-memory changes it)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return 4096
    return int(min(8192, total // 2))


DEFAULT_MAX_MEMORY_MB = _default_max_memory_mb()


class Halt(Exception):
    """The check was stopped from outside the model: memory limit or interrupt."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def memory_mb() -> float:
    """Peak resident memory of this process, in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class Monitor:
    """Progress reporting and stop conditions for one check (see the module docstring)."""

    def __init__(
        self, stream: TextIO | None = None, max_memory_mb: float | None = DEFAULT_MAX_MEMORY_MB,
        interval: float = 10.0,
    ) -> None:
        self.stream = stream
        self.max_memory_mb = max_memory_mb
        self.interval = interval
        self.started = time.monotonic()
        self.last = self.started
        self.last_generated = 0
        self.interrupted = threading.Event()

    def say(self, line: str) -> None:
        if self.stream is not None:
            print(line, file=self.stream, flush=True)

    def header(self, spec: str, config: str) -> None:
        """TLC's opening lines, so that a long run shows at once what it is doing."""
        self.say(f"Embedded TLA+ checker (TLC semantics): checking {spec} with {config}")
        self.say("Running breadth-first search Model-Checking with 1 process.")
        self.say("Computing initial states...")

    def interrupt(self) -> None:
        """Ask the check to stop at its next tick (thread-safe)."""
        self.interrupted.set()

    def tick(self, generated: int, distinct: int, queue: int, depth: int) -> None:
        if self.interrupted.is_set():
            raise Halt("Interrupted (Ctrl-C): the check is incomplete.", EXIT_INTERRUPTED)
        used = memory_mb()
        if self.max_memory_mb is not None and used > self.max_memory_mb:
            raise Halt(f"stopped: memory use {used:.0f} MiB passed --max-memory {self.max_memory_mb:.0f} MiB "
                       "(the state space may be infinite; add a CONSTRAINT or raise --max-memory); "
                       "the check is incomplete", EXIT_ERROR_STATESPACE_TOO_LARGE)
        now = time.monotonic()
        if now - self.last >= self.interval:
            rate = (generated - self.last_generated) / (now - self.last) * 60
            self.last, self.last_generated = now, generated
            self.say(f"Progress({depth}) at {time.strftime('%Y-%m-%d %H:%M:%S')}: {generated:,} states generated "
                     f"({rate:,.0f} s/min), {distinct:,} distinct states found, {queue:,} states left on queue "
                     f"({used:,.0f} MiB).")

