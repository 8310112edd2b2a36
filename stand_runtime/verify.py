"""Lossless verification of a drafted tree against the target distributions.

Vocabulary (as in vLLM's rejection sampler):
- **accepted tokens**: the drafted nodes on the path the walk descends, root excluded;
- **recovered token**: after every child of a node is rejected, the token sampled from the
  remaining *residual distribution*;
- **bonus token**: after the walk reaches a node with no drafted children (every level accepted),
  the token sampled from p at that node.
A step emits the accepted tokens plus exactly one recovered or bonus token.

Rules, walking from the root (docs/algorithms.md §4.2-4.4), with p the target sampling distribution at the node:

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
- copied children (STAND's copy path: tokens fixed before drafting, placed after the drawn
  children): after the drawn stages, the deterministic stage on the current residual p_i. Each
  stage is a valid speculative-sampling step on p_i for a proposal independent of its uniform,
  so mixing the two rules at one node keeps the output p's.

Drafter-invariant verification (Daliri, Musco and Suresh, 2024, "Coupling without Communication and
Drafter-Invariant Speculative Decoding", §3; docs/seeds.md): the target's token at sequence position
t is the Gumbel-max sample ``argmax_v log p(v) + G[t, v]`` with noise ``G`` fixed by (row key, t, v)
(:class:`stand_runtime.randomness.PositionNoise`); a node is accepted when its token is that sample at
its parent. The walk is the greedy one with the Gumbel-max token in place of the argmax, so the
output is plain Gumbel-max decoding's, token for token, whatever the draft; STAND draws its children
with the same noise (Gumbel-Top-K over q), which is what makes them likely to match.

Verification never calls the model: target distributions come from a callable, so the engine
computes p only for the nodes the walk visits (as sparse nucleus rows when top-p < 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generator

import numpy as np

from .trees.draft import Draft
from .errors import StandError
from .randomness import PositionNoise, RandomStream
from .target.sampling import TargetRow, sample_index

VERIFICATION_RULES = ("invariant", "rejection")
"""The rules that verify sampled drafts: drafter-invariant Gumbel-max coupling (:func:`verify_invariant`)
and recursive rejection sampling (:func:`verify_sampling`); greedy decoding is exact match under either."""


def check_verification(rule) -> str:
    """``rule`` if it is one of :data:`VERIFICATION_RULES`.

    Raises:
        StandError: anything else (naming the rules)."""
    if not isinstance(rule, str) or rule not in VERIFICATION_RULES:
        raise StandError(f"verification must be one of {', '.join(VERIFICATION_RULES)}, got {rule!r}")
    return rule


TargetAt = Callable[[int], "TargetRow | np.ndarray"]
"""Maps a draft position (0 = root) to p at that node: a :class:`stand_runtime.target.sampling.TargetRow`
(sparse or dense) or a dense ``[vocab]`` float64 array."""

ArgmaxAt = Callable[[int], int]
"""Maps a draft position (0 = root) to the argmax token of the target's logits there."""


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


Walk = Generator[int, object, Verification]
"""A verification walk: yields each draft position it visits and is sent what it reads there (the
argmax token, or p as a :class:`TargetRow`); its return value is the :class:`Verification`. Every
walk of a step can then be advanced level by level, the rows of one level computed together
(:func:`stand_runtime.engine.row.walk_rows`)."""


def checked_row(row: "TargetRow | np.ndarray", node: int) -> TargetRow:
    """``row`` (p at draft position ``node``) as a checked :class:`TargetRow` (``min(1, nan)`` is 1).

    Raises:
        StandError: p is not finite or has no mass; an array that is not a non-empty ``[vocab]`` vector
            of values >= 0; anything else that is not a TargetRow."""
    if isinstance(row, np.ndarray):
        if row.ndim != 1 or not row.size or row.dtype.kind not in "fiu":
            raise StandError(f"p at draft node {node} must be a non-empty [vocab] numeric array, got shape "
                             f"{list(row.shape)} of {row.dtype}")
        if (row < 0).any():
            raise StandError(f"p at draft node {node} holds a negative probability")
        row = TargetRow.dense(row)
    elif not isinstance(row, TargetRow):
        raise StandError(f"p at draft node {node} must be a TargetRow or a [vocab] numpy array, not {type(row).__name__}")
    total = row.total
    if not np.isfinite(total):
        raise StandError(f"the target distribution at draft node {node} is not finite (NaN or inf logits)")
    if total <= 0:
        raise StandError(f"the target distribution at draft node {node} has no mass (every p is 0)")
    return row


def verify_greedy(draft: Draft, argmax_at: ArgmaxAt) -> Verification:
    """Greedy verification: follow the children that equal the target's argmax (first index on ties).

    Args:
        draft: the drafted tree.
        argmax_at: the argmax token per draft position (the engine checks its logits are finite).
    """
    _check_draft(draft, argmax_at, "argmax_at")
    return run_walk(greedy_walk(draft), argmax_at)


