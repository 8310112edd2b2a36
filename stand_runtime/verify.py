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

from .draft import Draft
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
    At each node the outcome (child i accepted, or none) is drawn in one shot from the probabilities
    :func:`acceptance_chain` gives, which is the same law as running the stages one by one.

    Args:
        draft: the drafted tree (tokens, q per node with children).
        target_probs: p per draft position, ``[vocab]`` float64, each summing to 1.
        randomness: fresh uniforms for the outcome at each node and for recovered/bonus samples.

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
        support, q, slots = node_draft(draft, node)
        accept, residual_on_support = acceptance_chain(
            probs[support].tolist(), q, slots, stochastic=draft.stochastic and q is not None
        )
        u, cumulative, chosen = randomness.uniform(), 0.0, None
        for child, prob in zip(kids, accept):
            cumulative += prob
            if u < cumulative:
                chosen = child
                break
        if chosen is None:
            residual = probs.copy()
            residual[support] = residual_on_support
            return Verification(accepted, sample_index(residual, randomness.uniform()), False)
        accepted.append(chosen)
        node = chosen


def node_draft(draft: Draft, node: int) -> tuple[np.ndarray, list[float] | None, list[int]]:
    """The draft distribution at ``node``: support ids ``[k]``, q on it (None when the drafts carry
    no probabilities) and each child's slot in the support, in drawing order."""
    kids = draft.children[node]
    if draft.draft_ids[node] is None:
        return np.asarray([draft.tokens[c] for c in kids], dtype=np.int64), None, list(range(len(kids)))
    return draft.draft_ids[node], draft.draft_probs[node].tolist(), [draft.slots[c] for c in kids]


def acceptance_chain(
    target_on_support: list[float], q: list[float] | None, slots: list[int], stochastic: bool
) -> tuple[list[float], list[float]]:
    """Probability that each child is the accepted one, and the final residual on q's support.

    Runs the stages of the verification rule (module docstring) analytically. Only the entries of
    p on q's support change from stage to stage, so p enters as its values on the support and the
    rest of the vocabulary is implied (p sums to 1).

    Args:
        target_on_support: ``[k]`` p at the support ids.
        q: ``[k]`` the draft distribution the children were drawn from (stochastic rule), or None.
        slots: support index of each child, in drawing order (``m <= k`` children).
        stochastic: True for recursive rejection sampling without replacement (Jeon et al. 2024),
            False for the deterministic-draft rule (q_i one-hot on the i-th child).

    Returns:
        ``accept``: ``[m]`` probability that child i is accepted (the rest, ``1 - sum``, is "none");
        ``residual``: ``[k]`` unnormalised residual weights at the support ids after every child
        was rejected (the weights elsewhere are p's own): sample the recovered token from p with
        these entries replaced.
    """
    weights = list(target_on_support)
    total = 1.0
    reach = 1.0  # probability that every earlier child was rejected
    accept: list[float] = []
    q = list(q) if q is not None else None
    for slot in slots:
        target = weights[slot] / total
        if stochastic:
            ratio = min(1.0, target / q[slot]) if q[slot] > 0 else 0.0
        else:
            ratio = min(1.0, target)
        accept.append(reach * ratio)
        reach *= 1.0 - ratio
        if stochastic:
            lowered = [max(w - q_x * total, 0.0) for w, q_x in zip(weights, q)]
            remaining = total - sum(weights) + sum(lowered)
        else:
            lowered = list(weights)
            lowered[slot] = 0.0
            remaining = total - weights[slot]
        # p_i = q_i exactly leaves no residual mass: the rejection then has probability 0 and any
        # distribution is correct, so keep p_i.
        if remaining > 1e-12 * total:
            weights, total = lowered, remaining
        if stochastic:
            q_total = sum(q) - q[slot]
            q[slot] = 0.0
            if q_total <= 0:
                break
            q = [q_x / q_total for q_x in q]
    return accept, weights
