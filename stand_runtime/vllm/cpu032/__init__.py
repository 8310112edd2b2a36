"""vLLM's CPU sampler, patched: fixes and speed-ups for the CPU build of vLLM 0.32 (and the 0.33 sources).

This is not part of the STAND proposer (which imports none of it): it is a patch set for one vLLM
build's sampler, installed by the ``vllm.general_plugins`` entry point ``stand_cpu_sampling_fix``
(pyproject.toml) in every vLLM process, where :func:`fix_cpu_sampling` applies it only on vLLM's CPU
platform and a release line in :data:`PATCHED_VLLM`, and says so in one log line. What each
replacement does and why: :mod:`.cpu_sampling` (the expansion, top-p, recovery noise, no rows) and
:mod:`.rejection` (the rejection sampler's draft rows); :mod:`.nuclei` keeps the top-p nuclei it
cuts for the proposer's store feed, which the runner access reads only where this patch is installed.

vLLM 0.33's sources still have both faults it fixes (``vllm/utils/cpu_triton_utils.py`` is
byte-identical to 0.32's, and ``apply_top_k_only`` still takes ``k.max()`` of no rows), so it is
applied there too; no CPU build of 0.33 was published to run it on.
"""

from __future__ import annotations

import inspect

PATCHED_VLLM = ("0.32", "0.33")
"""vLLM release lines (major.minor) whose CPU build this patch set applies to."""

FAST_SAMPLING_ENV = "STAND_VLLM_FAST_SAMPLING"
"""Environment variable: ``0`` keeps vLLM's own top-p sort, recovery noise and rejection sampler on CPU
(the faults are fixed regardless), e.g. to time vLLM as shipped."""

INSTALLED = False
"""Whether :func:`fix_cpu_sampling` applied the patch set in this process."""

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
    """False when ``STAND_VLLM_FAST_SAMPLING=0`` asks for vLLM's own top-p sort, noise and verification.

    Raises:
        StandError: ``STAND_VLLM_FAST_SAMPLING`` set to anything but 0 or 1.
    """
    from ...checks import env_switch

    return env_switch(FAST_SAMPLING_ENV) is not False


def fix_cpu_sampling() -> bool:
    """On vLLM's CPU platform of a release line in :data:`PATCHED_VLLM`: replace the rejection sampler's
    expansion by :func:`.cpu_sampling.expand_batch_to_tokens` when it is faulty, and (unless
    ``STAND_VLLM_FAST_SAMPLING=0``) vLLM's top-p sort, recovery noise and rejection sampler's ``forward``
    by :func:`.cpu_sampling.top_p_by_probe`, :func:`.cpu_sampling.sample_recovered_tokens` and
    :func:`.rejection.rejection_forward`, each only where vLLM's function has the signature these were
    written against. Logs one line naming the changes; True when anything was replaced. Elsewhere it
    imports nothing of this patch set.
    """
    global INSTALLED
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError:
        return False
    version = str(vllm.__version__)
    if not current_platform.is_cpu() or ".".join(version.split(".")[:2]) not in PATCHED_VLLM:
        return False
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.sample.ops import topk_topp_sampler

    from ..runner_access import LOG
    from .cpu_sampling import (VLLM_ORIGINALS, cpu_expand_is_broken, empty_safe, expand_batch_to_tokens,
                               sample_recovered_tokens, top_p_by_probe)
    from .rejection import FORWARD, rejection_forward

    fast = fast_sampling_enabled()
    changes = []
    if cpu_expand_is_broken():
        VLLM_ORIGINALS["expand_batch_to_tokens"] = rejection_sampler.expand_batch_to_tokens
        rejection_sampler.expand_batch_to_tokens = expand_batch_to_tokens
        changes.append("its faulty expand kernel (temperature/top-p per draft token) by a torch one")
    original = VLLM_ORIGINALS.get("apply_top_k_top_p_pytorch", topk_topp_sampler.apply_top_k_top_p_pytorch)
    if original is not top_p_by_probe and _same_parameters(original, _TOP_K_TOP_P_PARAMETERS):
        VLLM_ORIGINALS["apply_top_k_top_p_pytorch"] = original
        # the fault (top-k of no rows) is fixed regardless
        topk_topp_sampler.apply_top_k_top_p_pytorch = top_p_by_probe if fast else empty_safe(original)
        changes.append("top-p cut from a partial top-k" if fast else "top-k/top-p safe on no rows")
    current = rejection_sampler.sample_recovered_tokens
    if (fast and current is not sample_recovered_tokens and _same_parameters(current, _RECOVERED_PARAMETERS)
            and hasattr(rejection_sampler, "_sample_recovered_tokens")):
        VLLM_ORIGINALS["sample_recovered_tokens"] = current
        rejection_sampler.sample_recovered_tokens = sample_recovered_tokens
        changes.append("recovery noise inside p's nucleus of requests with drafts")
    sampler = rejection_sampler.RejectionSampler
    if (fast and sampler.forward is not rejection_forward and _same_parameters(sampler.forward, _FORWARD_PARAMETERS)
            and hasattr(rejection_sampler, "generate_uniform_probs")):
        VLLM_ORIGINALS[FORWARD] = sampler.forward
        sampler.forward = rejection_forward
        changes.append("sampled draft rows verified without whole-vocabulary passes")
    INSTALLED = INSTALLED or bool(changes)
    if changes:
        LOG.info("stand-treeopt: vLLM %s CPU sampling patch set (stand_runtime/vllm/cpu032) replaced: %s",
                 version, "; ".join(changes))
    return bool(changes)
