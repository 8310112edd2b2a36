"""The target's successor prior: p after every vocabulary token, measured once per model, filling the
contexts a STAND store lacks at a step's root (ours; docs/algorithms.md §2.8).

A fresh store knows only its prompt. Where a step's root is a token the store has never seen as a
context, nothing it holds predicts what follows, even where the target is sure (docs/decisions.md).
Many such tokens follow from the root token alone (a word's next piece, ``" John"`` → ``"'s"``, ``"multip"`` → ``"ly"``).

The prior holds, for every token t, the top :data:`~stand_runtime.drafters.feeds.STORE_TOP_K` of the
store's distribution (:func:`~stand_runtime.drafters.feeds.store_params`: p, or the softmax for greedy
decoding) after ``context + [t]``, the context an assistant turn's opening
(:func:`prior_context`): what the target predicts after t with nothing else known. It is measured in
one pass over the vocabulary, the context's KV cache computed once and shared by batches of
:data:`BATCH` tokens, and kept
on disk per model, dtype, context and distribution (:func:`cached_prior`).

A step whose root token has no 1-token context in the store yet is given the prior's row for it
first (:meth:`SuccessorPrior.fill`), as an observation of that context: the draft then has something
to draw from where it had nothing, and the run's own observations of the context merge into it as
they come (the store's running average). Only missing contexts are filled, so the prior never dilutes
what the run has learned of the contexts it has seen. Lossless: any q is (§9.4), and
whether a context is filled depends on the committed tokens only.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .feeds import STORE_TOP_K, LogitsFeed, store_observation, store_params
from ..errors import StandError
from ..files import cache_or_warn
from ..target.sampling import SamplingParams
from ..store.ngram_store import NGramStore

BATCH = 64
"""Vocabulary tokens per forward of the measurement (the context's cache expanded to this many rows).
The logits, the top-p sort and the per-row caches grow with the batch while the forward gets no
faster, so the batch is kept small."""

PRIOR_DATE = "01 Jan 2025"
"""The date a chat template that prints one (``date_string``, Llama 3.x) is given in :func:`prior_context`:
a template printing today's date would make the context, and so the cached prior's key, change daily."""

PRIOR_USER_TURN = "Hi"
"""The user turn of :func:`prior_context`'s chat (a neutral one: the prior is about the token, not a task)."""


@dataclass(eq=False)
class SuccessorPrior:
    """p after every token: ``ids`` ``[V, k]`` int64 and ``probs`` ``[V, k]`` float64 (row t: the store's
    distribution after ``context + [t]``, most likely first, probability 0 past a short row);
    ``distribution``: the store distribution it was measured under
    (:func:`~stand_runtime.drafters.feeds.store_params`), None when not recorded."""

    ids: np.ndarray
    probs: np.ndarray
    distribution: SamplingParams | None = None

    def __post_init__(self) -> None:
        """Raises StandError unless ``ids`` and ``probs`` are 2-D numpy arrays of one shape and
        ``distribution`` is None or a SamplingParams (their values are checked where a file is read,
        :meth:`from_bytes`)."""
        if not (isinstance(self.ids, np.ndarray) and isinstance(self.probs, np.ndarray) and self.ids.ndim == 2
                and self.ids.shape == self.probs.shape):
            shapes = [list(getattr(a, "shape", ())) or type(a).__name__ for a in (self.ids, self.probs)]
            raise StandError(f"a successor prior's ids and probs must be [V, k] numpy arrays of one shape, got {shapes}")
        if self.distribution is not None and not isinstance(self.distribution, SamplingParams):
            raise StandError(f"a successor prior's distribution must be a SamplingParams or None, "
                             f"not {type(self.distribution).__name__}")

    def serves(self, params: SamplingParams) -> bool:
        """Whether a request sampled with ``params`` records what this prior holds (its store
        distribution is the prior's, temperature and top-p within 1e-6: vLLM passes them as float32);
        True when the prior's distribution is not recorded."""
        if self.distribution is None:
            return True
        mine, theirs = self.distribution, store_params(params)
        return (abs(mine.temperature - theirs.temperature) < 1e-6 and abs(mine.top_p - theirs.top_p) < 1e-6
                and effective_top_k(mine.top_k, self.vocab) == effective_top_k(theirs.top_k, self.vocab))

    @property
    def vocab(self) -> int:
        """Tokens the prior covers (the target's vocabulary)."""
        return self.ids.shape[0]

    def row(self, token: int) -> tuple[list[int], list[float]]:
        """Token ``token``'s row: the ids and probabilities of positive mass (lists, most likely first)."""
        kept = self.probs[token] > 0
        return self.ids[token][kept].tolist(), self.probs[token][kept].tolist()

    def fill(self, store: NGramStore, token: int) -> bool:
        """Give ``store`` the row of ``token`` as an observation of the 1-token context ``(token,)`` when
        the store holds no such context yet (a step's root the run has not seen as a context): True
        when it did. Reads nothing drawn: whether it fills depends on the committed tokens only.

        Raises:
            StandError: ``token`` outside the prior's vocabulary.
        """
        if not 0 <= token < self.vocab:
            raise StandError(f"token {token} is outside the successor prior's vocabulary of {self.vocab}")
        if store.match((token,)) is not None:
            return False
        ids, probs = self.row(token)
        if ids:
            store.update((token,), ids, probs)
        return bool(ids)

    def to_bytes(self) -> bytes:
        """The prior as an ``.npz`` file's bytes (ids int32, probs float32, and when recorded the
        distribution as float64 ``[temperature, top_p, top_k]``)."""
        out = io.BytesIO()
        arrays = {"ids": self.ids.astype(np.int32), "probs": self.probs.astype(np.float32)}
        if self.distribution is not None:
            d = self.distribution
            arrays["distribution"] = np.array([d.temperature, d.top_p, d.top_k], dtype=np.float64)
        np.savez(out, **arrays)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, id_bound: int | None = None) -> "SuccessorPrior":
        """The prior :meth:`to_bytes` wrote.

        Args:
            data: the file's bytes.
            id_bound: token ids must lie below it (the target's output width); None: below the rows.

        Raises:
            StandError: not such a file: arrays missing, not ``[V, k]`` with 1 <= k <= STORE_TOP_K,
                ids out of range or repeated within a row, probabilities outside [0, 1] or a row's
                summing above 1, a distribution that is not one.
        """
        try:
            with np.load(io.BytesIO(data)) as arrays:
                ids, probs = arrays["ids"].astype(np.int64), arrays["probs"].astype(np.float64)
                recorded = arrays["distribution"].tolist() if "distribution" in arrays.files else None
            distribution = None if recorded is None else SamplingParams(recorded[0], recorded[1], int(recorded[2]))
        except (OSError, ValueError, KeyError, EOFError, TypeError, IndexError, zipfile.BadZipFile) as error:
            why = "not numpy's .npz of arrays" if "pickle" in str(error) else " ".join(str(error).split())
            raise StandError(f"not a successor prior file ({why})") from None
        if ids.ndim != 2 or ids.shape != probs.shape or not 1 <= ids.shape[1] <= STORE_TOP_K or not len(ids):
            raise StandError(f"not a successor prior file (arrays of shape {ids.shape} and {probs.shape})")
        bound = len(ids) if id_bound is None else id_bound
        if ids.min() < 0 or ids.max() >= bound:
            raise StandError(f"not a successor prior file (token ids outside [0, {bound}))")
        if not (np.isfinite(probs).all() and (probs >= 0).all() and (probs.sum(axis=1) <= 1 + 1e-3).all()):
            raise StandError("not a successor prior file (probabilities negative, not finite or summing above 1)")
        kept = np.sort(np.where(probs > 0, ids, -1 - np.arange(ids.shape[1])), axis=1)  # a unique stand-in where p is 0
        if (kept[:, 1:] == kept[:, :-1]).any():
            raise StandError("not a successor prior file (a token repeated within a row)")
        return cls(ids, probs, distribution)


