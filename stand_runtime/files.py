"""Atomic file writes: a temporary file in the same folder, then a rename over the target.

An interrupted write leaves the old file (or none) in place, never half a file. Every error is one
line naming the path (:class:`stand_runtime.errors.StandError`). A symbolic link is followed (the file
it points to is replaced, keeping its mode; the link stays); a path that is not a regular file
(``/dev/null``, a FIFO) or lies under /dev or /proc (``/dev/stdout``, whatever it points to) is
appended to in place: renaming over it would replace a device, a pipe or a shell's redirected output.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from .errors import StandError, StandWarning


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _target(path: Path) -> tuple[Path, bool]:
    """``(the file a write to path replaces, whether it is written in place)``: a symbolic link is
    followed (a dangling one to the file it names); a device, a FIFO or anything under /dev or /proc
    is appended to in place (``/dev/stdout`` is a link to ``/proc/self/fd/1``: a pipe, or the file the
    shell redirected output to, which the table printed before must not lose).

    Raises:
        StandError: a loop of symbolic links, a name the file system refuses (too long), or a file of
            the kernel's (under /proc or /sys).
    """
    try:
        if path.is_symlink():
            try:
                target = Path(os.path.realpath(path, strict=True))
            except FileNotFoundError:
                target = Path(os.path.realpath(path))
        else:
            target = path
        special = target.exists() and not target.is_file() and not target.is_dir()
        in_place = special or (os.path.exists(path) and (str(path.absolute()).startswith(("/dev/", "/proc/"))
                                                          or str(target).startswith(("/dev/", "/proc/"))))
        kernel = in_place and str(target).startswith(("/proc/", "/sys/")) and target.is_file()
    except OSError as error:
        raise StandError(f"cannot write {path}: {error.strerror}") from None
    if kernel:  # /proc/version, /proc/sys/...: a write would fail late, or change the kernel's settings
        raise StandError(f"cannot write {path}: a kernel interface file, not a place for output")
    return target, in_place


def standard_stream(path: str | os.PathLike) -> int | None:
    """1 or 2 where ``path`` is this process's standard output or error (``/dev/stdout``, or the file
    or pipe it is redirected to), else None. A write there goes through that descriptor: opened again
    (``/proc/self/fd/1``), a file redirected with ``>`` would get a second offset, and the console's
    next lines would overwrite what was written through it."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    for stream in (1, 2):
        try:
            if os.path.samestat(found, os.fstat(stream)):
                return stream
        except OSError:
            continue
    return None


def written_in_place(path: str | os.PathLike) -> bool:
    """Whether a write to ``path`` appends in place (:func:`_target`) rather than replacing the file: a
    caller that saves a growing document after every unit of work writes it there once, at the end.

    Raises:
        StandError: a loop of symbolic links.
    """
    return _target(Path(path))[1]


def _temporary(path: Path, target: Path, suffix: str) -> tuple[int, str]:
    """A new temporary file beside ``target``: ``(descriptor, name)``; a StandError naming ``path``
    when its folder is missing, is not a folder, or refuses new files."""
    folder = _folder(target)
    if not folder.exists():
        raise StandError(f"cannot write {path}: folder {folder} does not exist")
    if not folder.is_dir():
        raise StandError(f"cannot write {path}: {folder} is not a folder")
    try:
        # the name cut so that a target name near the file system's 255-byte limit still has a temporary
        return tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=suffix, dir=folder)
    except OSError as error:
        raise StandError(f"cannot write {path}: folder {folder} takes no new files ({error.strerror})") from None


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """:func:`write_bytes_atomic` of ``text`` in UTF-8."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename (a link's
    target is replaced, keeping its mode; a device, FIFO or /dev/stdout is written in place:
    :func:`_target`). Returns the path written.

    Raises:
        StandError: a path that is not a str or os.PathLike, the folder does not exist or is not
            writable, a loop of links, or the write failed.
    """
    path = checked_path(path)
    target, in_place = _target(path)
    if in_place:
        try:
            stream = standard_stream(path)
            if stream is not None:  # through the process's own descriptor: its offset, not a second one
                sys.stdout.flush()
                sys.stderr.flush()
                view = memoryview(data)
                while view:
                    view = view[os.write(stream, view):]
            else:
                with open(path, "ab") as out:
                    out.write(data)
        except OSError as error:
            raise StandError(f"cannot write {path}: {error.strerror}") from None
        return path
    handle, tmp_name = _temporary(path, target, ".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            mode = target.stat().st_mode & 0o7777  # a replaced file keeps its mode
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # mkstemp makes 0600; a new file gets the usual mode
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException as error:  # an interrupt (Ctrl-C) mid-write leaves no temporary file either
        Path(tmp_name).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise StandError(f"cannot write {path}: {error.strerror}") from None
        raise
    return path


def write_cache_file(path: str | os.PathLike, data: bytes) -> str | None:
    """Store a cache entry: ``data`` written atomically to ``path``, its folders made first; only a
    regular file (or nothing) there is replaced (written in place, a FIFO would wait for a reader).

    Returns:
        None when written, else why not (one line naming the path).
    """
    path = Path(path)
    if os.path.lexists(path) and not path.is_file():
        return f"cannot write {path}: not a regular file"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data)
    except OSError as error:
        return f"cannot write {path}: {error.strerror or error}"
    except StandError as error:
        return str(error)
    return None


