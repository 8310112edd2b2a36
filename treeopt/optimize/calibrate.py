"""Calibration: estimate alpha(v), the probability that candidate node v is accepted in a step.

STAND paper §3.3 (data-driven tree optimization); docs/trees.md §6.2-6.3. Two estimators write the same file
(:mod:`treeopt.optimize.calibration`):

- **direct** (the paper's): decode with STAND using the candidate tree itself and count;
  ``alpha(v) = steps in which v was accepted / steps`` (:func:`direct_prompt`). Exact, but each step
  forwards the whole candidate tree (~30x a plain step on a CPU for 625 nodes).
- **replay** (ours, :mod:`treeopt.optimize.replay`): sample trajectories by batched plain decoding through the
  decoding backend, recording p, then replay the drafter along them. Cost ~ the sampling.

Prompt i (in dataset order) is seeded with ``seed + 1000 i`` and its trajectories with consecutive
seeds, so a resumed run samples exactly what an uninterrupted one would.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from stand_runtime import (DecodeRequest, DraftTree, HFBackend, Method, NGramStore, SamplingParams, StandError,
                           __version__, generate)
from stand_runtime.checks import check_bool, check_int, check_real
from stand_runtime.files import check_writable
from stand_runtime.limits import MAX_ROWS
from stand_runtime.randomness import RandomStream, check_seed

from .calibration import Calibration, load_calibration, prompt_digest
from .candidate import MAX_CANDIDATE_NODES, Prior, candidate_tree
from ..data.datasets import Prompt, check_prompt_list, check_prompts_fit, load_prompts
from .replay import replay_trajectory

METHODS = ("replay", "direct")
MAX_TRAJECTORIES = 4096
"""Trajectories per prompt at most (best-of-N beyond a few thousand is not a calibration setting)."""
SEED_STRIDE = 1000
"""Seed distance between consecutive prompts (a prompt's trajectories take consecutive seeds)."""


@dataclass(frozen=True)
class CalibrationConfig:
    """Settings of a calibration run (validated on construction).

    Raises:
        StandError: a setting out of range or an unknown method.
    """

    model: str = "smollm2-135m"
    dataset: str = "humaneval"
    field: str | None = None
    samples: int = 30
    offset: int = 0
    method: str = "replay"
    candidate_nodes: int = 625
    prior_base: float = 0.9
    prior_decay: float = 1.0
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0
    max_new_tokens: int = 256
    trajectories: int = 1
    seed: int = 0
    batch_size: int = 8
    deterministic_drafts: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise StandError(f"unknown calibration method {self.method!r} (valid: {', '.join(METHODS)})")
        for name in ("model", "dataset"):
            value = getattr(self, name)
            if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
                raise StandError(f"{name} must be a name or a path, got {value!r}")
            object.__setattr__(self, name, str(value))
        if self.field is not None and not isinstance(self.field, str):
            raise StandError(f"field must be a column name or None, got {self.field!r}")
        bounds = {"samples": (1, None), "offset": (0, None), "candidate_nodes": (1, MAX_CANDIDATE_NODES),
                  "max_new_tokens": (1, None), "trajectories": (1, MAX_TRAJECTORIES), "batch_size": (1, MAX_ROWS)}
        for name, (low, high) in bounds.items():
            object.__setattr__(self, name, check_int(name, getattr(self, name), low, high))
        object.__setattr__(self, "deterministic_drafts", check_bool("deterministic_drafts", self.deterministic_drafts))
        check_seed(self.seed)
        object.__setattr__(self, "seed", int(self.seed))  # plain Python numbers: the settings are saved as JSON
        object.__setattr__(self, "top_k", check_int("top_k", self.top_k, 0))
        for name in ("temperature", "top_p", "prior_base", "prior_decay"):
            object.__setattr__(self, name, check_real(name, getattr(self, name)))
        span = SEED_STRIDE * (self.offset + self.samples) + self.trajectories  # past the last prompt's seeds
        if span >= 2**64:
            raise StandError(f"offset {self.offset} is too large: prompt i is seeded with seed + {SEED_STRIDE} i, "
                             "which would run past 2**64")
        if self.seed + span >= 2**64:
            raise StandError(f"seed {self.seed} is too large: the prompts' seeds would run past 2**64")
        SamplingParams(self.temperature, self.top_p, self.top_k)
        Prior(self.prior_base, self.prior_decay)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k)

    @property
    def stochastic_drafts(self) -> bool:
        """Children drawn by Gumbel-Top-K (STAND) rather than q's top-m (ablation, greedy)."""
        return not self.deterministic_drafts and not self.sampling.greedy


@dataclass
class Progress:
    """Callbacks the CLI uses to draw progress (the package never imports rich)."""

    start: Callable[[int, int], None] = lambda prompts, tokens: None
    tokens: Callable[[int], None] = lambda count: None
    prompt_done: Callable[[str], None] = lambda prompt_id: None
    stage: Callable[[str], None] = lambda name: None


