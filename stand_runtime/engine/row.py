"""A row of decoding: what it is given (:class:`RowSpec`), its state (:class:`DecodeRow`: propose a draft,
then settle it against the target, engine-free) and how every engine path sets rows up (:func:`make_rows`:
prompt checked against the model, EOS and stop rule, the row's own random stream, the method's drafter
over the row's memory, the call's value rule from its sizing session).

Every engine drives the same per-sequence steps (docs/architecture.md §1.4):

1. :meth:`DecodeRow.propose`: the drafter drafts from the committed tokens (or a lone root);
2. the engine runs the draft through the target (one sequence, a padded batch of rows, or a recorded
   trace) and wraps what came back as a :class:`StepTarget`;
3. :meth:`DecodeRow.settle`: verification picks the accepted path plus one token (every row's walk at
   once, level by level: :func:`walk_rows`), the stop rule cuts it where plain decoding would stop,
   statistics are recorded and the drafter learns from the step.

The engine then keeps the KV entries of the root and the accepted nodes (``Settled.keep``). Keeping
verification, stopping and drafter feeding here means the single-sequence engine, the batched engine
and trace replay share one lossless path instead of copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..checks import check_bool, check_int
from ..drafters import Drafter, Memory
from ..drafters.feeds import LogitsFeed
from ..errors import StandError
from ..limits import MAX_ROWS
from ..method import Method
from ..randomness import PositionNoise, RandomStream, check_seed
from ..sizing.session import SizingSession, check_sizing, default_session
from ..sizing.value import ValueRule
from ..target.model_facts import check_positions, default_eos_ids, vocab_size
from ..target.prompts import check_prompt, encode_prompt
from ..target.sampling import SamplingParams, TargetRow, target_row, target_rows
from ..trees.draft import Draft, truncate_draft
from ..verify import Verification, Walk, checked_row, greedy_walk, gumbel_walk, run_walk, sampling_walk
from .metrics import DecodeStats, GenerationResult
from .stopping import StopRule, check_eos_ids, check_stop_strings

Lap = Callable[[str | None], None]
"""Closes a timing lap into a :class:`DecodeStats` bucket (``"verification_s"``, ...)."""


class StepTarget(LogitsFeed):
    """The target's output for one forwarded draft, read lazily by verification and the drafter
    (a :class:`stand_runtime.drafters.feeds.LogitsFeed`: the drafter reads its rows' top-k).

    Args:
        logits: ``[n, vocab]`` raw target logits of the draft's nodes (any float dtype and device);
            row i predicts the token after the path to node i.
        params: the target sampling distribution.
        precompute: compute every node's p (or argmax) at once, in one transfer to the host; None = on
            an accelerator. Off, only the nodes the walk (or the drafter) reads get theirs: what a CPU
            wants, and any device when the batched verifier (:mod:`stand_runtime.verify_batch`) verified.

    Attributes:
        rows: the p rows computed so far, by draft position (the drafter reuses them).
    """

    def __init__(self, logits: torch.Tensor, params: SamplingParams, precompute: bool | None = None) -> None:
        super().__init__(logits, params)
        self._batched = logits.device.type != "cpu" if precompute is None else precompute
        self._best: dict[int, int] = {}
        self._finite: dict[int, bool] = {}
        if self._batched:
            self._keep(range(logits.shape[0]), _maxima(logits) if params.greedy else target_rows(logits, params))

    def _keep(self, positions, computed) -> None:
        """Store what was computed at ``positions``: ``(argmax, finite)`` pairs (:func:`_maxima`) for greedy
        decoding, else :class:`stand_runtime.target.sampling.TargetRow` rows."""
        for position, value in zip(positions, computed):
            if self.params.greedy:
                self._best[position], self._finite[position] = value
            else:
                self.rows[position] = value

    @staticmethod
    def compute(wanted: Sequence[tuple["StepTarget", int]]) -> None:
        """Fill each lazy target's row at its draft position (p, :func:`stand_runtime.target.sampling.target_rows`,
        or greedy, the argmax) in one batched call per sampling distribution, skipping those already
        there. On a CPU one ``[n, vocab]`` call costs about what one row's does. Pure computation: no draw reads it.

        Args:
            wanted: ``(target, position)`` pairs, at most one per target and position.
        """
        groups: dict[SamplingParams, list[tuple[StepTarget, int]]] = {}
        for target, position in wanted:
            if not target._batched and position not in (target._best if target.params.greedy else target.rows):
                groups.setdefault(target.params, []).append((target, position))
        for params, group in groups.items():
            stacked = torch.stack([target.logits[position] for target, position in group])  # [n, vocab]
            computed = _maxima(stacked) if params.greedy else target_rows(stacked, params)
            for (target, position), value in zip(group, computed):
                target._keep((position,), (value,))

    def argmax_at(self, position: int) -> int:
        """The argmax token of the logits at draft ``position``.

        Raises:
            StandError: the logits there are not finite.
        """
        if position not in self._best:
            (self._best[position], self._finite[position]), = _maxima(self.logits[position][None])
        if not self._finite[position]:
            raise StandError(f"the target's logits at draft node {position} are not finite (NaN or inf)")
        return self._best[position]

    def target_at(self, position: int) -> TargetRow:
        """p at draft ``position`` (:func:`stand_runtime.target.sampling.target_row`), computed once."""
        if position not in self.rows:
            self.rows[position] = target_row(self.logits[position], self.params)
        return self.rows[position]


def walk_rows(walks: Sequence[Walk], targets: Sequence[StepTarget]) -> list[Verification]:
    """Each row's :class:`stand_runtime.verify.Verification`: its walk (:meth:`DecodeRow.walk`:
    greedy, drafter-invariant or recursive rejection) run to its end, equal to running it alone.

    A walk (:data:`stand_runtime.verify.Walk`) visits one draft position per level, root first, and
    reads p (or the argmax) there. Walking the rows one after another computes one target row per call;
    on a CPU such a call costs about what one over the whole batch does (:meth:`StepTarget.compute`),
    so here every row's walk takes one level at a time and the positions a level visits are computed
    together. Each walk draws from its own row's stream in its own order, so the verifications are
    those of the walks run one by one (docs/algorithms.md §4.7; tests/lossless/test_walks.py).

    Args:
        walks: one fresh walk per row, of the draft forwarded.
        targets: the forward's output, one :class:`StepTarget` per row (its ``params`` say whether the
            walk reads the argmax or p).

    Raises:
        StandError: p (or the logits) not finite at a visited position.
    """
    results: list[Verification | None] = [None] * len(walks)
    pending = {b: next(walk) for b, walk in enumerate(walks)}  # row -> the position its walk reads next
    while pending:
        StepTarget.compute([(targets[b], position) for b, position in pending.items()])
        advanced = {}
        for b, position in pending.items():
            target = targets[b]
            read = (target.argmax_at(position) if target.params.greedy
                    else checked_row(target.target_at(position), position))
            try:
                advanced[b] = walks[b].send(read)
            except StopIteration as done:
                results[b] = done.value
        pending = advanced
    return results


def _maxima(logits: torch.Tensor) -> list[tuple[int, bool]]:
    """Per row of ``[n, vocab]`` logits its argmax (the first index on ties) and whether its maximum is
    finite (False for NaN or inf logits), on the host."""
    maxima = torch.max(logits, dim=-1)
    return list(zip(maxima.indices.tolist(), torch.isfinite(maxima.values).tolist()))


@dataclass(frozen=True)
class Settled:
    """What one settled step did.

    Attributes:
        tokens: the tokens committed (accepted run + one token, cut where plain decoding stops).
        keep: draft positions whose KV entries belong to the sequence now, root first
            (``[0, *accepted]``); empty when the row finished (its cache is no longer needed).
        verification: the verification outcome before the cut.
        draft: the draft the step verified.
    """

    tokens: list[int]
    keep: list[int]
    verification: Verification
    draft: Draft


class DecodeRow:
    """The decoding state of one sequence: committed tokens, drafter, randomness, stop rule, stats.

    Args:
        prompt: the prompt's token ids (its last token is the first root).
        drafter: the drafting method, or None for plain decoding (lone roots).
        params: the target sampling distribution.
        randomness: the row's own random stream (drafting noise, acceptance tests, samples: recursive
            rejection verification).
        noise: the row's position noise (drafter-invariant verification, :func:`stand_runtime.verify.verify_invariant`:
            drafting noise and the target's samples); None = recursive rejection with ``randomness``.
        stop_rule: EOS ids, token budget and stop strings.
        on_step: optional callback receiving each step's :class:`Settled` (draft, verification,
            committed tokens) once the step is committed.
        lap: optional timing callback (:data:`Lap`); None records no time.
        stats: the statistics to record into (None = new ones).
        logprobs: record each generated token's log-probability under the target's raw logits
            (temperature 1, no truncation) in :attr:`logprobs`.
        memory: the drafter memory the row shares with other rows (None: its own or none); a batch
            feeds a prompt to each memory once.

    Attributes:
        committed: prompt + generated tokens; ``committed[-1]`` is the next root.
        defer_feed: when True (set by the engine), :meth:`settle` leaves the drafter's store update
            in ``pending_feed`` (:meth:`StandDrafter.feed_request`) for the engine to merge with its
            other rows' (:func:`stand_runtime.engine.loop.feed_rows`).
        generated: the generated tokens.
        finish_reason: None while running, then ``"eos"``, ``"stop"`` or ``"length"``.
        stats: the row's :class:`DecodeStats`.
        logprobs: per generated token its natural-log probability (when asked for), else None.
    """

    def __init__(self, prompt: list[int], drafter: Drafter | None, params: SamplingParams,
                 randomness: RandomStream, stop_rule: StopRule, on_step=None, lap: Lap | None = None,
                 stats: DecodeStats | None = None, logprobs: bool = False, memory=None,
                 noise: PositionNoise | None = None) -> None:
        self.drafter = drafter
        self.noise = noise
        self.memory = memory  # the drafter memory the row shares with others (a batch feeds it a prompt once)
        self.params = params
        self.randomness = randomness
        self.stop_rule = stop_rule
        self.on_step = on_step
        self.lap = lap or (lambda bucket: None)
        self.committed: list[int] = list(prompt)
        self.generated: list[int] = []
        self.finish_reason: str | None = None
        self.stats = stats if stats is not None else DecodeStats()
        self.stats.prompt_tokens = len(prompt)
        self.logprobs: list[float] | None = [] if logprobs else None
        self.defer_feed = False  # set by a batch engine whose drafter feeds in batch (loop.py)
        self.pending_feed = None

    @property
    def remaining(self) -> int:
        """Tokens left in the budget."""
        return self.stop_rule.max_new_tokens - len(self.generated)

    def propose(self, max_nodes: int | None = None) -> Draft:
        """This step's draft: the drafter's tree (no deeper than the budget allows), or a lone root.

        Args:
            max_nodes: optional cap on drafted nodes (root excluded); the draft is cut to its first nodes
                (a batch shares a token budget per forward). None = the drafter's own size.
        """
        if self.wants_draft(max_nodes):
            return self.proposed(self.drafter.draft(self.committed, self.remaining - 1), max_nodes)
        return self.proposed(Draft.root_only(self.committed[-1]), max_nodes)

    def wants_draft(self, max_nodes: int | None = None) -> bool:
        """True when this step drafts (a drafter, more than one token of the budget left, a cap above 0);
        the drafter then drafts no deeper than ``remaining - 1``."""
        return self.drafter is not None and self.remaining > 1 and max_nodes != 0

    def proposed(self, draft: Draft, max_nodes: int | None = None) -> Draft:
        """The drafter's ``draft`` cut to ``max_nodes`` (see :meth:`propose`), the drafting lap closed
        (a batch drafts its native rows in one call, :func:`stand_runtime.engine.loop.propose_rows`).
        A draft the batch allocator still sizes (its copy chain pending) is capped there instead
        (:class:`stand_runtime.sizing.allocation.BatchAllocator`): cutting it here would drop the chain."""
        if max_nodes is not None and draft.num_nodes > max_nodes and not draft.pending_chain:
            draft = truncate_draft(draft, max_nodes)
        self.lap("drafting_s")
        return draft

    def settle(self, draft: Draft, target: StepTarget, verification: Verification | None = None) -> Settled:
        """Verify ``draft`` against ``target``, commit the emitted tokens and feed the drafter.

        ``target`` is a :class:`StepTarget` or any object with its interface: ``argmax_at`` (greedy),
        ``target_at`` (sampling) and the :class:`stand_runtime.drafters.feeds.TargetFeed` methods (e.g. a
        recorded trace's :class:`stand_runtime.engine.trace_replay.TraceTarget`). ``verification``, when
        given, is this draft's outcome already computed (the batched verifier's, drawn from this row's
        stream); stopping, statistics and drafter feeding are then the same as after the walk.

        Raises:
            StandError: non-finite target logits at a visited node.
        """
        if verification is None:
            verification = run_walk(self.walk(draft), target.argmax_at if self.params.greedy
                                    else lambda node: checked_row(target.target_at(node), node))
        self.lap("verification_s")
        proposed = [draft.tokens[p] for p in verification.accepted] + [verification.token]
        new_tokens, self.finish_reason = self.stop_rule.cut(self.generated, proposed)
        accepted = verification.accepted[: len(new_tokens)]
        if self.logprobs is not None:  # token j was predicted at the node before it on the path
            for position, token in zip([0, *accepted], new_tokens):
                row = target.logits[position].float()
                self.logprobs.append(float(row[token] - torch.logsumexp(row, dim=-1)))
        self.stats.record_step(len(new_tokens), draft.num_nodes, len(verification.accepted), verification.bonus)
        if self.drafter is not None and self.defer_feed:  # the engine merges it with its other rows'
            self.pending_feed = self.drafter.feed_request(self.committed, draft, accepted, target)
        elif self.drafter is not None:
            self.drafter.observe_step(self.committed, draft, accepted, target)
        self.committed += new_tokens
        self.generated += new_tokens
        keep = [0, *accepted] if self.finish_reason is None else []
        settled = Settled(new_tokens, keep, verification, draft)
        if self.on_step is not None:
            self.on_step(settled)
        return settled

    def walk(self, draft: Draft) -> Walk:
        """This step's verification of ``draft`` as a :data:`stand_runtime.verify.Walk` (what :meth:`settle`
        computes when not given a verification): greedy, drafter-invariant (the row has position
        noise) or recursive rejection sampling."""
        if self.params.greedy:
            return greedy_walk(draft)
        if self.noise is not None:
            return gumbel_walk(draft, self.noise, len(self.committed))
        return sampling_walk(draft, self.randomness)

    def finish_stats(self) -> DecodeStats:
        """The statistics with the drafter's memory summary (call once, at the end)."""
        stats = self.stats
        if self.drafter is not None:
            stats.store = self.drafter.stats()
            stats.diagnostics_s = self.drafter.diagnostics_s
            stats.bookkeeping_s -= stats.diagnostics_s
        return stats


    def result(self) -> GenerationResult:
        """The row's tokens, text, finish reason and statistics (call once, when it finished)."""
        text = self.stop_rule.text(self.generated, self.finish_reason)
        return GenerationResult(tokens=self.generated, text=text, stats=self.finish_stats(),
                                finish_reason=self.finish_reason, logprobs=self.logprobs)


