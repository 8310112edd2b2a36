"""STAND's ``speculative_config`` for vLLM and the proposer's options.

:func:`speculative_config` checks the options (before vLLM starts) and writes them as JSON to
``STAND_VLLM_OPTIONS`` in the parent process; the proposer reads them in vLLM's engine process.
"""

from __future__ import annotations

import json
import os

from ..checks import check_int
from ..store.drafting import DYNAMIC_MAX_N
from ..drafters.chain_budget import profile_function
from ..errors import StandError
from ..files import check_writable, parse_json_object
from ..limits import MAX_CHAIN_TOKENS, MAX_PROMPT_STORES
from ..store.ngram_store import MAX_CONTEXT

PROPOSER = "stand_runtime.vllm.proposer.StandProposer"
"""The dotted class path vLLM's ``custom_class`` method loads."""

AUTO_K = "auto"
"""``k="auto"``: per-request chain lengths by the expected-value rule (option ``sized``), at most
:data:`AUTO_MAX_K` tokens."""

AUTO_MAX_K = 16
"""The longest chain of ``k="auto"`` (the largest K the calibrated chain sizing considers)."""

OPTIONS_ENV = "STAND_VLLM_OPTIONS"
DEFAULT_OPTIONS = {"stochastic": True, "q_aware": True, "copy": True, "max_prompts": 64, "max_n": DYNAMIC_MAX_N,
                   "sized": False, "fallback": True, "latency": None, "stats_path": None, "prior": None}
"""``stochastic``: Gumbel draws from q at temperature > 0 (false: q's top tokens, verified with a
one-hot q); ``q_aware``: q to the rejection sampler (false: q = 1); ``copy``: the copy chain;
``max_prompts``: prompt stores kept; ``max_n``: longest store context (the dynamic tree's 8);
``sized``: per-request chain lengths by the expected-value rule, K the cap (false: every chain runs
to K or to its end); ``fallback``: a store shared by every request, read where a request's own store
and the copy chain have nothing; ``latency``: vLLM's step latency here, ``{"sizes": [tokens],
"seconds": [s]}`` (:mod:`stand_runtime.vllm.sizing`), the sized rule's starting point (null: the
observed step times alone); ``stats_path``: a JSON file the proposer rewrites after every step;
``prior``: a successor prior file (:meth:`stand_runtime.drafters.prior.SuccessorPrior.to_bytes`,
docs/algorithms.md §2.8) whose row fills a request's store where it has not seen the root token as a
context, for requests sampled with the distribution it was measured under (null: none)."""

OPTION_LIMITS = {"max_prompts": (1, MAX_PROMPT_STORES), "max_n": (1, MAX_CONTEXT)}
"""Integer options and their ranges (checked when the config is built, before vLLM starts)."""

_FLAGS = ("stochastic", "q_aware", "copy", "sized", "fallback")


def _check_latency(value) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or set(value) != {"sizes", "seconds"}:
        raise StandError("STAND vLLM option latency must be null or {\"sizes\": [...], \"seconds\": [...]}")
    try:
        profile_function(value["sizes"], value["seconds"])
    except StandError as error:
        raise StandError(f"STAND vLLM option latency: {error}") from None


def _check_path(name: str, value) -> None:
    """Option ``stats_path`` (a writable file) or ``prior`` (a prior file that loads), or null."""
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise StandError(f"STAND vLLM option {name} must be a path or null, got {value!r}")
    if name == "prior":
        load_prior(value)
        return
    try:
        check_writable(value)
    except StandError as error:
        raise StandError(f"STAND vLLM option stats_path: {error}") from None


_LOADED_PRIORS: dict[str, tuple[tuple[int, int], object]] = {}
"""Prior files read in this process, by path: ((mtime ns, size), the prior)."""


def load_prior(path: str):
    """The successor prior in file ``path`` (:class:`stand_runtime.drafters.prior.SuccessorPrior`), read
    once per process while the file is unchanged (vLLM's engine checks the option, then loads it).

    Raises:
        StandError: the file cannot be read or is not a successor prior file (one line naming it).
    """
    from pathlib import Path

    from ..drafters.prior import SuccessorPrior

    try:
        stat = Path(path).stat()
        version = (stat.st_mtime_ns, stat.st_size)
        if path in _LOADED_PRIORS and _LOADED_PRIORS[path][0] == version:
            return _LOADED_PRIORS[path][1]
        prior = SuccessorPrior.from_bytes(Path(path).read_bytes())
    except StandError as error:
        raise StandError(f"STAND vLLM option prior: {path}: {error}") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        raise StandError(f"STAND vLLM option prior: cannot read {str(path)[:120]}: "
                         f"{getattr(error, 'strerror', None) or error}") from None
    _LOADED_PRIORS[path] = (version, prior)
    return prior


def read_options(text: str | None) -> dict:
    """The proposer's options: :data:`DEFAULT_OPTIONS` updated from JSON ``text``.

    Raises:
        StandError: not a JSON object, an unknown option, or a value of the wrong type.
    """
    options = dict(DEFAULT_OPTIONS)
    if text is not None and not isinstance(text, (str, bytes, bytearray)):
        raise StandError(f"{OPTIONS_ENV} must be JSON text, got {type(text).__name__}")
    if not text:
        return options
    given = parse_json_object(text, OPTIONS_ENV)
    for name, value in given.items():
        if name not in DEFAULT_OPTIONS:
            raise StandError(f"unknown STAND vLLM option {name!r} (valid: {', '.join(DEFAULT_OPTIONS)})")
        if name in OPTION_LIMITS:
            check_int(f"STAND vLLM option {name}", value, *OPTION_LIMITS[name])
        if name in _FLAGS and not isinstance(value, bool):
            raise StandError(f"STAND vLLM option {name} must be true or false, got {value!r}")
        if name == "latency":
            _check_latency(value)
        if name in ("stats_path", "prior"):
            _check_path(name, value)
        options[name] = value
    return options


def proposer_summary(k: int, options: dict) -> str:
    """The proposer's settings in words (the line it logs when vLLM loads it)."""
    length = (f"chains of up to {k} draft tokens per request and step, each request's length by expected tokens per "
              f"second (latency {'measured here, corrected' if options['latency'] else 'learned'} online)"
              if options["sized"] else f"chains of up to {k} draft tokens per request and step (fixed K)")
    return (f"{length}; one store per prompt, contexts up to {options['max_n']} tokens, blended, at most "
            f"{options['max_prompts']} prompts kept, fallback store {'on' if options['fallback'] else 'off'}; "
            f"{'Gumbel draws from q' if options['stochastic'] else 'q' + chr(39) + 's top tokens'} at temperature > 0, "
            f"{'q-aware' if options['q_aware'] else 'q = 1'} verification, copy chain "
            f"{'on' if options['copy'] else 'off'}; successor prior {_prior_words(options['prior'])}")


def _prior_words(path: str | None) -> str:
    """The prior option in words: off, or its file and the distribution it serves."""
    if not path:
        return "off"
    try:
        served = load_prior(path).distribution
    except StandError:
        served = None
    if served is None:
        return f"from {path}"
    greedy = " and greedy ones" if served.temperature == 1 and served.top_p == 1 and not served.top_k else ""
    return f"from {path} (for requests sampled at temperature {served.temperature:g}, top-p {served.top_p:g}{greedy})"


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
        **options: proposer options (:data:`DEFAULT_OPTIONS`), passed to the engine process as JSON
            in ``STAND_VLLM_OPTIONS``: call this before building the ``LLM``.

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