def calibrate(
    config: CalibrationConfig,
    model,
    tokenizer,
    out: str | Path,
    *,
    resume: bool = False,
    candidate: DraftTree | None = None,
    prompts: list[Prompt] | None = None,
    progress: Progress | None = None,
) -> Calibration:
    """Estimate alpha(v) for every candidate node on the configured prompts; the :class:`Calibration`, saved
    to ``out`` after every prompt. ``resume``: continue the run saved in ``out`` (same settings);
    ``candidate``: None builds one from the config; ``prompts``: None loads the config's dataset.

    Raises:
        StandError: not a CalibrationConfig, bad dataset or prompts (empty, not Prompt, a repeated id),
            a candidate that is not a DraftTree, unwritable output, a resume file with other settings,
            or a prompt that does not fit the context with its budget (before the first batch).
    """
    resume = _check_arguments(config, out, resume, candidate, progress)
    progress = progress or Progress()
    if prompts is None:
        prompts = load_prompts(config.dataset, field=config.field, samples=config.samples, offset=config.offset)
    prompts = check_prompt_list(prompts, "calibration prompts")
    if candidate is None:
        candidate = default_candidate(config)
    settings = asdict(config)
    calibration = _open_calibration(config, out, candidate, resume, prompts)
    done = {p["id"] for p in calibration.per_prompt}
    todo = [p for p in prompts if p.id not in done]
    check_prompts_fit(model, tokenizer, todo, config.max_new_tokens)  # before the first batch, not hours in
    timings = dict(calibration.metadata.get("timings", {"sampling_s": 0.0, "replay_s": 0.0, "direct_s": 0.0}))
    progress.start(len(todo), len(todo) * config.trajectories * config.max_new_tokens)
    seeds = {prompt.id: config.seed + SEED_STRIDE * number for number, prompt in enumerate(prompts)}
    backend = HFBackend(model, tokenizer, "ar", batch_size=config.batch_size)

    def finish(prompt_id: str) -> None:
        _finish_prompt(calibration, config, settings, timings, out, progress, prompt_id)

    per_batch = max(1, config.batch_size // config.trajectories)
    for start in range(0, len(todo), per_batch):
        batch = todo[start : start + per_batch]
        if config.method == "replay":
            _replay_batch(config, backend, batch, seeds, candidate, calibration, timings, progress, finish)
        else:
            _direct_batch(config, model, tokenizer, batch, seeds, candidate, calibration, timings, progress, finish)
    calibration.metadata = _metadata(config, settings, timings, calibration)
    calibration.save(out)
    return calibration


def _check_arguments(config, out, resume, candidate, progress) -> bool:
    """:func:`calibrate`'s arguments checked before any work (StandError: one of the wrong type); ``resume``."""
    if not isinstance(config, CalibrationConfig):
        raise StandError(f"config must be a CalibrationConfig, not {type(config).__name__}")
    if progress is not None and not isinstance(progress, Progress):
        raise StandError(f"progress must be a Progress or None, not {type(progress).__name__}")
    if candidate is not None and not isinstance(candidate, DraftTree):
        raise StandError(f"candidate must be a DraftTree (load_tree(...).tree), not {type(candidate).__name__}")
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise StandError(f"out must be a file path, got {out!r}")
    return check_bool("resume", resume)


def _open_calibration(config: CalibrationConfig, out: str | Path, candidate: DraftTree, resume: bool,
                      prompts: list[Prompt]) -> Calibration:
    """The run to continue: the one saved in ``out`` when resuming (checked against the settings and
    the prompts), else an empty one (``out`` checked writable first: fail now, not after an hour)."""
    if resume and Path(out).exists():
        return resumable(config, out, candidate, prompts)
    calibration = Calibration(candidate, np.zeros(candidate.num_nodes + 1))
    check_writable(out)
    return calibration


def _direct_batch(config, model, tokenizer, batch, seeds, candidate, calibration, timings, progress, finish) -> None:
    """Direct calibration of a batch of prompts, one after the other (:func:`direct_prompt`)."""
    for prompt in batch:
        tick = time.perf_counter()
        alpha_sum, steps, tokens = direct_prompt(config, model, tokenizer, prompt.text, seeds[prompt.id], candidate,
                                                 progress.tokens)
        calibration.add_prompt(prompt.id, alpha_sum, steps, tokens, prompt.text)
        timings["direct_s"] += time.perf_counter() - tick
        finish(prompt.id)


def _replay_batch(config, backend, batch, seeds, candidate, calibration, timings, progress, finish) -> None:
    """Sample the trajectories of a batch of prompts together, then replay each prompt's, its drafting
    noise from its own stream (seeded from the prompt's seed: a resumed run replays as an uninterrupted one)."""
    tick = time.perf_counter()
    progress.stage("sampling")
    requests = [DecodeRequest(p.text, n=config.trajectories, max_new_tokens=config.max_new_tokens,
                              sampling=config.sampling, seed=seeds[p.id], record_probs=True) for p in batch]
    completions = backend.generate(requests, on_tokens=progress.tokens)
    timings["sampling_s"] += time.perf_counter() - tick
    tick = time.perf_counter()
    progress.stage("replay")
    for prompt, samples in zip(batch, completions):
        store = NGramStore()
        randomness = RandomStream.seeded(seeds[prompt.id] + SEED_STRIDE - 1)  # past its trajectories' seeds
        alpha_sum = np.zeros(candidate.num_nodes + 1)
        steps = tokens = 0
        for sample in samples:
            steps += replay_trajectory(sample.prompt_ids, sample.tokens, sample.recorded, candidate, store, randomness,
                                       alpha_sum, stochastic=config.stochastic_drafts, budget=config.max_new_tokens)
            tokens += len(sample.tokens)
        calibration.add_prompt(prompt.id, alpha_sum, steps, tokens, prompt.text)
        finish(prompt.id)
    timings["replay_s"] += time.perf_counter() - tick


def default_candidate(config: CalibrationConfig) -> DraftTree:
    """The candidate tree the config builds (its nodes and prior)."""
    return candidate_tree(config.candidate_nodes, Prior(config.prior_base, config.prior_decay))


def resumable(config: CalibrationConfig, out: str | Path, candidate: DraftTree | None = None,
              prompts: list[Prompt] | None = None) -> Calibration:
    """The interrupted calibration in ``out``, checked to have been made with ``config``'s settings and
    candidate tree, on prompts among ``prompts`` (when given) with the texts it recorded.

    Raises:
        StandError: a corrupt file, one without settings or with other settings (naming them), or a
            prompt this run does not calibrate or whose text changed since.
    """
    calibration = load_calibration(out)
    candidate = candidate if candidate is not None else default_candidate(config)
    settings, previous = asdict(config), calibration.metadata.get("settings")
    if not previous:
        raise StandError(f"cannot resume {out}: it records no settings (metadata.settings; not written by "
                         "treeopt calibrate)")
    texts = None if prompts is None else {p.id: p.text for p in prompts}
    unknown = [p["id"] for p in calibration.per_prompt if texts is not None and p["id"] not in texts]
    if unknown:
        raise StandError(f"cannot resume {out}: it holds prompt {unknown[0]!r}, not among this run's prompts")
    edited = [p["id"] for p in calibration.per_prompt
              if texts is not None and "digest" in p and p["digest"] != prompt_digest(texts[p["id"]])]
    if edited:
        raise StandError(f"cannot resume {out}: prompt {edited[0]!r} has another text than when it was calibrated "
                         f"(the dataset changed since)")
    if previous != settings or calibration.candidate.paths != candidate.paths:
        changed = sorted(k for k in settings if previous.get(k) != settings[k]) or ["candidate tree"]
        raise StandError(f"cannot resume {out}: it was made with other settings ({', '.join(changed)})")
    return calibration


def direct_prompt(config: CalibrationConfig, model, tokenizer, prompt: str | list[int], seed: int, candidate: DraftTree,
                  on_tokens=None) -> tuple[np.ndarray, int, int]:
    """Direct calibration of one prompt (the paper's): decode its trajectories with STAND on the
    candidate tree itself, sharing one store, and count the steps in which each node was accepted.

    Returns:
        ``([N + 1] accepted counts per candidate node, steps, tokens)``.
    """
    store = NGramStore()
    alpha_sum = np.zeros(candidate.num_nodes + 1)
    steps = tokens = 0

    def count(step):
        for position in step.verification.accepted:
            alpha_sum[step.draft.nodes[position]] += 1.0
        if on_tokens is not None:
            on_tokens(len(step.tokens))

    method = Method.parse("stand-det" if config.deterministic_drafts else "stand", candidate, model,
                          copy_tokens=0).ablated(extend=False)
    for trajectory in range(config.trajectories):
        result = generate(model, tokenizer, prompt, method=method, sampling=config.sampling,
                          max_new_tokens=config.max_new_tokens, seed=seed + trajectory, store=store, on_step=count)
        steps += result.stats.target_forwards
        tokens += result.stats.new_tokens
    return alpha_sum, steps, tokens


def _finish_prompt(calibration, config, settings, timings, out, progress, prompt_id) -> None:
    calibration.metadata = _metadata(config, settings, timings, calibration)
    calibration.save(out)
    progress.prompt_done(prompt_id)


def _metadata(config: CalibrationConfig, settings: dict, timings: dict, calibration: Calibration) -> dict:
    return {
        "model": config.model,
        "dataset": config.dataset,
        "samples": len(calibration.per_prompt),
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "method": config.method,
        "candidate_nodes": calibration.candidate.num_nodes,
        "trajectories": config.trajectories,
        "seed": config.seed,
        "tokens": int(sum(p["tokens"] for p in calibration.per_prompt)),
        "steps": round(calibration.steps, 3),
        "expected_acceptance_length": round(calibration.expected_acceptance_length, 6),  # resumed = whole run
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "settings": settings,
        "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
