"""Replay calibration (ours; docs/trees.md §6.3): per-node acceptance estimated from sampled trajectories.

Sample trajectories by batched plain decoding, recording p at every position (a ``record_probs``
request to a :class:`stand_runtime.DecodingBackend`), then replay the drafter along each trajectory
(:func:`replay_trajectory`). From a step start, with the n-gram store as it was there, walk the
candidate tree: at a node reached with weight w, draft its children c_1..c_m by the same child-choice
rule the engine uses (:func:`stand_runtime.store.gumbel.choose_children`), compute each child's acceptance
probability a_i under the verification rule (:func:`stand_runtime.verify.acceptance_chain`), add
``w * a_i`` to alpha(child_i); if some c_j is the trajectory's next token y, descend into it with
weight ``w * a_j / p(y)``, else stop (``E_y[1{c_j = y} a_j / p(y)] = a_j`` level by level). Its
cost grows with the trajectory length, not with the candidate's size.

Step starts are not every position. Decoding starts a step only where the previous one ended, and
easy stretches of text are covered by few long steps, so averaging over *every* start position
overweights them (an inspection paradox: tau overestimated). The replay instead walks a
few independent step sequences along the trajectory (``segmentations``). From a step start it walks
the candidate tree as above, and also weighs each way the step can end on the trajectory: at depth d
by recovering y after every child was rejected, ``w_d (1 - sum a) residual(y) / p(y)``, or with a
bonus token where nothing was drafted, ``w_d``. The next start is drawn in proportion to those
weights (greedy decoding makes them 0/1, so the replay then takes exactly the steps decoding takes),
so that alpha-hat is "accepted per step", the quantity direct calibration measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stand_runtime import DraftTree, NGramStore, RecordedDistributions, StandError
from stand_runtime.checks import check_int
from stand_runtime.store.gumbel import choose_children
from stand_runtime.randomness import RandomStream
from stand_runtime.target.sampling import sample_index
from stand_runtime.verify import acceptance_chain


def _check_replay(prompt, tokens, recorded: RecordedDistributions, tree: DraftTree, alpha_sum, segmentations) -> int:
    """:func:`replay_trajectory`'s inputs checked (StandError as it says); ``segmentations`` as an int."""
    if not len(prompt) or not len(tokens):
        raise StandError(f"a replay needs a prompt and tokens, got {len(prompt)} and {len(tokens)} tokens")
    rows = len(prompt) - 1 + len(tokens)
    if len(recorded.store_ids) < rows or len(recorded.target_ids) < len(tokens):
        raise StandError(f"the recorded distributions cover {len(recorded.store_ids)} store rows and "
                         f"{len(recorded.target_ids)} target rows, fewer than {rows} and {len(tokens)}")
    if np.shape(alpha_sum) != (tree.num_nodes + 1,):
        raise StandError(f"alpha_sum must be [{tree.num_nodes + 1}] (the root and every node), got shape "
                         f"{list(np.shape(alpha_sum))}")
    return check_int("segmentations", segmentations, 1)


def replay_trajectory(
    prompt: list[int],
    tokens: list[int],
    recorded: RecordedDistributions,
    tree: DraftTree,
    store: NGramStore,
    randomness: RandomStream,
    alpha_sum: np.ndarray,
    *,
    stochastic: bool = True,
    budget: int | None = None,
    segmentations: int = 4,
) -> int:
    """Replay the drafter along one trajectory (``prompt`` and generated ``tokens``, ids), adding each
    visited step start's acceptance to ``alpha_sum`` (``[N + 1]``, in place; module docstring); returns
    the steps replayed, so alpha-hat = accepted per step.

    Args:
        recorded: the target's distributions along it (a ``record_probs`` completion's).
        store: the n-gram store as the engine would hold it, fed here as decoding feeds it.
        randomness: Gumbel noise for stochastic drafting and uniforms for drawing step ends.
        stochastic: Gumbel-Top-K drafts and recursive rejection sampling; False: q's top-m and the
            deterministic-draft rule.
        budget: the engine's max_new_tokens (it drafts no deeper than the tokens left); None: the
            trajectory's length.
        segmentations: independent step sequences walked per trajectory (variance reduction).

    Raises:
        StandError: an empty prompt or trajectory, recorded rows that do not cover it
            (at least ``len(prompt) - 1 + len(tokens)`` store rows and ``len(tokens)`` target rows), an
            ``alpha_sum`` that is not ``[N + 1]``, or segmentations not an int >= 1.
    """
    segmentations = _check_replay(prompt, tokens, recorded, tree, alpha_sum, segmentations)
    sequence = list(prompt) + list(tokens)
    prompt_len = len(prompt)
    store.update_sequence(sequence, range(prompt_len - 1), recorded.store_ids, recorded.store_probs)
    replay = _StepReplay(tree, store, tokens, recorded, randomness, alpha_sum, stochastic,
                         len(tokens) if budget is None else budget)
    next_starts = [0] * segmentations
    steps = 0
    for start in range(len(tokens)):
        position = prompt_len - 1 + start
        for walker, walker_start in enumerate(next_starts):
            if walker_start != start:
                continue
            steps += 1
            context = tuple(sequence[max(0, position + 1 - store.max_n) : position + 1])
            next_starts[walker] = _draw_end(replay.step(start, context), start + 1, randomness.uniform())
        store.update_sequence(sequence, [position], recorded.store_ids[position : position + 1], recorded.store_probs[position : position + 1])
    return steps