def cache_or_warn(path: str | os.PathLike, data: bytes, what: str) -> bool:
    """:func:`write_cache_file`, and where the cache takes no file a :class:`StandWarning` saying that
    ``what`` (e.g. ``"the latency profile"``) is kept for this run only. True when written."""
    problem = write_cache_file(path, data)
    if problem is not None:
        warnings.warn(StandWarning(f"{what} is kept for this run only ({problem}): the next run measures it again"),
                      stacklevel=3)
    return problem is None


def json_bytes(data: Any, indent: int | None = 1) -> bytes:
    """``data`` as a JSON file's UTF-8 bytes (a final line break): strict JSON, a NaN or infinite float
    written as ``null`` (Python's ``NaN`` is no JSON a strict parser reads)."""
    return (json.dumps(_strict_json(data), indent=indent, allow_nan=False) + "\n").encode("utf-8")


def _strict_json(data: Any) -> Any:
    """``data`` with every float that is not finite replaced by None (dicts, lists and tuples walked)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _strict_json(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_strict_json(value) for value in data]
    return data


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int | None = 1) -> Path:
    """:func:`write_bytes_atomic` of :func:`json_bytes`."""
    return write_bytes_atomic(path, json_bytes(data, indent))


def check_writable(path: str | os.PathLike) -> None:
    """Fail early, with one line, when ``path`` could not be written later: the folder is probed by
    creating and removing a temporary file (permission bits do not tell: root may "write" to /sys).

    Raises:
        StandError: not a path, the folder does not exist or refuses new files, the path is a folder,
            a name too long, or a device or FIFO that is not writable.
    """
    path = checked_path(path)
    try:
        target, in_place = _target(path)
        is_dir = target.is_dir()
    except OSError as error:
        raise StandError(f"cannot write {str(path)[:120]}: {error.strerror or error}") from None
    if is_dir:
        raise StandError(f"cannot write {path}: it is a folder")
    if in_place:
        if not os.access(path, os.W_OK):
            raise StandError(f"cannot write {path}: permission denied")
        return
    handle, probe = _temporary(path, target, ".probe")
    os.close(handle)
    Path(probe).unlink(missing_ok=True)


def checked_path(path) -> Path:
    """``path`` as a Path; raises StandError unless it is a non-empty str or os.PathLike without a NUL."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise StandError(f"a file path must be a non-empty str or os.PathLike, got {path!r}")
    if "\0" in str(path):
        raise StandError(f"a file path cannot hold a NUL character, got {str(path)[:80]!r}")
    return Path(path)


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
    except (UnicodeDecodeError, ValueError) as error:  # bytes that are not UTF-8; an int past 4300 digits
        raise StandError(f"{where}: not valid JSON ({' '.join(str(error).split())[:120]}){more}") from None
    except RecursionError:
        raise StandError(f"{where}: JSON nested too deeply{more}") from None
    if not isinstance(value, dict):
        raise StandError(f"{where}: must be a JSON object, got {type(value).__name__}{more}")
    return value
