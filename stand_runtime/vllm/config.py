"""STAND's ``speculative_config`` for vLLM: the ``custom_class`` proposer and its options."""


from __future__ import annotations

import json
import os

from ..checks import check_int
from ..errors import StandError
from ..limits import MAX_CHAIN_TOKENS
from .proposer import OPTIONS_ENV, read_options

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
