"""SuffixDecoding (Oliaro et al., 2024, "SuffixDecoding: Extreme Speculative Decoding for Emerging AI
Applications", §3-4) as a drafter, on Snowflake's implementation (PyPI ``arctic-inference``).

A global suffix tree holds every earlier output of the trajectories that share the memory (the
N trajectories of one problem), and a per-request tree holds the prompt and the output so far. Each
step matches the context's longest suffix (up to 64 tokens) in both and drafts a *dynamic*
speculation tree (parents + estimated probabilities, the paper's §4.2 greedy expansion, with at most
``max_spec_factor * match length + max_spec_offset`` tokens, none below ``min_token_prob``); the
tree of the better-scoring match is drafted. The tree becomes a :class:`stand_runtime.trees.draft.Draft`
with its own parent array (no static tree), without draft probabilities: the deterministic-draft
rule verifies it, so decoding stays lossless. SuffixDecoding learns only tokens, never logits.

``arctic_inference.suffix_decoding`` imports with numpy only; install it with
``pip install --no-deps arctic-inference`` (a C++ build, ~2 min on 2 cores).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .base import Drafter
from ..trees.draft import Draft, DraftBuilder
from ..errors import StandError
from .feeds import TargetFeed

SUFFIX_TREE_DEPTH = 64
"""Deepest suffix kept and matched (tokens; arctic-inference's and the paper's default)."""


@dataclass(frozen=True)
class SuffixSettings:
    """How SuffixDecoding drafts (arctic-inference's ``speculate`` arguments).

    Attributes:
        max_spec_tokens: drafted nodes per step at most.
        max_spec_factor, max_spec_offset: at most ``factor * match length + offset`` nodes.
        min_token_prob: drop nodes whose estimated probability is below this.
        use_tree_spec: draft a tree (True) or the single most likely chain.

    Raises:
        StandError: a setting out of range.
    """

    max_spec_tokens: int = SUFFIX_TREE_DEPTH
    max_spec_factor: float = 1.0
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1
    use_tree_spec: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_spec_tokens, bool) or not isinstance(self.max_spec_tokens, int) or self.max_spec_tokens < 1:
            raise StandError(f"max_spec_tokens must be an integer >= 1, got {self.max_spec_tokens!r}")
        if not self.max_spec_factor >= 0 or not self.max_spec_offset >= 0:
            raise StandError(f"max_spec_factor and max_spec_offset must be >= 0, got {self.max_spec_factor}, "
                             f"{self.max_spec_offset}")
        if not 0 <= self.min_token_prob <= 1:
            raise StandError(f"min_token_prob must be in [0, 1], got {self.min_token_prob}")


SUFFIX_TUNED = SuffixSettings(max_spec_factor=100.0, min_token_prob=0.0)
"""SuffixDecoding tuned for long repetitive outputs: the match length barely limits the tree and
no node is dropped for its probability (its paper's agentic setting)."""


def _cache_class():
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError:
        raise StandError("method 'suffix' needs arctic-inference: pip install --no-deps arctic-inference") from None
    return SuffixDecodingCache


MAX_ACTIVE_REQUESTS = 64
"""Requests a :class:`SuffixMemory` keeps open at once (the rows of a batch decoding together)."""


class SuffixMemory:
    """SuffixDecoding's memory, shared by the trajectories of one problem: the suffix trees.

    Each drafter that uses it is one request. Requests may run at once (the rows of a batch); beyond
    :data:`MAX_ACTIVE_REQUESTS` the oldest is ended (its output stays in the global tree, its prompt
    tree is freed).

    Raises:
        StandError: arctic-inference is not installed.
    """

    def __init__(self, max_tree_depth: int = SUFFIX_TREE_DEPTH) -> None:
        self.cache = _cache_class()(max_tree_depth=max_tree_depth)
        self._next_request = 0
        self._active: deque[int] = deque()

    def start(self, prompt: list[int]) -> int:
        """Start a request with ``prompt``; returns its id."""
        while len(self._active) >= MAX_ACTIVE_REQUESTS:
            self.cache.stop_request(self._active.popleft())
        request, self._next_request = self._next_request, self._next_request + 1
        self.cache.start_request(request, list(prompt))
        self._active.append(request)
        return request

    def stats(self) -> dict:
        """``{"requests": requests started, "approx_bytes": the global tree's estimated memory}``."""
        return {"requests": self._next_request, "approx_bytes": int(self.cache._global_tree.estimate_memory())}


class SuffixDecodingDrafter(Drafter):
    """SuffixDecoding as a :class:`stand_runtime.drafters.Drafter` (module docstring).

    Args:
        memory: the suffix trees (shared across trajectories for best-of-N).
        settings: how it drafts.

    The committed tokens reach the trees when the next step drafts (the bonus token is known only
    then), so the last step's tokens of a run are not added.
    """

    reads_prompt = False
    """observe_prompt ignores the prompt's logits (a kept prompt prefix needs no feeding)."""

    def __init__(self, memory: SuffixMemory, settings: SuffixSettings = SuffixSettings()) -> None:
        self.memory = memory
        self.settings = settings
        self._request: int | None = None
        self._seen = 0  # committed tokens already in the trees

    @property
    def max_nodes(self) -> int:
        """Drafted nodes per step at most."""
        return self.settings.max_spec_tokens

    def observe_prompt(self, prompt, feed: TargetFeed, positions) -> None:
        pass

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        if self._request is None:
            self._request, self._seen = self.memory.start(committed), len(committed)
        elif len(committed) > self._seen:
            self.memory.cache.add_active_response(self._request, committed[self._seen :])
            self._seen = len(committed)
        s = self.settings
        spec = self.memory.cache.speculate(self._request, committed[-SUFFIX_TREE_DEPTH:], max_spec_tokens=s.max_spec_tokens,
                                           max_spec_factor=s.max_spec_factor, max_spec_offset=s.max_spec_offset,
                                           min_token_prob=s.min_token_prob, use_tree_spec=s.use_tree_spec)
        return suffix_draft(committed[-1], spec.token_ids, spec.parents, max_depth)

    def observe_step(self, committed, draft, accepted, feed: TargetFeed) -> None:
        pass

    def stats(self) -> dict:
        return self.memory.stats()


def suffix_draft(root: int, tokens: list[int], parents: list[int], max_depth: int) -> Draft:
    """A speculation tree (``tokens[i]``'s parent is ``tokens[parents[i]]``, -1 = the root) as a
    :class:`Draft` with its own parent array, nodes deeper than ``max_depth`` dropped.

    Raises:
        StandError: a parent that does not come before its child.
    """
    builder = DraftBuilder(root)
    position = {-1: 0}
    for i, (token, parent) in enumerate(zip(tokens, parents)):
        if parent not in position:
            if parent >= i or parent < -1:
                raise StandError(f"suffix tree node {i} has parent {parent}, not an earlier node")
            continue  # below a dropped node
        at = position[parent]
        if builder.depths[at] >= max_depth:
            continue
        position[i] = builder.add(at, token)
    return builder.build(stochastic=False)
