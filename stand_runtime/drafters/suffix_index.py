"""The latest earlier occurrence of a sequence's suffix: prompt lookup's index (Saxena, 2023).

For a growing token sequence (prompt + generated), every n-gram (n <= ``max_ngram``) is indexed by
the position where its latest occurrence ends. :meth:`SuffixIndex.continuation` finds the longest
suffix of the sequence that occurred before and returns the tokens that followed it there: prompt
lookup decoding drafts them as a chain, and STAND grafts them onto its tree (a copy path).
:class:`NativeSuffixIndex` is the same index in C++ (STAND over a native store uses it).
"""

from __future__ import annotations

from ..errors import StandError

PROMPT_LOOKUP_NGRAM = 3
"""Longest suffix prompt lookup matches by default (tokens; Saxena, 2023): prompt lookup decoding
and the copy chain of fixed trees (a value-sized tree matches longer:
:data:`stand_runtime.sizing.value.COPY_NGRAM`)."""


MAX_MATCH = 64
"""Longest match a copy chain's index reports when asked to measure it (tokens): a match of
``max_ngram`` tokens extended backward by comparison, so a long repeated span (a loop, a copied
block) is told from a match of just ``max_ngram`` tokens (:func:`stand_runtime.sizing.value.match_rate`)."""


def repeated(chain: list[int], limit: int) -> list[int]:
    """``chain`` continued to ``limit`` tokens as an overlapping copy (LZ77's) when the sequence's end cut
    it (fewer than ``limit`` tokens): a chain cut there is the span from the match to the end, so the
    text it predicts repeats with that period; a chain of ``limit`` tokens or an empty one is returned
    as it is."""
    if not chain or len(chain) >= limit:
        return chain
    return [chain[k % len(chain)] for k in range(limit)]


def extend_match(sequence: list[int], end: int, n: int, longest: int) -> int:
    """The length of the match of ``sequence``'s suffix ending at ``end`` (``n`` tokens known to agree)
    extended backward by comparison, at most ``longest`` tokens."""
    last = len(sequence) - 1
    while n < longest and end - n >= 0 and sequence[end - n] == sequence[last - n]:
        n += 1
    return n


MAX_NGRAM = 4096
"""The longest suffix an index matches (tokens); the native index keeps a table per length."""


def check_max_ngram(max_ngram: int) -> None:
    """Refuse a ``max_ngram`` outside 1 .. :data:`MAX_NGRAM`.

    Raises:
        StandError: naming the value.
    """
    if not (isinstance(max_ngram, int) and 1 <= max_ngram <= MAX_NGRAM):
        raise StandError(f"a suffix index matches 1 .. {MAX_NGRAM} tokens (max_ngram), got {max_ngram!r}")


