"""vLLM's rejection sampler on the CPU platform with its draft rows verified in a few passes (speed, lossless).

vLLM 0.32's ``RejectionSampler.forward`` does whole-vocabulary work on every draft row: it clones the
rows' logits (for logprobs even when none are asked for), scales them, cuts top-p, takes the softmax
of every row and draws recovery noise (timed by ``benchmarks/bench_rejection.py``).
:func:`rejection_forward` gathers the draft rows once and scales them in place; the top-p cut gives
each row's normaliser, p is read only at the drafted tokens for the accept test, and the residual is
formed only at each request's first rejected position, the only one a step uses. The rule is
speculative sampling's (Leviathan et al., 2023, §2.3; Chen et al., 2023, Algorithm 2) with vLLM's test
``q(x) > 0 and p(x) / q(x) >= u`` on vLLM's uniforms (``generate_uniform_probs``); at the first
rejection a token is drawn from max(p - q, 0) by an exponential race; when every draft is kept
vLLM's sampler draws the bonus token from p. p is vLLM's (logits processors, temperature, top-p).
The output is p at every position whatever q is (``tests/runtime/vllm/test_vllm_rejection.py``, by
chi-square); the tokens differ from vLLM's own for the same seed (other draws).

Only the common case takes this path: CPU float32 logits, every request sampled (no greedy one), no
top-k, no logprobs, no synthetic acceptance; any other step goes to vLLM's own ``forward``
(:data:`stand_runtime.vllm.cpu032.cpu_sampling.VLLM_ORIGINALS`). ``STAND_VLLM_FAST_SAMPLING=0`` keeps vLLM's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ...target.sampling import logits_nucleus
from . import nuclei
from .cpu_sampling import VLLM_ORIGINALS, finish_native_cut, top_p_by_probe

FORWARD = "RejectionSampler.forward"
"""Key of vLLM's own ``RejectionSampler.forward`` in :data:`~stand_runtime.vllm.cpu032.cpu_sampling.VLLM_ORIGINALS`."""


def takes_fast_path(sampler, metadata, draft_probs: torch.Tensor | None, logits: torch.Tensor,
                    sampling_metadata) -> bool:
    """True when :func:`rejection_forward` verifies this step itself (the common case of the module
    docstring; q, if given, float32 and contiguous), else vLLM's ``forward`` does."""
    return (logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.dim() == 2
            and bool(sampling_metadata.all_random) and sampling_metadata.temperature is not None
            and sampling_metadata.top_k is None and sampling_metadata.max_num_logprobs is None
            and not sampling_metadata.logprob_token_ids and not getattr(sampler, "synthetic_mode", False)
            and (draft_probs is None or (draft_probs.dtype == torch.float32 and draft_probs.is_contiguous()
                                         and draft_probs.dim() == 2)))


def rejection_forward(self, metadata, draft_probs: torch.Tensor | None, logits: torch.Tensor, sampling_metadata):
    """vLLM's ``RejectionSampler.forward`` (same arguments and result) for :func:`takes_fast_path`'s steps.

    Args:
        self: vLLM's ``RejectionSampler`` (its ``sampler`` samples the bonus rows, its
            ``apply_logits_processors`` is applied to the draft rows).
        metadata: vLLM's ``SpecDecodeMetadata`` (draft token ids ``[num_tokens]`` int32, per-request
            counts, the draft and bonus rows of ``logits``).
        draft_probs: ``[num_tokens, vocab]`` float32 q of each draft token, or None (drafts taken as
            deterministic: q one-hot).
        logits: ``[num_tokens + requests, vocab]`` float32 target logits; read, not changed (the STAND
            proposer reads them after the step).
        sampling_metadata: vLLM's ``SamplingMetadata``.

    Returns:
        vLLM's ``SamplerOutput``: ``sampled_token_ids`` ``[requests, max_spec_len + 1]`` int32, the
        kept drafts, then the recovered or bonus token, then -1 (vLLM's placeholder); no logprobs.
    """
    if not takes_fast_path(self, metadata, draft_probs, logits, sampling_metadata):
        return VLLM_ORIGINALS[FORWARD](self, metadata, draft_probs, logits, sampling_metadata)
    from vllm.v1.outputs import SamplerOutput

    bonus = self.sampler(logits=logits[metadata.bonus_logits_indices], sampling_metadata=sampling_metadata,
                         predict_bonus_token=True).sampled_token_ids  # [requests, 1] int32
    counts = list(metadata.num_draft_tokens)
    if metadata.draft_token_ids.shape[0] == 0:
        return SamplerOutput(sampled_token_ids=bonus, logprobs_tensors=None)
    target = logits[metadata.target_logits_indices]  # [num_tokens, vocab], a copy: scaled and cut in place
    target = self.apply_logits_processors(target, sampling_metadata, metadata)
    per_row = torch.tensor(counts)
    target.div_(sampling_metadata.temperature.repeat_interleave(per_row)[:, None])
    top_p = None if sampling_metadata.top_p is None else sampling_metadata.top_p.repeat_interleave(per_row)
    rows = cut_rows(target, top_p)
    ids = metadata.draft_token_ids.long()
    kept = accepted(target, rows.norm, ids, draft_probs, counts, sampling_metadata.generators)
    return SamplerOutput(sampled_token_ids=assemble(target, rows, ids, draft_probs, counts, kept, bonus,
                                                    sampling_metadata.generators), logprobs_tensors=None)