def prior_context(tokenizer) -> list[int]:
    """The tokens before t in the prior's measurement: the chat template's opening of an assistant
    turn after a one-word user turn (:data:`PRIOR_USER_TURN`); a tokenizer without a chat template:
    its BOS token alone, or nothing. A template that prints a date gets :data:`PRIOR_DATE`."""
    template = getattr(tokenizer, "chat_template", None)
    if template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": PRIOR_USER_TURN}],
                                             add_generation_prompt=True, tokenize=False, date_string=PRIOR_DATE)
        return list(tokenizer.encode(text, add_special_tokens=False))
    bos = getattr(tokenizer, "bos_token_id", None)
    return [] if bos is None else [int(bos)]


def measure_prior(model, context: list[int], params: SamplingParams, vocab: int,
                  on_batch: Callable[[int, int], None] | None = None) -> SuccessorPrior:
    """The successor prior of ``model`` (module docstring): per token t < ``vocab`` the store's
    observation (:func:`~stand_runtime.drafters.feeds.store_observation` under ``params``) of the
    logits after ``context + [t]``.

    Args:
        model: the target (a causal LM whose forward takes ``cache`` and ``position_ids``).
        context: token ids before t (may be empty).
        params: the sampling distribution whose store rows the prior holds.
        vocab: the target's vocabulary size (rows of the prior).
        on_batch: called as ``on_batch(done, vocab)`` after each batch (progress).

    Raises:
        StandError: the target's logits are not finite (naming the tokens measured).
    """
    from ..target.kv_cache import BatchedCache
    from ..target.forward import model_device, prefill, with_cache
    from ..target.kv_cache import new_cache

    device = model_device(model)
    ids = np.zeros((vocab, STORE_TOP_K), dtype=np.int64)
    probs = np.zeros((vocab, STORE_TOP_K), dtype=np.float64)
    prefix = new_cache(model)
    prefill(model, prefix, context)
    with torch.inference_mode():
        for start in range(0, vocab, BATCH):
            tokens = torch.arange(start, min(vocab, start + BATCH), device=device)
            rows = len(tokens)
            cache = BatchedCache.from_rows([prefix] * rows, model.config).cache  # the context's cache, one per row
            positions = torch.full((rows, 1), len(context), device=device)
            logits = model(input_ids=tokens[:, None], position_ids=positions, **with_cache(model, cache), use_cache=True).logits[:, -1]
            feed = LogitsFeed(logits, params, source=f"the successor prior's measurement (tokens {start}-{start + rows - 1})")
            top_ids, top_probs = store_observation(feed, range(rows), params)
            ids[start: start + rows, : top_ids.shape[1]] = top_ids
            probs[start: start + rows, : top_probs.shape[1]] = top_probs
            if on_batch is not None:
                on_batch(start + rows, vocab)
    return SuccessorPrior(ids, probs, store_params(params))


