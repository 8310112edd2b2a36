"""Atomic file writes: a temporary file in the same folder, then a rename over the target.

An interrupted write leaves the old file (or none) in place, never half a file. Every error is one
line naming the path (:class:`stand_runtime.errors.StandError`).
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


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder and a rename.

    Returns:
        The path written.

    Raises:
        StandError: the folder does not exist or is not writable.
    """
    path = Path(path)
    folder = _folder(path)
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
        os.replace(tmp_name, path)
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

    Raises:
        StandError: the folder does not exist, is not writable, or the path is a folder.
    """
    path = Path(path)
    folder = _folder(path)
    if not folder.is_dir():
        raise StandError(f"cannot write {path}: folder {folder} does not exist")
    if path.is_dir():
        raise StandError(f"cannot write {path}: it is a folder")
    if not os.access(folder, os.W_OK):
        raise StandError(f"cannot write {path}: folder {folder} is not writable")


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