class CutRows(NamedTuple):
    """What :func:`cut_rows` found.

    Attributes:
        norm: ``[n]`` float32 with p(x) = exp(target[x] - norm): the log of each nucleus's sum of
            exponentials.
        ids: ``[n, w]`` int64 each row's most likely tokens, its whole nucleus where ``whole``
            (the native cut's; None when it did not serve).
        whole: ``[n]`` bool, rows whose nucleus lies inside ``ids`` (None with ``ids``).
    """

    norm: torch.Tensor
    ids: torch.Tensor | None = None
    whole: torch.Tensor | None = None


def cut_rows(target: torch.Tensor, top_p: torch.Tensor | None) -> CutRows:
    """Cut each row of ``target`` (``[n, vocab]`` float32 logits after temperature) to its top-p
    nucleus (``top_p``: ``[n]`` or None, no cut), in place, -inf outside it; returns :class:`CutRows`.
    The cut is recorded while a :func:`stand_runtime.vllm.cpu032.nuclei.recording` is open."""
    cut = None if top_p is None else top_p < 1.0
    if cut is None or not bool(cut.any()):
        wanted = nuclei.recording_k()
        if wanted:
            nuclei.record(nuclei.NucleusCall.unknown(target.shape[0], wanted))
        return CutRows(torch.logsumexp(target, dim=-1))
    native = logits_nucleus(target, top_p, mask=True)
    if native is None:  # the torch cut: mask (and record), then the normaliser of what is left
        top_p_by_probe(target, None, top_p)
        return CutRows(torch.logsumexp(target, dim=-1))
    finish_native_cut(target, top_p, cut, native, nuclei.recording_k())
    norm = native.log_total[:, 0] + native.mass.log()
    other = ~cut | native.found.wide  # rows not cut (p >= 1) or cut by torch: their sum over what is left
    if bool(other.any()):
        norm[other] = torch.logsumexp(target[other], dim=-1)
    values = native.found.values
    return CutRows(norm, native.found.ids, ~other & (values[:, -1] <= 0))


def accepted(target: torch.Tensor, norm: torch.Tensor, ids: torch.Tensor, draft_probs: torch.Tensor | None,
             counts: list[int], generators: dict) -> np.ndarray:
    """Speculative sampling's test of every draft token: ``q(x) > 0 and p(x) / q(x) >= u`` with vLLM's
    uniforms ``u`` (float64; seeded requests from their generators).

    Args:
        target, norm: the cut rows and normalisers of :func:`cut_rows` (p = exp(target - norm)).
        ids: ``[num_tokens]`` int64 draft tokens.
        draft_probs: ``[num_tokens, vocab]`` float32 q, or None (q(x) = 1).
        counts: draft tokens per request, in row order.
        generators: request index → ``torch.Generator`` (vLLM's ``sampling_metadata.generators``).

    Returns:
        ``[num_tokens]`` bool on the host.
    """
    from vllm.v1.sample.rejection_sampler import generate_uniform_probs

    rows = torch.arange(ids.shape[0])
    p = torch.exp(target[rows, ids] - norm).double()
    uniform = generate_uniform_probs(ids.shape[0], counts, generators, target.device)
    if draft_probs is None:
        return (p >= uniform).numpy()
    q = draft_probs[rows, ids].double()
    return ((q > 0) & (p >= uniform * q)).numpy()  # p / q >= u for q > 0, without the division


