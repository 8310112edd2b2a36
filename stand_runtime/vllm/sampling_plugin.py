"""The ``vllm.general_plugins`` entry point of this package (``stand_cpu_sampling_fix`` in
pyproject.toml): :func:`fix_cpu_sampling` runs in every vLLM process and, on the CPU platform, puts
this package's sampling fixes in place of vLLM's functions, so vLLM's own methods (plain decoding,
ngram, suffix) get them too and every engine of a benchmark samples with the same code. What each
replacement does and why: :mod:`stand_runtime.vllm.cpu_sampling` (the expansion, top-p, recovery
noise, no rows) and :mod:`stand_runtime.vllm.rejection` (the rejection sampler's draft rows).
"""

from __future__ import annotations

import inspect
import os

from .cpu_sampling import (VLLM_ORIGINALS, cpu_expand_is_broken, empty_safe, expand_batch_to_tokens,
                           sample_recovered_tokens, top_p_by_probe)
from .rejection import FORWARD, rejection_forward
from .runner_access import LOG

FAST_SAMPLING_ENV = "STAND_VLLM_FAST_SAMPLING"
"""Environment variable: ``0`` keeps vLLM's own top-p sort, recovery noise and rejection sampler on CPU
(the faults are fixed regardless), e.g. to time vLLM as shipped."""

_RECOVERED_PARAMETERS = ("max_spec_len", "num_draft_tokens", "cu_num_draft_tokens", "draft_token_ids",
                         "draft_probs", "target_probs", "sampling_metadata", "device", "use_fp64_gumbel")
_TOP_K_TOP_P_PARAMETERS = ("logits", "k", "p", "allow_cpu_sync")
_FORWARD_PARAMETERS = ("self", "metadata", "draft_probs", "logits", "sampling_metadata")


def _same_parameters(function, names: tuple[str, ...]) -> bool:
    try:
        return tuple(inspect.signature(function).parameters) == names
    except (TypeError, ValueError):
        return False


def fast_sampling_enabled() -> bool:
    """False when ``STAND_VLLM_FAST_SAMPLING=0`` asks for vLLM's own top-p sort, noise and verification."""
    return os.environ.get(FAST_SAMPLING_ENV, "1").strip() != "0"


def fix_cpu_sampling() -> bool:
    """On vLLM's CPU platform: replace the rejection sampler's expansion by
    :func:`~stand_runtime.vllm.cpu_sampling.expand_batch_to_tokens` when it is faulty, and (unless
    ``STAND_VLLM_FAST_SAMPLING=0``) vLLM's top-p sort by
    :func:`~stand_runtime.vllm.cpu_sampling.top_p_by_probe`, its recovery noise by
    :func:`~stand_runtime.vllm.cpu_sampling.sample_recovered_tokens` and its rejection sampler's
    ``forward`` by :func:`~stand_runtime.vllm.rejection.rejection_forward`, each only where vLLM's
    function has the signature these were written against. Logs one line per change; running it
    again changes nothing.

    Returns:
        True when anything was replaced.
    """
    try:
        from vllm.platforms import current_platform
        from vllm.v1.sample import rejection_sampler
        from vllm.v1.sample.ops import topk_topp_sampler
    except ImportError:
        return False
    if not current_platform.is_cpu():
        return False
    changed = False
    if cpu_expand_is_broken():
        VLLM_ORIGINALS["expand_batch_to_tokens"] = rejection_sampler.expand_batch_to_tokens
        rejection_sampler.expand_batch_to_tokens = expand_batch_to_tokens
        LOG.info("stand-treeopt: replaced vLLM's faulty CPU expand kernel in speculative sampling "
                 "(temperature/top-p per draft token) with a torch one")
        changed = True
    original = VLLM_ORIGINALS.get("apply_top_k_top_p_pytorch", topk_topp_sampler.apply_top_k_top_p_pytorch)
    if original is not top_p_by_probe and _same_parameters(original, _TOP_K_TOP_P_PARAMETERS):
        VLLM_ORIGINALS["apply_top_k_top_p_pytorch"] = original
        if fast_sampling_enabled():
            topk_topp_sampler.apply_top_k_top_p_pytorch = top_p_by_probe
            LOG.info("stand-treeopt: vLLM's CPU top-p cuts the nucleus from a partial top-k (no full sort)")
        else:  # the fault (no rows) is fixed regardless
            topk_topp_sampler.apply_top_k_top_p_pytorch = empty_safe(original)
            LOG.info("stand-treeopt: vLLM's CPU top-k/top-p returns a batch of no rows as it is")
        changed = True
    if fast_sampling_enabled():
        changed = _fast_verification(rejection_sampler) or changed
    return changed


def _fast_verification(rejection_sampler) -> bool:
    """The recovery noise and the rejection sampler's ``forward`` (speed); True when either was replaced."""
    changed = False
    current = rejection_sampler.sample_recovered_tokens
    if (current is not sample_recovered_tokens and _same_parameters(current, _RECOVERED_PARAMETERS)
            and hasattr(rejection_sampler, "_sample_recovered_tokens")):
        VLLM_ORIGINALS["sample_recovered_tokens"] = current
        rejection_sampler.sample_recovered_tokens = sample_recovered_tokens
        LOG.info("stand-treeopt: vLLM's rejection sampler draws recovery noise for requests with drafts only, "
                 "inside p's nucleus")
        changed = True
    sampler = rejection_sampler.RejectionSampler
    forward = sampler.forward
    if (forward is not rejection_forward and _same_parameters(forward, _FORWARD_PARAMETERS)
            and hasattr(rejection_sampler, "generate_uniform_probs")):
        VLLM_ORIGINALS[FORWARD] = forward
        sampler.forward = rejection_forward
        LOG.info("stand-treeopt: vLLM's rejection sampler verifies sampled draft rows without whole-vocabulary "
                 "passes (its own path for greedy, top-k and logprobs)")
        changed = True
    return changed
