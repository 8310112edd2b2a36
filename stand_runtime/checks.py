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
import os

import numpy as np

from .errors import StandError


def check_bool(name: str, value) -> bool:
    """``value`` if it is True or False (numpy bools too); StandError for anything else (``"no"``, 1,
    None: a truthy non-bool must not pass as True)."""
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
    """``value`` if it is None or callable; StandError for anything else (e.g. ``on_tokens=5``)."""
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


ENV_SWITCHES = {
    "STAND_NATIVE": "0: every fresh store the Python reference; 1: require the native one",
    "STAND_NATIVE_NUCLEUS": "0: the torch top-p cut where the native one would serve",
    "STAND_VLLM_FAST_SAMPLING": "0: vLLM's own CPU sampler (its top-p sort, noise and verification)",
    "STAND_VLLM_ANY_VERSION": "1: let the vLLM proposer try a release it does not support",
}
"""The toolkit's on/off environment variables and what each value other than the default does."""


def env_switch(name: str, environ=None) -> bool | None:
    """The on/off environment variable ``name`` (one of :data:`ENV_SWITCHES`): None when unset or empty,
    False for ``0``, True for ``1`` (surrounding spaces ignored).

    Raises:
        StandError: any other value, in one line naming the variable and the values it takes.
    """
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if value not in ("", "0", "1"):
        raise StandError(f"{name} must be 0 or 1 ({ENV_SWITCHES.get(name, 'an on/off switch')}), got {value!r}")
    return None if value == "" else value == "1"


def check_env_switches(environ=None) -> None:
    """Every variable of :data:`ENV_SWITCHES` checked by :func:`env_switch` (StandError for the first
    set to anything but 0 or 1), so that a bad value is refused also on a path that never reads it."""
    for name in ENV_SWITCHES:
        env_switch(name, environ)
