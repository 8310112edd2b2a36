"""Final answers of math trajectories and majority voting (test-time scaling accuracy)."""

from __future__ import annotations

import re
from collections import Counter

from stand_runtime import StandError

_SEPARATORS = ("{,}", "\\,", ",", "\u00a0", "\u2009", "\u202f")  # thousands separators
_GROUP = "(?:" + "|".join(map(re.escape, _SEPARATORS)) + ")"  # one of them between digit groups of a number
_DIGITS = r"(?:\d{1,3}(?:" + _GROUP + r"\d{3})+(?!\d)|\d+)"  # grouped by threes, or not grouped
# a sign only where it is not a hyphen after a word ("5-6" is two numbers, "x = -6" one)
_NUMBER = re.compile(r"(?:(?<![\w.])[-+\u2212])?(?:" + _DIGITS + r"(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_GROUPED = re.compile(r"[-+]?" + _DIGITS + r"(?:\.\d+)?")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
# LaTeX that does not change an answer's value: sizing, thin/negative spaces, degree marks, percent
# and dollar signs (Hendrycks et al. 2021, MATH, its answer normalisation)
_DECORATION = re.compile(r"\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|(?<!\\)\\!|\^\{?\\circ\}?|\\%|%|\\\$|\$")
_UNITS = re.compile(r"(?<=\S)\s*\\(?:text|mbox|textrm|mathrm)\{[^{}]*\}$")  # a trailing unit: 18\text{ dollars}
_LATEX_SPACE = re.compile(r"(?<!\\)\\[,;: ]|~")  # not the "\\\\" of a new line followed by a space
_LATEX_GROUP = re.compile(r",\\!\s*")  # MATH's "10,\\!080": a grouping comma
_MAX_DIGITS = 60  # a number written with more digits than this keeps its own spelling


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, index = 0, start + len("\\boxed{")
    for position in range(index, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[index:position].strip()
            depth -= 1
    return None


def extract_answer(text: str) -> str | None:
    """The final answer: the last ``\\boxed{...}``, else the last number in the text; normalised.

    Digits may be grouped by threes (``1,234`` is one number, ``1,23`` two); in free text an ordinary
    space ends a number and a ``-`` right after a word or digit is a hyphen (``"pages 5-6"`` reads ``6``).

    Raises:
        StandError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise StandError(f"an answer is read from text, not {type(text).__name__}")
    answer = last_boxed(text)
    if answer is None:
        numbers = _NUMBER.findall(text)
        answer = numbers[-1] if numbers else None
    return None if answer is None else normalise(answer)


def normalise(answer: str) -> str:
    """One spelling for equal answers, as MATH-style graders do (Hendrycks et al. 2021).

    Takes out spaces (LaTeX's ``\\,`` ``\\;`` ``\\:`` ``~`` too), ``$`` and ``%`` signs, ``\\left`` / ``\\right``,
    ``\\!``, degree marks and a trailing ``\\text{}`` / ``\\mbox{}`` unit; ``\\dfrac`` / ``\\tfrac`` become
    ``\\frac``; a number grouped by threes loses its separators (``1,000`` is ``1000``; ``(1,2)`` and ``1,23``
    keep their commas). A number gets one exact decimal spelling (``18.00`` → ``18``, ``-0`` → ``0``, ``1e5``
    → ``100000``, ``.5`` → ``0.5``, a Unicode minus → ``-``) unless it would take more than 60 digits.

    Raises:
        StandError: ``answer`` is not a string.
    """
    if not isinstance(answer, str):
        raise StandError(f"an answer is text, not {type(answer).__name__}")
    answer = _UNITS.sub("", _LATEX_GROUP.sub("{,}", answer.strip()))
    answer = _DECORATION.sub("", answer).replace("\u2212", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if _GROUPED.fullmatch(answer.strip()):  # before spaces go: "1, 234" is a list, "1,234" a number
        for separator in _SEPARATORS:
            answer = answer.replace(separator, "")
    answer = "".join(_LATEX_SPACE.sub(" ", answer).split())
    if not _PLAIN_NUMBER.fullmatch(answer):
        return answer
    return _plain_spelling(answer) or answer


def _plain_spelling(number: str) -> str | None:
    """``number`` (a match of ``_PLAIN_NUMBER``) spelled without exponent, trailing fraction zeros or
    leading zeros, computed on its digits alone; None when that takes more than ``_MAX_DIGITS`` digits."""
    mantissa, _, exponent = number.lower().partition("e")
    negative = mantissa.startswith("-")
    whole, _, fraction = mantissa.lstrip("+-").partition(".")
    if len(exponent.lstrip("+-").lstrip("0")) > 9:
        return None  # an exponent of ten or more digits: far past _MAX_DIGITS either way
    shift = int(exponent or 0) - len(fraction)  # value = int(digits) * 10 ** shift
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return "0"
    stripped = digits.rstrip("0")
    shift += len(digits) - len(stripped)
    digits = stripped
    if max(len(digits) + shift, len(digits), -shift) > _MAX_DIGITS:
        return None
    if shift >= 0:
        text = digits + "0" * shift
    else:
        point = len(digits) + shift
        text = (digits[:point] if point > 0 else "0") + "." + "0" * max(0, -point) + digits[max(point, 0):]
    return ("-" if negative else "") + text


def majority_vote(answers: list[str | None]) -> str | None:
    """The most common non-empty answer (ties: the one seen first), or None."""
    counts = Counter(a for a in answers if a)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a and counts[a] == best)
