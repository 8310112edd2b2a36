"""Lossless verification of a drafted tree against the target distributions.

Vocabulary (as in vLLM's rejection sampler):
- **accepted tokens**: the drafted nodes on the path the walk descends, root excluded;
- **recovered token**: after every child of a node is rejected, the token sampled from the
  remaining *residual distribution*;
- **bonus token**: after the walk reaches a node with no drafted children (every level accepted),
  the token sampled from p at that node.
A step emits the accepted tokens plus exactly one recovered or bonus token.

Rules, walking from the root (DESIGN §3.3), with p the target sampling distribution at the node:

- greedy: descend into the child whose token is argmax p; otherwise emit argmax p.
- stochastic drafts (children drawn without replacement from q, in order): recursive rejection
  sampling without replacement (Jeon et al., 2024, "Recursive Speculative Decoding", Alg. 1)::

      p_1 = p, q_1 = q
      for i = 1..m:  accept c_i with probability min(1, p_i(c_i) / q_i(c_i))
                     else p_{i+1} = norm(max(p_i - q_i, 0)),  q_{i+1} = norm(q_i without c_i)
      none accepted: emit a sample of p_{m+1} (recovered token)

  Stage i emits x with probability min(p_i, q_i)(x) + max(p_i - q_i, 0)(x) = p_i(x), so the emitted
  token is distributed exactly as under plain sampling.
- deterministic drafts (no probabilities, or q's top-m): the same loop with q_i one-hot on c_i:
  accept with probability p_i(c_i); on rejection zero c_i in p_i and renormalise.

Verification never calls the model: target distributions come from a callable, so the engine
computes p only for the nodes the walk visits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .drafting import Draft
from .randomness import RandomStream
from .sampling import sample_index

TargetProbs = Callable[[int], np.ndarray]
"""Maps a draft position (0 = root) to ``[vocab]`` float64 target probabilities p at that node."""


@dataclass(frozen=True)
class Verification:
    """Outcome of verifying one drafted tree.

    Attributes:
        accepted: draft positions of the accepted nodes, root to leaf (root excluded); may be empty.
        token: the recovered or bonus token emitted after them.
        bonus: True when the walk ended at a node with no drafted children (a bonus token).
    """

    accepted: list[int]
    token: int
    bonus: bool


def verify_greedy(draft: Draft, target_probs: TargetProbs) -> Verification:
    """Greedy verification: follow the children that equal argmax p (first index on ties)."""
    node, accepted = 0, []
    while True:
        best = int(np.argmax(target_probs(node)))
        match = next((child for child in draft.children[node] if draft.tokens[child] == best), None)
        if match is None:
            return Verification(accepted, best, not draft.children[node])
        accepted.append(match)
        node = match


def verify_sampling(draft: Draft, target_probs: TargetProbs, randomness: RandomStream) -> Verification:
    """Lossless sampling verification of a drafted tree.

    Uses recursive rejection sampling without replacement when ``draft.stochastic`` (children drawn
    from q by Gumbel-Top-K) and the deterministic-draft rule otherwise (see the module docstring).

    Args:
        draft: the drafted tree (tokens, q per node with children).
        target_probs: p per draft position, ``[vocab]`` float64, each summing to 1.
        randomness: fresh uniforms for accept tests and residual samples.

    Returns:
        The accepted path and the emitted token; the emitted sequence is distributed as plain
        sampling from p.
    """
    node, accepted = 0, []
    while True:
        probs = target_probs(node)
        kids = draft.children[node]
        if not kids:
            return Verification(accepted, sample_index(probs, randomness.uniform()), True)
        if draft.stochastic:
            child, residual = _reject_stochastic(draft, node, probs, randomness)
        else:
            child, residual = _reject_deterministic(draft, node, probs, randomness)
        if child is None:
            return Verification(accepted, sample_index(residual, randomness.uniform()), False)
        accepted.append(child)
        node = child


def _reject_stochastic(draft: Draft, node: int, probs: np.ndarray, randomness: RandomStream):
    """Recursive rejection sampling without replacement over ``node``'s children (Jeon et al. 2024).

    The residual is kept unnormalised as ``weights`` with mass ``total`` (p_i = weights / total);
    only the <= k entries on q's support change from stage to stage, so they are handled as lists.
    """
    support = draft.draft_ids[node]
    q = draft.draft_probs[node].tolist()
    weights, total = probs, 1.0
    for child in draft.children[node]:
        slot = draft.slots[child]
        if randomness.uniform() * q[slot] * total < weights[draft.tokens[child]]:
            return child, None
        on_support = weights[support].tolist()
        lowered = [max(w - q_x * total, 0.0) for w, q_x in zip(on_support, q)]
        remaining = total - sum(on_support) + sum(lowered)
        # p_i = q_i exactly leaves no residual mass; the rejection that led here then had
        # probability 0, so any distribution is correct: keep p_i.
        if remaining > 1e-12 * total:
            weights = weights.copy()
            weights[support] = lowered
            total = remaining
        q[slot] = 0.0
        q_total = sum(q)
        if q_total <= 0:
            break
        q = [q_x / q_total for q_x in q]
    return None, weights


def _reject_deterministic(draft: Draft, node: int, probs: np.ndarray, randomness: RandomStream):
    """The deterministic-draft rule: q_i one-hot on each child in turn (residual unnormalised)."""
    weights, total = probs, 1.0
    for child in draft.children[node]:
        token = draft.tokens[child]
        if randomness.uniform() * total < weights[token]:
            return child, None
        if total - weights[token] > 1e-12 * total:
            total -= float(weights[token])
            weights = weights.copy()
            weights[token] = 0.0
    return None, weights