@dataclass
class _StepReplay:
    """One trajectory's replayed steps: :meth:`step` walks the candidate tree from a step start."""

    tree: DraftTree
    store: NGramStore
    generated: list[int]
    recorded: RecordedDistributions
    randomness: RandomStream
    alpha_sum: np.ndarray
    stochastic: bool
    budget: int
    _targets: dict[int, dict[int, float]] = field(default_factory=dict)

    def target_at(self, index: int) -> dict[int, float]:
        """p of the ``index``-th generated token as ``{token: probability}`` (sparse; built once)."""
        table = self._targets.get(index)
        if table is None:
            table = dict(zip(self.recorded.target_ids[index].tolist(), self.recorded.target_probs[index].tolist()))
            self._targets[index] = table
        return table

    def step(self, start: int, context: tuple[int, ...]) -> dict[int, float]:
        """Walk the candidate tree from the step drafting generated token ``start`` after ``context``:
        add each drafted child's weighted acceptance to ``alpha_sum``, and return the weight of each
        way the step can end (the next step's start → weight; module docstring)."""
        tree, generated, stochastic, max_n = self.tree, self.generated, self.stochastic, self.store.max_n
        ends: dict[int, float] = {}
        node, weight, index = 0, 1.0, start
        while index < len(generated):
            kids = tree.children[node] if index < self.budget - 1 else ()
            entry = self.store.lookup(context) if kids else None
            if entry is None:  # nothing drafted here: the step ends with a bonus token
                ends[index + 1] = ends.get(index + 1, 0.0) + weight
                break
            slots = choose_children(entry.log_q, min(len(kids), len(entry.id_list)), self.randomness if stochastic else None,
                                    index - start, entry.ids)
            target = self.target_at(index)
            on_support = [target.get(token, 0.0) for token in entry.id_list]
            chain = acceptance_chain(on_support, entry.q.tolist() if stochastic else None, slots, stochastic)
            accept = chain.accept
            for child, prob in zip(kids, accept):
                self.alpha_sum[child] += weight * prob
            next_token = generated[index]
            p_next = target.get(next_token, 0.0)
            if p_next <= 0.0:
                break
            rejected = chain.none  # the step may end here: y recovered from the residual
            residual_total = chain.residual_mass
            if rejected > 0.0 and residual_total > 0.0:
                slot_of = entry.id_list.index(next_token) if next_token in entry.id_list else None
                residual_y = chain.residual[slot_of] if slot_of is not None else p_next
                ends[index + 1] = ends.get(index + 1, 0.0) + weight * rejected * residual_y / residual_total / p_next
            match = next((i for i, slot in enumerate(slots) if entry.id_list[slot] == next_token), None)
            if match is None or accept[match] <= 0.0:
                break
            weight *= accept[match] / p_next
            node = kids[match]
            context = (context + (next_token,))[-max_n:]
            index += 1
        return ends


def _draw_end(ends: dict[int, float], fallback: int, uniform: float) -> int:
    """Draw where the replayed step ends, with probability proportional to its weight."""
    if sum(ends.values()) <= 0.0:
        return fallback
    order = sorted(ends)
    return order[sample_index(np.array([ends[end] for end in order]), uniform)]
