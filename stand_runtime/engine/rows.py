"""What a row of decoding is given (:class:`RowSpec`) and how every engine path sets rows up
(:func:`make_rows`): prompt checked against the model, EOS and stop rule, the row's own random
stream, and the method's drafter over the row's memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..checks import check_bool, check_int
from ..drafters import Memory
from ..errors import StandError
from ..limits import MAX_ROWS
from ..method import Method
from ..sizing.session import SizingSession, default_session
from ..sizing.value import ValueRule
from ..randomness import RandomStream, check_seed
from ..target.model_facts import check_positions, default_eos_ids, vocab_size
from ..target.prompts import check_prompt, encode_prompt
from ..target.sampling import SamplingParams
from .decode_row import DecodeRow
from .stopping import StopRule, check_eos_ids, check_stop_strings


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
    if sizing is not None and not isinstance(sizing, SizingSession):
        raise StandError(f"sizing must be a SizingSession or None, not {type(sizing).__name__}")
    if not method.value_sized:
        return None
    session = default_session(model) if sizing is None else sizing
    session.check_target(model)
    return session.rule(method.tree.num_nodes, rows)


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
        drafter = method.drafter(spec.memory, randomness, spec.sampling, vocab, spec.seed, value)
        rows.append(DecodeRow(prompt, drafter, spec.sampling, randomness, stop_rule, on_step=on_step,
                              logprobs=spec.logprobs, memory=spec.memory))
    return rows
