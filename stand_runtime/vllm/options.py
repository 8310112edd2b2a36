"""The STAND proposer's options: read from ``STAND_VLLM_OPTIONS`` (JSON) in vLLM's engine process.

:func:`stand_runtime.vllm.speculative_config` writes them in the parent process; the proposer reads
them when vLLM builds it. Every option is checked when the config is built, before vLLM starts.
"""

from __future__ import annotations

from ..checks import check_int
from ..store.drafting import DYNAMIC_MAX_N
from ..drafters.chain_budget import profile_function
from ..errors import StandError
from ..files import check_writable, parse_json_object
from ..limits import MAX_PROMPT_STORES
from ..store.ngram_store import MAX_CONTEXT

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


def _check_stats_path(value) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise StandError(f"STAND vLLM option stats_path must be a path or null, got {value!r}")
    try:
        check_writable(value)
    except StandError as error:
        raise StandError(f"STAND vLLM option stats_path: {error}") from None


def _check_prior(value) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise StandError(f"STAND vLLM option prior must be a path or null, got {value!r}")
    load_prior(value)


_LOADED_PRIORS: dict[str, tuple[tuple[int, int], object]] = {}
"""Prior files read in this process, by path: ((mtime ns, size), the prior); vLLM's engine checks the
option (:func:`read_options`) and then loads it (the proposer): one read of the ~4 MB file, not two."""


def load_prior(path: str):
    """The successor prior in file ``path`` (:class:`stand_runtime.drafters.prior.SuccessorPrior`);
    read once per process while the file is unchanged (same modification time and size).

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
        if name == "stats_path":
            _check_stats_path(value)
        if name == "prior":
            _check_prior(value)
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
