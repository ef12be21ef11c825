"""``kvoffload trace``: check recorded lifecycle traces.

``kvoffload trace check FILE [--json]`` replays the trace through the Python mirror of the spec
(``kvoffload.verify.mirror``): exit 0 and counts when every line is explained, exit 1 naming the
first unexplained line (``FILE:LINE: reason``), exit 2 for input that is not a trace (missing file,
malformed JSON, a missing field), also as one ``FILE:LINE:`` line.

``kvoffload trace tla FILE --out DIR`` writes a TLA+ trace-validation module
(``TraceKVOffload.tla`` and ``.cfg``) for ``kvoffload tla check DIR/TraceKVOffload.tla``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kvoffload.commands.errors import CommandError


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload trace check`` and ``kvoffload trace tla``."""
    parser = subparsers.add_parser(
        "trace",
        help="check an ndjson lifecycle trace against the spec (kvoffload simulate --trace FILE)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="replay a trace through the Python mirror of the spec")
    check.add_argument("file", type=Path, help="the ndjson trace")
    check.add_argument("--json", action="store_true", help="print the result as one JSON object")
    check.set_defaults(func=run_check)
    tla = actions.add_parser("tla", help="write a TLA+ trace-validation module for the trace")
    tla.add_argument("file", type=Path, help="the ndjson trace")
    tla.add_argument("--out", type=Path, required=True, help="directory for TraceKVOffload.tla and .cfg")
    tla.set_defaults(func=run_tla)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"{path}: cannot read: {error}") from None


def run_check(args: argparse.Namespace) -> int:
    """``kvoffload trace check``."""
    from kvoffload.verify.mirror import MalformedTrace, check_trace_lines

    path: Path = args.file
    try:
        result = check_trace_lines(_read_lines(path))
    except MalformedTrace as error:
        raise CommandError(f"{path}:{error.line}: {error.reason}") from None
    if args.json:
        print(json.dumps({"file": str(path), **result.to_json()}))
    elif result.error is None:
        counts = ", ".join(f"{trigger}={count}" for trigger, count in sorted(result.transitions.items()))
        unfinished = f", {len(result.unfinished)} not cleaned at the end" if result.unfinished else ""
        print(
            f"{path}: OK: {result.lines} lines, {result.requests} requests{unfinished}; "
            f"transitions: {counts or 'none'}"
        )
    else:
        print(f"{path}:{result.error.line}: {result.error.reason}")
    return 0 if result.ok else 1


def run_tla(args: argparse.Namespace) -> int:
    """``kvoffload trace tla``."""
    from kvoffload.spec.lifecycle import REQUEST_LIFECYCLE
    from kvoffload.statemachine.trace_tla import write_trace_module
    from kvoffload.verify.mirror import MalformedTrace, read_trace

    path: Path = args.file
    try:
        numbered = read_trace(_read_lines(path))
    except MalformedTrace as error:
        raise CommandError(f"{path}:{error.line}: {error.reason}") from None
    if not numbered:
        raise CommandError(f"{path}: the trace is empty")
    try:
        tla_path, cfg_path = write_trace_module(
            [record for _, record in numbered], REQUEST_LIFECYCLE, args.out,
            line_numbers=[number for number, _ in numbered],
        )
    except OSError as error:
        raise CommandError(f"{args.out}: cannot write: {error}") from None
    print(f"wrote {tla_path} and {cfg_path} ({len(numbered)} lines); check with: kvoffload tla check {tla_path}")
    return 0
