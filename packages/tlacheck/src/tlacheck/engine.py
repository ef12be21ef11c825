"""Running one model on a chosen engine: ``auto`` resolved to TLC or the embedded checker, and a
spec or config that does not parse turned into one located line (:class:`UsageError`)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from tlacheck.monitor import DEFAULT_MAX_MEMORY_MB
from tlacheck.result import EXIT_ERROR_CONFIG_PARSE, EXIT_ERROR_SPEC_PARSE, CheckResult

ENGINES = ("auto", "tlc", "embedded")
# Binary or non-UTF-8 .tla/.cfg: TLC has no exit code for it; the CLI's usage error status.
EXIT_UNREADABLE_INPUT = 2


class UsageError(Exception):
    """Bad input to a command (a missing file, a spec that does not parse, no TLC where it is asked
    for): printed as one line, no traceback; exit status ``status`` (2, or TLC's 150/151 for a spec
    or config that does not parse)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def choose_engine(engine: str, jar: Path | None) -> tuple[str, str | None]:
    """Resolve ``auto`` to ``tlc`` or ``embedded``. Returns ``(engine, note)``; the note says why
    ``auto`` fell back to the embedded checker. ``tlc`` without a jar or java raises UsageError
    with the how-to-get-the-jar message."""
    from tlacheck import tlc

    if engine == "embedded":
        return "embedded", None
    try:
        tlc.find_tlc(jar)
    except tlc.TlcNotFound as error:
        if engine == "tlc" or jar is not None:
            raise UsageError(str(error)) from error
        if "java not found" in str(error):
            return "embedded", "TLC not available (java not found); using the embedded checker (to use TLC, " \
                               "install a Java runtime, 11 or later)"
        return "embedded", (
            f"no tla2tools.jar ({tlc.where_jars_are_looked_for()}); using the embedded checker. To use TLC, "
            f"download tla2tools.jar from https://github.com/tlaplus/tlaplus/releases to {tlc.default_jar_path()} "
            f"or set {tlc.JAR_ENV}=/path/to/tla2tools.jar"
        )
    return "tlc", None


def run_engine(
    engine: str,
    spec: Path,
    config: Path,
    *,
    jar: Path | None = None,
    max_states: int | None = None,
    max_memory_mb: int | None = DEFAULT_MAX_MEMORY_MB,
    progress: bool = False,
    workers: int = 1,
    tlc_options: Any = None,
) -> CheckResult:
    """Check ``spec`` with ``config`` on a resolved engine (``tlc`` or ``embedded``).

    Errors in the inputs (a spec or config that does not parse or names something undefined)
    raise UsageError with one line naming the file and line, whichever engine found them.
    """
    if engine == "tlc":
        from tlacheck import tlc

        try:
            result = tlc.run_tlc(spec, config, jar=jar, options=tlc_options)
        except tlc.TlcNotFound as error:
            raise UsageError(str(error)) from error
        return _reject_input_errors(result, spec, config)
    from tlacheck import TlaError, check_model

    started = time.perf_counter()
    try:
        result = check_model(spec, config, max_states=max_states, max_memory_mb=max_memory_mb, progress=progress,
                             workers=workers)
    except TlaError as error:
        raise UsageError(format_tla_error(error), EXIT_ERROR_SPEC_PARSE) from error
    if not result.seconds:
        result.seconds = time.perf_counter() - started
    return _reject_input_errors(result, spec, config)


def _reject_input_errors(result: CheckResult, spec: Path, config: Path) -> CheckResult:
    """A spec or config that does not parse is the user's input error (one line, exit 2), not a
    model-checking outcome; the message names the file (and line, where the engine knows it)."""
    if result.exit_code not in (EXIT_ERROR_SPEC_PARSE, EXIT_ERROR_CONFIG_PARSE, EXIT_UNREADABLE_INPUT):
        return result
    message = " ".join(part.strip() for part in result.message.splitlines() if part.strip())
    if not re.match(r"\S+\.(tla|cfg)\b", message):
        where = str(spec) if result.exit_code == EXIT_ERROR_SPEC_PARSE else _config_location(config, message)
        message = f"{where}: {message}"
    raise UsageError(message, result.exit_code)


def _config_location(config: Path, message: str) -> str:
    """``MODEL.cfg:LINE`` of the name a config error is about (TLC reports no line for these)."""
    named = re.search(r"\b(?:invariant|property|constant|parameter|operator|definition)\s+(\w+)", message, re.I)
    if named:
        try:
            lines = config.read_text().splitlines()
        except OSError:
            return str(config)
        pattern = re.compile(rf"^(?!\s*\\\*).*\b{re.escape(named.group(1))}\b")
        for number, line in enumerate(lines, start=1):
            if pattern.match(line):
                return f"{config}:{number}"
    return str(config)


def format_tla_error(error: Exception) -> str:
    """One line, ``FILE:LINE:COLUMN: message``, for an embedded-checker TlaError."""
    file = getattr(error, "file", None)
    line = getattr(error, "line", None)
    column = getattr(error, "column", None)
    message = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    location = ":".join(str(part) for part in (file, line, column) if part not in (None, ""))
    if location and not message.startswith(location) and (file is None or str(file) not in message):
        return f"{location}: {message}"
    return message
