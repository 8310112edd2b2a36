"""Final answers of math trajectories and majority voting (test-time scaling accuracy)."""

from __future__ import annotations

import re
from collections import Counter

from stand_runtime import StandError

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


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
    """Strip spaces, dollar signs, thousands separators and a decimal's trailing zeros (``18.00`` is
    ``18``, ``-3.50`` is ``-3.5``, ``-0`` is ``0``) so equal numbers match.

    Raises:
        StandError: ``answer`` is not a string.
    """
    if not isinstance(answer, str):
        raise StandError(f"an answer is text, not {type(answer).__name__}")
    answer = answer.strip().strip("$").replace(",", "").replace(" ", "")
    if re.fullmatch(r"-?\d+\.\d+", answer):
        answer = answer.rstrip("0").rstrip(".")
    if re.fullmatch(r"-0+(\.0*)?", answer):
        answer = "0"
    return answer


def majority_vote(answers: list[str | None]) -> str | None:
    """The most common non-empty answer (ties: the one seen first), or None."""
    counts = Counter(a for a in answers if a)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a and counts[a] == best)
