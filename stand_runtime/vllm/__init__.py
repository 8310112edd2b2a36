"""STAND inside vLLM: a ``custom_class`` speculative proposer (see :mod:`stand_runtime.vllm.proposer`).

Importing this package does not import vLLM; :func:`speculative_config` builds the engine argument::

    from vllm import LLM
    from stand_runtime.vllm import speculative_config
    llm = LLM(model=folder, speculative_config=speculative_config(k=4))

All of vLLM's private state the proposer touches is in :mod:`stand_runtime.vllm.runner_access`;
:mod:`stand_runtime.vllm.server` builds the OpenAI server's command (``treeopt serve``).
"""

from __future__ import annotations

import json
import os

from ..checks import check_int
from ..errors import StandError
from ..limits import MAX_CHAIN_TOKENS
from .proposer import DEFAULT_OPTIONS, OPTIONS_ENV, read_options

PROPOSER = "stand_runtime.vllm.proposer.StandProposer"
"""The dotted class path vLLM's ``custom_class`` method loads."""


def _plain(value):
    """JSON for option values Python code naturally passes: paths as text, numpy scalars as numbers."""
    import numpy as np

    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a JSON value")


def speculative_config(k: int = 4, **options) -> dict:
    """vLLM's ``speculative_config`` for STAND, and the proposer's options in the environment.

    Args:
        k: chain length (draft tokens per request and step), ``1 <= k <= 128``.
        **options: proposer options (:data:`stand_runtime.vllm.proposer.DEFAULT_OPTIONS`:
            ``stochastic``, ``q_aware``, ``copy``, ``max_prompts``, ``max_n``, ``stats_path``); they
            are passed to the engine process as JSON in ``STAND_VLLM_OPTIONS``, so call this before
            building the ``LLM``.

    Returns:
        ``{"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": k}``.

    Raises:
        StandError: ``k`` out of range or a bad option.
    """
    k = check_int("k (draft tokens per step)", k, 1, MAX_CHAIN_TOKENS)
    try:
        text = json.dumps(options, default=_plain)
    except (TypeError, ValueError) as error:
        raise StandError(f"STAND vLLM options must be JSON values: {error}") from None
    read_options(text)
    os.environ[OPTIONS_ENV] = text
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": k}


from .engine import (  # noqa: E402 - after speculative_config, which engine.py imports
    DEFAULT_K,
    VLLM_METHODS,
    check_model_folder,
    default_model_folder,
    load_llm,
    method_config,
    shutdown_llm,
)
from .runner_access import TESTED_VLLM, VLLMInternalsChanged, check_version, fix_cpu_sampling  # noqa: E402
from .sizing import cached_vllm_latency, chain_acceptance, choose_k, measure_vllm_latency  # noqa: E402

__all__ = ["DEFAULT_K", "DEFAULT_OPTIONS", "OPTIONS_ENV", "PROPOSER", "TESTED_VLLM", "VLLMInternalsChanged",
           "VLLM_METHODS", "cached_vllm_latency", "chain_acceptance", "check_model_folder", "check_version",
           "choose_k", "default_model_folder", "fix_cpu_sampling", "load_llm", "measure_vllm_latency", "method_config",
           "shutdown_llm", "speculative_config"]
