"""One check per kind of parameter, shared by every entry point (generate, generate_batch,
decode_rows, the backend, search, the vLLM proposer, the CLI).

Each check returns the value normalised (numpy scalars become Python numbers, a lone stop string a
one-element tuple) or raises :class:`stand_runtime.errors.StandError` with a one-line message naming
the parameter and the value given. A parameter is checked where it enters, before any model work, by
the same function on every path, so no path accepts what another refuses.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import StandError


def check_bool(name: str, value) -> bool:
    """``value`` if it is True or False (numpy bools too).

    Raises:
        StandError: anything else (``"no"``, 1, None): a truthy non-bool must not pass as True.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise StandError(f"{name} must be True or False, got {value!r}")


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (numpy integers accepted; bools and floats refused).

    Raises:
        StandError: not an integer, or out of range (the message gives the range).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise StandError(f"{name} must be an integer{_range(minimum, maximum)}, got {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise StandError(f"{name} must be an integer{_range(minimum, maximum)}, got {value}")
    return value


def check_real(name: str, value) -> float:
    """``value`` as a finite float (ints and numpy scalars accepted; bools, strings, NaN and inf refused).

    Raises:
        StandError: not a finite real number.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise StandError(f"{name} must be a number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:
        raise StandError(f"{name} must be a finite number, got an integer too large for a float") from None
    if not math.isfinite(value):
        raise StandError(f"{name} must be a finite number, got {value}")
    return value


def parse_count(name: str, text: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer written in ASCII digits (``"80"``; not ``"８０"``, ``"8_0"``, ``" 80 "`` or ``"²"``,
    which Python's ``int`` and ``str.isdigit`` would take), in ``[minimum, maximum]``.

    Raises:
        StandError: anything else, naming ``name`` and the text.
    """
    if not isinstance(text, str) or not text.isascii() or not text.isdigit():
        raise StandError(f"{name} must be an integer{_range(minimum, maximum)} in digits 0-9, got {text!r}")
    return check_int(name, int(text), minimum, maximum)


def check_callable(name: str, value):
    """``value`` if it is None or callable.

    Raises:
        StandError: anything else (e.g. ``on_tokens=5``), before the first step runs.
    """
    if value is not None and not callable(value):
        raise StandError(f"{name} must be a function or None, got {value!r}")
    return value


def _range(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""