def learn_rows(rows, prompt: list[int]) -> None:
    """Register the committed tokens of each of ``rows`` that starts from ``prompt`` (just fed to its
    drafter) with the drafter's memory, where the drafter keeps such a ledger
    (:mod:`stand_runtime.store.learned`: a later prompt that repeats them is not fed again)."""
    for row in rows:
        if row.drafter is not None and row.committed == prompt:
            row.drafter.learn_sequence(row.committed)


def check_budget(max_new_tokens) -> int:
    """``max_new_tokens`` as an int >= 1 (numpy integers accepted; bools and floats refused).

    Raises:
        StandError: anything else.
    """
    return check_int("max_new_tokens", max_new_tokens, 1)


@dataclass(frozen=True)
class RowSpec:
    """One row of decoding (frozen: what needs no model checked when made, never changed after).

    Attributes:
        prompt: token ids (non-empty; inside the vocabulary, checked by :func:`make_rows`), or text
            (through the chat template; needs a tokenizer).
        sampling: the row's target sampling distribution.
        seed: the row's seed (None = nondeterministic).
        max_new_tokens: the row's token budget.
        memory: the drafter memory the row drafts from and feeds (rows given the same object share
            it online); None = a fresh one for this row.
        stop: strings that end the row once its text contains one.
        eos_token_ids: token ids that end the row; None = the tokenizer's and the model's EOS ids.
        logprobs: record each generated token's log-probability (``GenerationResult.logprobs``).
    """

    prompt: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    max_new_tokens: int = 256
    memory: Memory | None = None
    stop: tuple[str, ...] = ()
    eos_token_ids: tuple[int, ...] | None = None
    logprobs: bool = False

    def __post_init__(self) -> None:
        """Checks every field that needs no model (the vocabulary and context are checked by
        :func:`make_rows`); normalises ``stop`` (a lone string is one stop string) and numpy scalars.

        Raises:
            StandError: an empty prompt or one of another type, a sampling that is not a
                :class:`SamplingParams`, a bad seed, budget, stop strings, EOS ids or a non-bool ``logprobs``.
        """
        check_prompt(self.prompt)
        check_sampling(self.sampling, "a row's sampling")
        check_seed(self.seed)
        fields = {"seed": None if self.seed is None else int(self.seed),
                  "max_new_tokens": check_budget(self.max_new_tokens), "stop": check_stop_strings(self.stop),
                  "eos_token_ids": None if self.eos_token_ids is None else tuple(check_eos_ids(self.eos_token_ids)),
                  "logprobs": check_bool("logprobs", self.logprobs)}
        for name, value in fields.items():
            object.__setattr__(self, name, value)


