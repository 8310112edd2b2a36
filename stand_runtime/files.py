"""Atomic file writes: a temporary file in the same folder, then a rename over the target.

An interrupted write leaves the old file (or none) in place, never half a file. Every error is one
line naming the path (:class:`stand_runtime.errors.StandError`). A symbolic link is followed (the file
it points to is replaced, the link stays); a path that is not a regular file (``/dev/null``, ``/dev/stdout``,
a FIFO) is written directly: renaming over it would replace a device or pipe with a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import StandError


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _target(path: Path) -> Path:
    """The file a write to ``path`` replaces: the file a symbolic link points to, else ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _special(path: Path) -> bool:
    """True when ``path`` exists and is not a regular file or a folder (a device, a FIFO, a socket)."""
    return path.exists() and not path.is_file() and not path.is_dir()


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder and a rename
    (a link's target is replaced; a device or FIFO is written directly, module docstring).

    Returns:
        The path written.

    Raises:
        StandError: the folder does not exist or is not writable, or the write failed.
    """
    path = Path(path)
    target = _target(path)
    if _special(target):
        try:
            with open(target, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as error:
            raise StandError(f"cannot write {path}: {error.strerror}") from None
        return path
    folder = _folder(target)
    if not folder.is_dir():
        raise StandError(f"cannot write {path}: folder {folder} does not exist")
    try:
        handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as error:
        raise StandError(f"cannot write {path}: {error.strerror}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp_name, target)
    except OSError as error:
        Path(tmp_name).unlink(missing_ok=True)
        raise StandError(f"cannot write {path}: {error.strerror}") from None
    return path


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON atomically (see :func:`write_text_atomic`).

    Raises:
        StandError: the folder does not exist or is not writable.
    """
    return write_text_atomic(path, json.dumps(data, indent=indent) + "\n")


def check_writable(path: str | os.PathLike) -> None:
    """Fail early, with one line, when ``path`` could not be written later.

    The folder is probed by creating and removing a temporary file in it (permission bits do not
    tell: root may "write" to /sys or /proc, which refuse new files).

    Raises:
        StandError: the folder does not exist or refuses new files, the path is a folder, or a
            device or FIFO that is not writable.
    """
    path = Path(path)
    target = _target(path)
    if target.is_dir():
        raise StandError(f"cannot write {path}: it is a folder")
    if _special(target):
        if not os.access(target, os.W_OK):
            raise StandError(f"cannot write {path}: permission denied")
        return
    folder = _folder(target)
    if not folder.is_dir():
        raise StandError(f"cannot write {path}: folder {folder} does not exist")
    try:
        handle, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
    except OSError as error:
        raise StandError(f"cannot write {path}: folder {folder}: {error.strerror}") from None
    os.close(handle)
    Path(probe).unlink(missing_ok=True)


def parse_json_object(text: str | bytes, where: str, hint: str = "") -> dict:
    """``text`` parsed as one JSON object.

    Raises:
        StandError: not JSON, nested too deeply for the parser, or not an object: one line starting
            with ``where`` (a ``path:line`` or a variable's name) and ending with ``hint`` when given.
    """
    more = f" ({hint})" if hint else ""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise StandError(f"{where}: not valid JSON ({error.msg}){more}") from None
    except RecursionError:
        raise StandError(f"{where}: JSON nested too deeply{more}") from None
    if not isinstance(value, dict):
        raise StandError(f"{where}: must be a JSON object, got {type(value).__name__}{more}")
    return value