def assemble(target: torch.Tensor, rows: CutRows, ids: torch.Tensor, draft_probs: torch.Tensor | None,
             counts: list[int], kept: np.ndarray, bonus: torch.Tensor, generators: dict) -> torch.Tensor:
    """The step's output rows: each request's kept prefix of drafts, then at its first rejection a
    token recovered from the residual (:func:`recovered`), or after all its drafts its bonus token.

    Args:
        target, rows: the cut draft rows and :func:`cut_rows`' result.
        ids: ``[num_tokens]`` int64 draft tokens; ``draft_probs``: their q or None.
        counts: draft tokens per request; ``kept``: :func:`accepted`'s test per draft token.
        bonus: ``[requests, 1]`` int32 bonus tokens; ``generators``: vLLM's, by request index.

    Returns:
        ``[requests, max(counts) + 1]`` int32, -1 past each request's tokens.
    """
    out = np.full((len(counts), max(counts) + 1), -1, dtype=np.int32)
    drafts, bonus_ids = ids.numpy(), bonus[:, 0].numpy()
    rejected: list[tuple[int, int, int]] = []  # (request, its row of the first rejection, tokens kept)
    start = 0
    for request, count in enumerate(counts):
        run = kept[start:start + count]
        keep = count if bool(run.all()) else int(run.argmin())
        out[request, :keep] = drafts[start:start + keep]
        if keep < count:
            rejected.append((request, start + keep, keep))
        else:
            out[request, count] = bonus_ids[request]
        start += count
    if rejected:
        at = torch.tensor([row for _, row, _ in rejected])
        tokens = recovered(target, rows, at, ids, draft_probs, [generators.get(request) for request, _, _ in rejected])
        for (request, _, keep), token in zip(rejected, tokens.tolist()):
            out[request, keep] = token
    return torch.from_numpy(out)


def recovered(target: torch.Tensor, rows: CutRows, at: torch.Tensor, ids: torch.Tensor,
              draft_probs: torch.Tensor | None, generators: list) -> torch.Tensor:
    """One token from the residual max(p - q, 0) of each draft row ``at`` (Leviathan et al., 2023,
    §2.3): ``argmax(residual / E)``, E ~ Exp(1) (from the row's own generator where not None). A row
    whose whole nucleus the cut listed (``rows.whole``) is raced over those tokens alone, the others
    over the vocabulary; a row whose residual is 0 everywhere (p = q up to rounding) draws from p.

    Args:
        target, rows: the cut draft rows and :func:`cut_rows`' result.
        at: ``[r]`` int64 rows of ``target`` to recover at.
        ids: ``[num_tokens]`` int64 draft tokens; ``draft_probs``: ``[num_tokens, vocab]`` q, or None
            (one-hot on the draft token).
        generators: ``r`` ``torch.Generator`` or None.

    Returns:
        ``[r]`` int64 token ids.
    """
    listed = rows.whole[at] if rows.whole is not None else torch.zeros(at.shape[0], dtype=torch.bool)
    tokens = torch.empty(at.shape[0], dtype=torch.int64)
    for part, race_over in ((listed, rows.ids), (~listed, None)):
        if bool(part.any()):
            chosen = part.nonzero().flatten()
            columns = None if race_over is None else race_over[at[chosen]]
            tokens[chosen] = _race(target, rows.norm, at[chosen], columns, ids, draft_probs,
                                   [generators[j] for j in chosen.tolist()])
    return tokens


def _race(target: torch.Tensor, norm: torch.Tensor, at: torch.Tensor, columns: torch.Tensor | None,
          ids: torch.Tensor, draft_probs: torch.Tensor | None, generators: list) -> torch.Tensor:
    """:func:`recovered` for rows ``at`` over ``columns`` (``[r, w]`` token ids) or the vocabulary (None)."""
    scores = target[at] if columns is None else target[at].gather(1, columns)
    p = torch.exp(scores - norm[at, None])  # 0 outside the nucleus (masked)
    if draft_probs is None:  # q one-hot on the draft token
        drafted = ids[at, None]
        residual = p.masked_fill(drafted == (columns if columns is not None else torch.arange(p.shape[1])), 0.0)
    else:
        q = draft_probs[at] if columns is None else draft_probs[at].gather(1, columns)
        residual = (p - q).clamp_(min=0.0)
    empty = residual.amax(dim=-1) <= 0
    if bool(empty.any()):
        residual[empty] = p[empty]
    noise = torch.empty(residual.shape, dtype=torch.float64).exponential_()
    for j, generator in enumerate(generators):
        if generator is not None:
            noise[j].exponential_(generator=generator)
    best = (residual.double() / noise).argmax(dim=-1)
    return best if columns is None else columns.gather(1, best[:, None])[:, 0]