def check_sampling(sampling, name: str = "sampling") -> SamplingParams:
    """``sampling`` if it is a :class:`SamplingParams`.

    Raises:
        StandError: anything else (a dict, a number, ...).
    """
    if not isinstance(sampling, SamplingParams):
        raise StandError(f"{name} must be a SamplingParams (e.g. SamplingParams(temperature=0)), "
                         f"got {type(sampling).__name__} {sampling!r}")
    return sampling


def check_rows(rows) -> None:
    """Raises StandError unless ``rows`` is a non-empty list of at most :data:`MAX_ROWS` RowSpec."""
    if isinstance(rows, RowSpec) or not isinstance(rows, (list, tuple)) or not rows:
        raise StandError("decode_rows takes a non-empty list of RowSpec")
    if len(rows) > MAX_ROWS:
        raise StandError(f"{len(rows)} rows in one batch; at most {MAX_ROWS} (decode them in batches)")
    for index, spec in enumerate(rows):
        if not isinstance(spec, RowSpec):
            raise StandError(f"row {index} is not a RowSpec (its type is {type(spec).__name__})")


def sizing_rule(model, method: Method, sizing: SizingSession | None, rows: int) -> ValueRule | None:
    """The value rule of one decoding call of ``method`` over ``rows`` rows per forward: from ``sizing``
    (None = the model's default session, :func:`stand_runtime.sizing.session.default_session`) for a
    value-sized tree, else None.

    Raises:
        StandError: ``sizing`` not a SizingSession, or one measured for another target.
    """
    check_sizing(sizing)
    if not method.value_sized:
        return None
    session = default_session(model) if sizing is None else sizing
    session.check_target(model)
    return session.rule(method.tree.num_nodes, rows, batch_allocated=method.ablation.allocation == "batch")