def effective_top_k(top_k: int, vocab: int) -> int:
    """``top_k`` as a cut of a ``vocab``-token distribution: 0 (no cut) where it keeps every token, so
    that ``top_k >= vocab`` shares the uncut distribution's prior rather than measuring its own."""
    return top_k if 0 < top_k < vocab else 0


def weights_fingerprint(model) -> str:
    """A digest of what tells one model's weights from another's without reading them all: the model
    type, the shapes of every parameter, every one-dimensional parameter (norms, biases) and every
    4,099th value of the input embeddings. Independent of where the model was loaded from (a moved
    or copied folder keeps its cached prior) and of the kernels it runs (packed linears keep theirs)."""
    digest = hashlib.sha256(str(getattr(model.config, "model_type", "model")).encode())
    for name, parameter in model.named_parameters():
        digest.update(f"{name}{tuple(parameter.shape)}".encode())
        if parameter.dim() == 1:
            digest.update(parameter.detach().float().cpu().numpy().tobytes())
    embedding = model.get_input_embeddings().weight.detach()
    digest.update(embedding.reshape(-1)[::4099].float().cpu().numpy().tobytes())
    return digest.hexdigest()


def prior_key(model, context: list[int], params: SamplingParams, vocab: int) -> str:
    """What a cached prior depends on: the model's weights (:func:`weights_fingerprint`), its dtype,
    the vocabulary, the context and the store's distribution (temperature, top-p, top-k)."""
    first = next(model.parameters())
    stored = store_params(params)
    parts = [weights_fingerprint(model), str(first.dtype), str(vocab), json.dumps(context),
             repr((stored.temperature, stored.top_p, effective_top_k(stored.top_k, vocab)))]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


