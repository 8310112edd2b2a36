"""Where a run stops: EOS, the token budget, or a stop string, cut exactly where plain decoding would.

A step may emit several tokens at once (the accepted run plus one). Plain decoding checks its stop
conditions after every token; :class:`StopRule` replays those checks token by token over a step's
tokens, so speculative decoding ends on exactly the token plain decoding ends on, even when an EOS
or a stop string (which may span tokens) falls inside an accepted run.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import StandError

_STOP_TAIL_TOKENS = 16
"""Extra tokens decoded beyond a stop string's length in UTF-8 bytes when checking for it (every token
decodes to at least one byte, and a character may take several byte-level tokens: a window of
characters missed a stop string of nine emoji, 27 tokens)."""


def check_stop_strings(stop) -> tuple[str, ...]:
    """Stop strings as a tuple (a lone string is one stop string).

    Raises:
        StandError: not a string or an ordered list of them (a dict or set is refused), an empty stop
            string, or one that is not valid UTF-8 (a lone surrogate).
    """
    if isinstance(stop, str):
        stop = (stop,)
    if isinstance(stop, (bytes, bytearray, dict, set, frozenset)) or not hasattr(stop, "__iter__"):
        raise StandError(f"stop must be a string or a list of strings, got {stop!r}")
    stop = tuple(stop)
    if not all(isinstance(s, str) and s for s in stop):
        raise StandError(f"stop strings must be non-empty strings, got {list(stop)!r}")
    for s in stop:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise StandError(f"stop string {s!r} is not valid UTF-8 text: generated text can never contain it") from None
    return stop


def check_eos_ids(eos_ids, vocab: int | None = None) -> list[int]:
    """EOS ids as a list of ints.

    Raises:
        StandError: not a sequence of non-negative ints (below ``vocab`` when given).
    """
    if isinstance(eos_ids, (str, bytes)) or not hasattr(eos_ids, "__iter__"):
        raise StandError(f"eos_token_ids must be a list of token ids, got {eos_ids!r}")
    ids = list(eos_ids)
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise StandError(f"eos_token_ids must be non-negative integers, got {ids!r}")
    if vocab is not None and any(t >= vocab for t in ids):
        raise StandError(f"eos token id {max(ids)} is outside the model's vocabulary ({vocab} tokens)")
    return [int(t) for t in ids]


def text_before_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first occurrence of any stop string, the stop string left out (the OpenAI
    convention, which vLLM's server follows). The run's *tokens* keep the token that completed the
    stop string, as plain decoding emitted it; only the text is cut.
    """
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


class StopRule:
    """The stop conditions of one run.

    Args:
        eos_ids: tokens that end the run (kept in the output).
        max_new_tokens: the token budget (>= 1).
        stop: strings that end the run once the generated text contains one (the tokens up to and
            including the one completing it are kept, as transformers' ``stop_strings`` does; the
            result's text leaves the stop string out, :func:`text_before_stop`).
        tokenizer: decodes generated tokens for the stop-string check (needed when ``stop`` is given).

    Raises:
        StandError: a stop string is empty or not a string, or stop strings without a tokenizer.
    """

    def __init__(self, eos_ids: Sequence[int], max_new_tokens: int, stop: Sequence[str] = (), tokenizer=None) -> None:
        stop = check_stop_strings(stop)
        if stop and tokenizer is None:
            raise StandError("stop strings need a tokenizer to decode the generated text")
        self.eos_ids = frozenset(check_eos_ids(eos_ids))
        self.max_new_tokens = max_new_tokens
        self.stop = stop
        self.tokenizer = tokenizer
        self._tail = max((len(s.encode("utf-8")) for s in self.stop), default=0) + _STOP_TAIL_TOKENS

    def cut(self, generated: list[int], new_tokens: list[int]) -> tuple[list[int], str | None]:
        """The part of a step's tokens that plain decoding would emit, and why the run ends.

        Args:
            generated: tokens generated before this step.
            new_tokens: the step's tokens (accepted run + recovered/bonus token), in order.

        Returns:
            ``(kept, finish_reason)``: ``kept`` a prefix of ``new_tokens``; ``finish_reason`` is
            ``"eos"``, ``"stop"``, ``"length"`` or None when the run goes on.
        """
        tail = generated[-self._tail :] if self.stop else []
        for index, token in enumerate(new_tokens):
            kept = new_tokens[: index + 1]
            if token in self.eos_ids:
                return kept, "eos"
            if self.stop:
                tail = (tail + [token])[-self._tail :]
                text = self.tokenizer.decode(tail, skip_special_tokens=False)
                if any(s in text for s in self.stop):
                    return kept, "stop"
            if len(generated) + index + 1 >= self.max_new_tokens:
                return kept, "length"
        return list(new_tokens), None

    def text(self, tokens: list[int], finish_reason: str | None) -> str:
        """The text of a finished run's ``tokens`` (special tokens skipped; empty without a
        tokenizer), cut before the stop string when a stop string ended it."""
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return text_before_stop(text, self.stop) if finish_reason == "stop" else text