class SuffixIndex:
    """Incremental n-gram index of one sequence.

    Args:
        max_ngram: longest suffix matched by the index (tokens).
        longest: :meth:`match` extends a match of ``max_ngram`` tokens backward by comparison and
            reports its length up to this many tokens (e.g. :data:`MAX_MATCH`); None = ``max_ngram``.

    The engine hands it the same list of committed tokens every step, grown in place: a list object
    it indexed before and no shorter than then is taken to extend what was indexed (no O(length)
    comparison per step); any other sequence is compared with a copy of the indexed one, and one that
    does not extend it starts the index over.
    """

    def __init__(self, max_ngram: int = PROMPT_LOOKUP_NGRAM, longest: int | None = None) -> None:
        check_max_ngram(max_ngram)
        self.max_ngram = max_ngram
        self.longest = max_ngram if longest is None else max(max_ngram, longest)
        self._latest: dict[tuple[int, ...], int] = {}  # n-gram → end index of its latest occurrence
        self._indexed = 0  # n-grams ending before this index are indexed
        self._sequence: list[int] = []  # a copy of what was indexed (made when another list comes)
        self._source: list[int] | None = None  # the list object indexed last, and its length then
        self._length = 0

    def _update(self, sequence: list[int]) -> None:
        if sequence is self._source and len(sequence) >= self._length:
            pass  # the engine's committed tokens, grown since
        elif sequence[: self._length] != self._indexed_tokens():  # a new sequence: start over
            self._latest, self._indexed = {}, 0
        self._sequence = None
        self._source, self._length = sequence, len(sequence)
        last = len(sequence) - 1
        for end in range(self._indexed, last):  # every n-gram ending before the current suffix
            for n in range(1, self.max_ngram + 1):
                if end - n + 1 >= 0:
                    self._latest[tuple(sequence[end - n + 1 : end + 1])] = end
        self._indexed = max(self._indexed, last)

    def continuation(self, sequence: list[int], limit: int) -> list[int]:
        """Up to ``limit`` tokens that followed the latest earlier occurrence of the longest suffix
        (n <= max_ngram) of ``sequence``; empty when no suffix occurred before."""
        return self.match(sequence, limit)[0]

    def match(self, sequence: list[int], limit: int) -> tuple[list[int], int]:
        """:meth:`continuation` and the length n of the suffix it matched (tokens; 0: none; up to
        :attr:`longest` when a match of ``max_ngram`` tokens is extended)."""
        self._update(sequence)
        if limit <= 0:
            return [], 0
        for n in range(min(self.max_ngram, len(sequence)), 0, -1):
            end = self._latest.get(tuple(sequence[-n:]))
            if end is not None:
                if n == self.max_ngram and self.longest > n:
                    n = extend_match(sequence, end, n, self.longest)
                return sequence[end + 1 : end + 1 + limit], n
        return [], 0

    def _indexed_tokens(self) -> list[int]:
        """The tokens indexed so far (the source list's first tokens, if it was not changed in place)."""
        if self._sequence is None:
            self._sequence = list(self._source[: self._length])
        return self._sequence


class NativeSuffixIndex:
    """:class:`SuffixIndex` in C++ (``stand_runtime._native.SuffixIndex``, docs/algorithms.md §3.8): the
    same :meth:`continuation` for the same sequences. Token ids are ints in int64; the sequence is a
    list (another sequence is copied into one). Its check that a sequence extends the last one reads
    each item by identity first (the list's unchanged items are the objects seen last time) and
    compares by value only where it differs, so a step costs the new tokens, not the whole sequence.

    Args:
        max_ngram, longest: as :class:`SuffixIndex`'s.

    Raises:
        StandError: the extension is not built.
    """

    def __init__(self, max_ngram: int = PROMPT_LOOKUP_NGRAM, longest: int | None = None) -> None:
        from ..store.native_store import _native

        if _native is None:
            raise StandError("NativeSuffixIndex: the native core stand_runtime._native is not built (pip install -e .)")
        check_max_ngram(max_ngram)
        self.max_ngram = max_ngram
        self.longest = max_ngram if longest is None else max(max_ngram, longest)
        self._core = _native.SuffixIndex(max_ngram, self.longest)

    def continuation(self, sequence: list[int], limit: int) -> list[int]:
        """As :meth:`SuffixIndex.continuation`."""
        return self._core.continuation(sequence if type(sequence) is list else list(sequence), int(limit))

    def match(self, sequence: list[int], limit: int) -> tuple[list[int], int]:
        """As :meth:`SuffixIndex.match`."""
        return self.continuation(sequence, limit), int(self._core.matched)


def copy_index(max_ngram: int = PROMPT_LOOKUP_NGRAM, longest: int | None = None) -> SuffixIndex | NativeSuffixIndex:
    """A :class:`NativeSuffixIndex` where the native core is built and ``STAND_NATIVE`` is not ``0``
    (the same matches, cheaper updates), else a
    :class:`SuffixIndex`."""
    from ..store.native_store import native_selected

    return NativeSuffixIndex(max_ngram, longest) if native_selected() else SuffixIndex(max_ngram, longest)
