"""``kvoffload trace``: check recorded traces (``kvoffload simulate --trace FILE``).

``kvoffload trace check FILE [--lifecycle NAME] [--json] [--partial]`` checks the trace against the
Python mirror of the spec (``kvoffload_lab.verify.mirror``): every request and job transition along its
declaration, and the protocol's ordering rules over transitions and manager calls. Exit 0 and
counts when every line is explained and every instance reached a terminal state (a request
``cleaned``; ``--partial`` accepts instances left over: a run that stopped early), exit 1 naming
the first unexplained line (``FILE:LINE: reason``) or the instances left unfinished, exit 2 for
input that is not a trace (missing or empty file, malformed JSON, a missing field, a field of the
wrong type or a negative count), also as one ``FILE:LINE:`` line. ``--lifecycle NAME`` checks the
lines of one declaration alone, without the rules that relate requests and jobs.

``kvoffload trace tla FILE --out DIR [--lifecycle NAME] [--check]`` writes a TLA+
trace-validation module (``Trace<Name>.tla`` and ``.cfg``) for ``kvoffload tla check``;
``--check`` also checks it with the embedded checker and names the first trace line it rejects.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kvoffload_lab.commands.errors import CommandError


def _lifecycle_choices() -> list[str]:
    from kvoffload.lifecycles import LIFECYCLES

    return sorted(LIFECYCLES)


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload trace check`` and ``kvoffload trace tla``."""
    parser = subparsers.add_parser(
        "trace",
        help="check an ndjson lifecycle trace against the spec (kvoffload simulate --trace FILE)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="check a lifecycle trace against the Python mirror of the TLA+ spec")
    check.add_argument("file", type=Path, help="the ndjson trace")
    check.add_argument("--json", action="store_true", help="print the result as one JSON object")
    check.add_argument(
        "--partial", action="store_true",
        help="accept instances left unfinished at the end (a trace of a run that stopped early)",
    )
    lifecycles = _lifecycle_choices()
    check.add_argument("--lifecycle", choices=lifecycles, help="check one declaration's lines alone")
    check.set_defaults(func=run_check)
    tla = actions.add_parser("tla", help="write a TLA+ trace-validation module for the trace")
    tla.add_argument("file", type=Path, help="the ndjson trace")
    tla.add_argument("--out", type=Path, required=True, help="directory for the module's .tla and .cfg")
    tla.add_argument("--lifecycle", choices=lifecycles, help="one declaration's lines alone")
    tla.add_argument("--check", action="store_true", help="check the module with the embedded checker")
    tla.set_defaults(func=run_tla)


def _declarations(name: str | None) -> tuple[Any, ...]:
    from kvoffload.lifecycles import LIFECYCLES
    from kvoffload_lab.verify.mirror import PRODUCT_LIFECYCLES

    return PRODUCT_LIFECYCLES if name is None else (LIFECYCLES[name],)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"{path}: cannot read: {error}") from None


def run_check(args: argparse.Namespace) -> int:
    """``kvoffload trace check``."""
    from kvoffload_lab.verify.mirror import MalformedTrace, check_trace_lines

    path: Path = args.file
    try:
        result = check_trace_lines(_read_lines(path), _declarations(args.lifecycle))
    except MalformedTrace as error:
        raise CommandError(f"{path}:{error.line}: {error.reason}") from None
    if not result.lines and result.error is None:
        raise CommandError(f"{path}: the trace is empty (no transition line)")
    summary = result.to_json()
    # A run that drained ends every instance; one left over means lines are missing.
    incomplete = None if args.partial or result.error is not None else _unfinished(result)
    ok = result.ok and incomplete is None
    if args.json:
        print(json.dumps({"file": str(path), **summary, "ok": ok, "incomplete": incomplete}))
    elif result.error is not None:
        print(f"{path}:{result.error.line}: {result.error.reason}")
    elif incomplete is not None:
        print(f"{path}: {incomplete}")
    else:
        parts = []
        for name, counts in summary["transitions"].items():
            unfinished = summary["unfinished"][name]
            ended = f", {len(unfinished)} not ended" if unfinished else ""
            listed = ", ".join(f"{trigger}={count}" for trigger, count in counts.items()) or "none"
            parts.append(f"{summary['instances'][name]} {name}(s){ended} ({listed})")
        print(f"{path}: OK: {result.lines} lines, {summary['calls']} calls; {'; '.join(parts)}")
    return 0 if ok else 1


def _unfinished(result: Any) -> str | None:
    """What the trace leaves outside a terminal state, as one sentence; None if nothing."""
    lifecycles = result.replay
    for name, declaration in lifecycles.declarations.items():
        left = lifecycles.unfinished(name)
        if left:
            listed = ", ".join(left[:5]) + (", ..." if len(left) > 5 else "")
            reached = "/".join(sorted(declaration.terminal))
            return (
                f"{len(left)} {name}(s) not {reached} at the end of the trace ({listed}); "
                f"pass --partial for a run that stopped early"
            )
    return None


def run_tla(args: argparse.Namespace) -> int:
    """``kvoffload trace tla``."""
    from kvoffload_lab.verify.mirror import MalformedTrace, read_lifecycle_trace
    from kvoffload_lab.verify.trace_tla_rules import check_trace_module, write_product_trace_module

    path: Path = args.file
    try:
        numbered = read_lifecycle_trace(_read_lines(path))
    except MalformedTrace as error:
        raise CommandError(f"{path}:{error.line}: {error.reason}") from None
    if not numbered:
        raise CommandError(f"{path}: the trace is empty")
    try:
        tla_path, cfg_path = write_product_trace_module(numbered, _declarations(args.lifecycle), args.out)
    except OSError as error:
        raise CommandError(f"{args.out}: cannot write: {error}") from None
    print(f"wrote {tla_path} and {cfg_path} ({len(numbered)} lines); check with: kvoffload tla check {tla_path}")
    if not args.check:
        return 0
    verdict = check_trace_module(tla_path)
    if verdict.ok:
        print(f"{path}: OK: the TLA+ module explains all {len(numbered)} lines")
        return 0
    print(f"{path}:{verdict.line}: {verdict.reason}")
    return 1