def make_rows(model, tokenizer, specs: Sequence[RowSpec], method: Method, on_step=None,
              value: ValueRule | None = None) -> list[DecodeRow]:
    """One :class:`DecodeRow` per spec, every check made before any forward; ``value``: the call's
    value rule (:func:`sizing_rule`), shared by its rows' drafters.

    Raises:
        StandError: a prompt outside the vocabulary, a prompt plus budget beyond the model's context,
            EOS ids outside the vocabulary, a memory the method cannot use, a method sized for
            another target (:meth:`Method.check_target`).
    """
    vocab = vocab_size(model)
    method.check_target(model)
    prepared = []
    for spec in specs:
        prompt = encode_prompt(tokenizer, spec.prompt, vocab)
        check_positions(model, len(prompt), spec.max_new_tokens)
        method.check_memory(spec.memory, vocab)
        eos = check_eos_ids(spec.eos_token_ids, vocab) if spec.eos_token_ids is not None \
            else default_eos_ids(model, tokenizer)
        prepared.append((prompt, StopRule(eos, spec.max_new_tokens, spec.stop, tokenizer)))
    rows = []
    for spec, (prompt, stop_rule) in zip(specs, prepared):
        randomness = RandomStream.seeded(spec.seed)
        noise = PositionNoise.seeded(spec.seed) if method.verification == "invariant" else None
        drafter = method.drafter(spec.memory, randomness if noise is None else noise, spec.sampling, vocab, spec.seed,
                                 value)
        rows.append(DecodeRow(prompt, drafter, spec.sampling, randomness, stop_rule, on_step=on_step,
                              logprobs=spec.logprobs, memory=spec.memory, noise=noise))
    return rows