def _check_draft(draft: Draft, read, name: str, randomness: RandomStream | None = None, sampling: bool = False) -> None:
    """Raises StandError unless ``draft`` is a Draft, ``read`` callable and (sampling) ``randomness`` a RandomStream."""
    if not isinstance(draft, Draft):
        raise StandError(f"draft must be a Draft (stand_runtime.trees.draft), not {type(draft).__name__}")
    if not callable(read):
        raise StandError(f"{name} must be a callable of a draft position, not {type(read).__name__}")
    if sampling and not isinstance(randomness, RandomStream):
        raise StandError(f"randomness must be a RandomStream (RandomStream.seeded(seed)), not {type(randomness).__name__}")


def greedy_walk(draft: Draft) -> Walk:
    """:func:`verify_greedy` as a :data:`Walk` (sent the argmax token at each position it yields)."""
    return _matching_walk(draft, lambda node, best: int(best))


def _matching_walk(draft: Draft, token_of: Callable[[int, object], int]) -> Walk:
    """The walk that descends into the child whose token is the target's token at the node
    (``token_of(node, what the walk was sent)``; the first such child) and emits that token where none is."""
    node, accepted = 0, []
    while True:
        best = token_of(node, (yield node))
        match = next((child for child in draft.children[node] if draft.tokens[child] == best), None)
        if match is None:
            return Verification(accepted, best, not draft.children[node])
        accepted.append(match)
        node = match


def gumbel_max_token(row: TargetRow, noise: PositionNoise, position: int) -> int:
    """The target's token at sequence ``position`` under drafter-invariant sampling: ``argmax_v log p(v)
    + G[position, v]`` over p's support (the Gumbel-max trick: a sample of p; the first on ties).

    Args:
        row: p at the node (sparse or dense :class:`TargetRow`, checked finite).
        noise: the row's :class:`PositionNoise`.
        position: the index in the sequence (prompt included) of the token drawn.
    """
    ids = row.ids if row.ids is not None else np.arange(len(row.probs))
    with np.errstate(divide="ignore"):
        keys = np.log(row.probs) + noise.gumbel(position, ids)
    return int(ids[int(np.argmax(keys))])


def gumbel_walk(draft: Draft, noise: PositionNoise, base: int) -> Walk:
    """:func:`verify_invariant` as a :data:`Walk` (sent p at each position it yields, a checked
    :class:`TargetRow`); the node at depth d reads the noise of position ``base + d``."""
    return _matching_walk(draft, lambda node, row: gumbel_max_token(row, noise, base + int(draft.depths[node])))


def verify_invariant(draft: Draft, target: TargetAt, noise: PositionNoise, base: int) -> Verification:
    """Drafter-invariant verification of a drafted tree (module docstring; docs/seeds.md).

    Args:
        draft: the drafted tree (any drafter: stochastic, deterministic or copied children).
        target: p per draft position (:data:`TargetAt`).
        noise: the row's :class:`stand_runtime.randomness.PositionNoise`.
        base: committed tokens before the draft's first drafted token (the root is token ``base - 1``).

    Returns:
        The accepted path and the emitted token: the tokens plain Gumbel-max decoding with ``noise``
        emits at positions ``base``, ``base + 1``, ... (so a seed fixes the output, whatever drafted it).

    Raises:
        StandError: p is not finite at a visited node; arguments of the wrong type.
    """
    _check_draft(draft, target, "target")
    if not isinstance(noise, PositionNoise):
        raise StandError(f"noise must be a PositionNoise (PositionNoise.seeded(seed)), not {type(noise).__name__}")
    return run_walk(gumbel_walk(draft, noise, int(base)), lambda node: checked_row(target(node), node))


def run_walk(walk: Walk, read: Callable[[int], object]) -> Verification:
    """Run ``walk`` to its end, sending it ``read(position)`` for each position it yields."""
    node = next(walk)
    while True:
        try:
            node = walk.send(read(node))
        except StopIteration as done:
            return done.value


def verify_sampling(draft: Draft, target: TargetAt, randomness: RandomStream) -> Verification:
    """Lossless sampling verification of a drafted tree (module docstring): at each node the outcome
    (child i accepted, or none) is drawn in one shot from :func:`acceptance_chain`'s probabilities, the
    same law as running the stages one by one.

    Args:
        draft: the drafted tree (tokens, q per node with children).
        target: p per draft position (:data:`TargetAt`), each summing to 1.
        randomness: fresh uniforms for the outcome at each node and for recovered/bonus samples.

    Raises:
        StandError: p is not finite at a visited node; arguments of the wrong type.
    """
    _check_draft(draft, target, "target", randomness, sampling=True)
    return run_walk(sampling_walk(draft, randomness), lambda node: checked_row(target(node), node))


