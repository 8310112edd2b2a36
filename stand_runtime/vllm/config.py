"""STAND's ``speculative_config`` for vLLM: the ``custom_class`` proposer and its options."""


from __future__ import annotations

import json
import os

from ..checks import check_int
from ..errors import StandError
from ..limits import MAX_CHAIN_TOKENS
from .options import OPTIONS_ENV, read_options

PROPOSER = "stand_runtime.vllm.proposer.StandProposer"
"""The dotted class path vLLM's ``custom_class`` method loads."""

AUTO_K = "auto"
"""``k="auto"``: per-request chain lengths by the expected-value rule (option ``sized``), at most
:data:`AUTO_MAX_K` tokens."""

AUTO_MAX_K = 16
"""The longest chain of ``k="auto"`` (the largest K the calibrated chain sizing considers)."""


def _plain(value):
    """JSON for option values Python code naturally passes: paths as text, numpy scalars as numbers."""
    import numpy as np

    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a JSON value")


def speculative_config(k: int | str = 4, **options) -> dict:
    """vLLM's ``speculative_config`` for STAND, and the proposer's options in the environment.

    Args:
        k: chain length (draft tokens per request and step), ``1 <= k <= 128``; or ``"auto"``:
            each request's chain cut where the expected-value rule says (option ``sized``), at most
            :data:`AUTO_MAX_K` tokens (with ``sized=True`` an integer k is that cap).
        **options: proposer options (:data:`stand_runtime.vllm.options.DEFAULT_OPTIONS`:
            ``stochastic``, ``q_aware``, ``copy``, ``max_prompts``, ``max_n``, ``sized``,
            ``fallback``, ``latency``, ``stats_path``, ``prior``); they are passed to the engine process as
            JSON in ``STAND_VLLM_OPTIONS``, so call this before building the ``LLM``.

    Returns:
        ``{"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": k}``.

    Raises:
        StandError: ``k`` out of range or a bad option.
    """
    if k == AUTO_K:
        if "sized" in options and options["sized"] is not True:
            raise StandError(f'k="auto" sizes each chain (sized): it takes sized=True or no sized, '
                             f'got sized={options["sized"]!r}')
        k, options = AUTO_MAX_K, {**options, "sized": True}
    k = check_int("k (draft tokens per step)", k, 1, MAX_CHAIN_TOKENS)
    try:
        text = json.dumps(options, default=_plain)
    except (TypeError, ValueError) as error:
        raise StandError(f"STAND vLLM options must be JSON values: {error}") from None
    read_options(text)
    os.environ[OPTIONS_ENV] = text
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": k}
