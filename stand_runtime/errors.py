"""The one error type the runtime raises for bad input.

Every message is a single line that names the problem (bad tree JSON, unknown model, empty prompt,
context too long, ...), so the CLI can print it as it is, without a traceback.
"""

from __future__ import annotations


class StandError(ValueError):
    """Bad input to the STAND runtime or to treeopt; ``str(error)`` is one line naming the problem."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class StandWarning(UserWarning):
    """Something the runtime worked around and the user should hear of (one line): e.g. a cache
    folder that takes no file, so a measurement is repeated in every run. The CLI prints these as
    one ``warning:`` line each."""


def counted(count: int, word: str, plural: str | None = None) -> str:
    """A count with its noun, as messages and titles word it: ``counted(1, "prompt")`` is "1 prompt",
    ``counted(3, "prompt")`` "3 prompts"; ``plural`` where it is not ``word`` + "s" ("trajectories")."""
    return f"{count} {word if count == 1 else plural or word + 's'}"