def sampling_walk(draft: Draft, randomness: RandomStream) -> Walk:
    """:func:`verify_sampling` as a :data:`Walk` (sent p at each position, a checked :class:`TargetRow`)."""
    node, accepted = 0, []
    while True:
        row = yield node
        kids = draft.children[node]
        if not kids:
            return Verification(accepted, row.sample(randomness.uniform()), True)
        support, q, slots = node_draft(draft, node)
        if row.ids is None and int(support.max()) >= len(row.probs):
            raise StandError(f"draft token {int(support.max())} at node {node} is outside p's {len(row.probs)} entries")
        on_support = row.at(support)
        chain = acceptance_chain(on_support.tolist(), q, slots, stochastic=draft.stochastic and q is not None,
                                 outside=max(0.0, row.total - float(on_support.sum())),
                                 copied=[kid in draft.copied for kid in kids] if draft.copied else None)
        outcome = sample_index(np.array([*chain.accept, chain.none]), randomness.uniform())
        if outcome == len(kids):
            return Verification(accepted, row.sample_replaced(support, chain.residual, randomness.uniform()), False)
        accepted.append(kids[outcome])
        node = kids[outcome]


def node_draft(draft: Draft, node: int) -> tuple[np.ndarray, list[float] | None, list[int]]:
    """The draft distribution at ``node``: support ids ``[k]``, q on it (None when the drafts carry
    no probabilities) and each child's slot in the support, in drawing order."""
    kids = draft.children[node]
    if draft.draft_ids[node] is None:
        return np.asarray([draft.tokens[c] for c in kids], dtype=np.int64), None, list(range(len(kids)))
    return draft.draft_ids[node], draft.draft_probs[node].tolist(), [draft.slots[c] for c in kids]


EMPTY_RESIDUAL = 1e-6
"""A residual holding less than this fraction of the stage's mass counts as empty: rejecting then
has probability 0 up to float32 noise in p, and is treated as impossible (the child is accepted)."""


@dataclass(frozen=True)
class ChainOutcome:
    """The outcome probabilities at one node (see :func:`acceptance_chain`).

    Attributes:
        accept: ``[m]`` probability that child i (drawing order) is the accepted one.
        none: probability that every child is rejected; ``sum(accept) + none`` is 1 up to rounding,
            and ``none`` is exactly 0 when the final residual is empty.
        residual: ``[k]`` unnormalised residual weights at the support ids after every child was
            rejected (the weights elsewhere are p's own).
        outside: p's mass outside the support (unchanged by every stage).
    """

    accept: list[float]
    none: float
    residual: list[float]
    outside: float

    @property
    def residual_mass(self) -> float:
        """Unnormalised mass of the final residual distribution."""
        return sum(self.residual) + self.outside


def acceptance_chain(
    target_on_support: list[float], q: list[float] | None, slots: list[int], stochastic: bool,
    outside: float | None = None, copied: list[bool] | None = None,
) -> ChainOutcome:
    """Probability that each child is the accepted one, and the final residual: the stages of the
    verification rule (module docstring) run analytically. Only p on q's support changes between
    stages, so p enters as its values there plus the mass ``outside`` it.

    Args:
        target_on_support: ``[k]`` p at the support ids.
        q: ``[k]`` the draft distribution the children were drawn from (stochastic rule), or None.
        slots: support index of each child, in drawing order (``m <= k`` children).
        stochastic: True for recursive rejection sampling without replacement (Jeon et al. 2024),
            False for the deterministic-draft rule (q_i one-hot on the i-th child).
        outside: p's mass off the support; None = ``max(0, 1 - sum(target_on_support))``.
        copied: per child, True for a copied child (:class:`stand_runtime.trees.draft.Draft`, after
            every drawn one): its stage uses the deterministic-draft rule. None = none copied.
    """
    weights = [max(0.0, w) for w in target_on_support]
    outside = max(0.0, 1.0 - sum(weights)) if outside is None else outside
    total = sum(weights) + outside
    reach = 1.0  # probability that every earlier child was rejected
    accept: list[float] = []
    q = list(q) if q is not None else None
    for index, slot in enumerate(slots):
        if reach == 0.0:
            accept.append(0.0)
            continue
        target = weights[slot] / total if total > 0 else 0.0
        drawn = stochastic and not (copied is not None and copied[index])
        if drawn:
            ratio = min(1.0, target / q[slot]) if q[slot] > 0 else 0.0
            lowered = [max(w - q_x * total, 0.0) for w, q_x in zip(weights, q)]
        else:
            ratio = min(1.0, target)
            lowered = list(weights)
            lowered[slot] = 0.0
        remaining = sum(lowered) + outside
        if remaining <= EMPTY_RESIDUAL * total:  # nothing left to recover: rejection is impossible
            ratio = 1.0
        accept.append(reach * ratio)
        reach *= 1.0 - ratio
        if reach > 0.0:
            weights, total = lowered, remaining
        if drawn:
            q_total = sum(q) - q[slot]
            q[slot] = 0.0
            if q_total <= 0:
                break
            q = [q_x / q_total for q_x in q]
    accept += [0.0] * (len(slots) - len(accept))
    return ChainOutcome(accept, reach, weights, outside)