_LOADED: dict[str, SuccessorPrior] = {}


def _output_width(model, vocab: int) -> int:
    """Columns of the target's logits (token ids a store row may hold): its output embedding's rows,
    else ``vocab``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    return max(vocab, int(weight.shape[0])) if weight is not None and weight.dim() == 2 else vocab


def prior_path(model, tokenizer, params: SamplingParams, vocab: int) -> Path:
    """Where :func:`cached_prior` keeps the prior of ``model`` for ``params``:
    ``<cache>/prior/<key>.npz`` (:func:`prior_key`; the file may not exist)."""
    return _key_path(prior_key(model, prior_context(tokenizer), params, vocab))


def _key_path(key: str) -> Path:
    from ..target.models import cache_root

    return cache_root() / "prior" / f"{key}.npz"


def cached_prior(model, tokenizer, params: SamplingParams, vocab: int,
                 on_batch: Callable[[int, int], None] | None = None) -> SuccessorPrior:
    """The successor prior of ``model`` for ``params`` (:func:`measure_prior` on :func:`prior_context`):
    measured once, kept under the cache folder (``$STAND_CACHE_DIR`` or ``~/.cache/stand``, ``prior/``)
    and in this process; a corrupt file is measured again. A file that records no distribution is taken for ``params``' store distribution, which its key names,
    and rewritten recording it (a reader of the file, vLLM's proposer, would take it for every
    distribution). Where the folder takes no file (read-only, or something other than a regular file
    at the file's name), the prior is kept in this process only and a
    :class:`~stand_runtime.errors.StandWarning` says so.

    Args:
        on_batch: while measuring, called as ``on_batch(done, vocab)`` before the first batch (done 0)
            and after each (progress); not called when the prior is cached.

    Raises:
        StandError: the target's logits are not finite (:func:`measure_prior`).
    """
    context = prior_context(tokenizer)
    key = prior_key(model, context, params, vocab)
    if key in _LOADED:
        return _LOADED[key]
    path = _key_path(key)
    prior = None
    if path.is_file():
        try:
            prior = SuccessorPrior.from_bytes(path.read_bytes(), _output_width(model, vocab))
        except (OSError, StandError):
            prior = None  # measured again
    if prior is None or prior.vocab != vocab or not prior.serves(params):
        if on_batch is not None:
            on_batch(0, vocab)
        prior = measure_prior(model, context, params, vocab, on_batch)
        cache_or_warn(path, prior.to_bytes(), "the successor prior")
    elif prior.distribution is None:  # its key names the distribution it was measured for
        prior.distribution = store_params(params)
        cache_or_warn(path, prior.to_bytes(), "the successor prior")  # recorded in the file from now on
    _LOADED[key] = prior
    return prior


def method_prior(method: str, model, tokenizer, params: SamplingParams, vocab: int, enabled: bool = True,
                 on_batch: Callable[[int, int], None] | None = None) -> SuccessorPrior | None:
    """The prior a ``method`` decoding with ``params`` drafts with (:func:`cached_prior`):
    None when not ``enabled``, without a model or a tokenizer, or for a method without an n-gram store."""
    from . import STORE_METHODS

    if not enabled or model is None or tokenizer is None or method not in STORE_METHODS:
        return None
    return cached_prior(model, tokenizer, params, vocab, on_batch)
