"""Output paths checked before a command does any work, so a bad one fails fast and writes nothing."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def writable_file(text: str, option: str, suffixes: Iterable[str] = (), create_parents: bool = False) -> Path:
    """``text`` as a file path that can be created or overwritten; ValueError naming ``option``.

    ``suffixes``: the extensions allowed (lowercase, with the dot); empty allows any.
    ``create_parents``: missing directories will be created by the writer, so only the nearest
    existing one must be writable. The checks leave nothing behind."""
    path = Path(text)
    allowed = tuple(suffixes)
    if path.is_dir() or text.endswith(os.sep):
        raise ValueError(f"{option} {text}: is a directory; name a file")
    if allowed and path.suffix.lower() not in allowed:
        found = f"extension {path.suffix!r}" if path.suffix else "no extension"
        raise ValueError(f"{option} {text}: {found}; use one of {', '.join(allowed)}")
    parent = path.parent
    if not parent.is_dir():
        if not create_parents:
            raise ValueError(f"{option} {text}: directory {str(parent)!r} does not exist")
        _check_can_create_in(_nearest_existing(parent), text, option)
        return path
    existed = path.exists()
    try:
        # Opening is the only test that holds for root and for special file systems alike.
        with path.open("a"):
            pass
    except OSError as error:
        raise ValueError(f"{option} {text}: not writable ({error.strerror or error})") from None
    if not existed:
        path.unlink()
    return path


def _nearest_existing(directory: Path) -> Path:
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    return directory


def _check_can_create_in(directory: Path, text: str, option: str) -> None:
    if not directory.is_dir():
        raise ValueError(f"{option} {text}: {str(directory)!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(dir=directory))
    except OSError as error:
        raise ValueError(f"{option} {text}: cannot create directories in {str(directory)!r} "
                         f"({error.strerror or error})") from None
