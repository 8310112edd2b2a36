"""Calibration: estimate alpha(v), the probability that candidate node v is accepted in a step.

STAND paper §3.3 (data-driven tree optimization); DESIGN §4.2. Two estimators write the same file:

- **direct** (the paper's): decode with STAND using the candidate tree itself and count;
  ``alpha(v) = steps in which v was accepted / steps``. Exact, but each step forwards the whole
  candidate tree (~30x a plain step on a CPU for 625 nodes).
- **replay** (ours): sample trajectories by batched plain decoding, recording p at every position
  (:mod:`treeopt.trajectories`), then replay the drafter along each trajectory
  (:func:`replay_trajectory`). From a step start, with the n-gram store as it was there, walk the
  candidate tree: at a node reached with weight w, draft its children c_1..c_m exactly as the engine
  would, compute each child's acceptance probability a_i under the verification rule
  (:func:`stand_runtime.verify.acceptance_chain`), add ``w * a_i`` to alpha(child_i); if some c_j is
  the trajectory's next token y, descend into it with weight ``w * a_j / p(y)``, else stop
  (``E_y[1{c_j = y} a_j / p(y)] = a_j`` level by level). Step starts are not every position: the
  replay draws sequences of steps along the trajectory (see :func:`replay_trajectory`), so that
  alpha-hat is "accepted per step" as direct calibration measures it. Its cost grows with the
  trajectory length, not with the candidate's size.

The calibration file is JSON, written atomically after every prompt, so an interrupted run resumes
without redoing finished prompts.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from stand_runtime import DraftTree, NGramStore, RandomStream, SamplingParams, StandError, __version__, generate
from stand_runtime.decode import default_eos_ids, encode_prompt
from stand_runtime.drafting import gumbel_top_k
from stand_runtime.tree_io import check_writable, write_text_atomic
from stand_runtime.verify import acceptance_chain

from .candidate import Prior, candidate_tree
from .datasets import Prompt, load_prompts
from .trajectories import Trajectory, sample_trajectories

CALIBRATION_FORMAT = "stand-calibration"
CALIBRATION_VERSION = 1
METHODS = ("replay", "direct")


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
        for name in ("samples", "candidate_nodes", "max_new_tokens", "trajectories", "batch_size"):
            if getattr(self, name) < 1:
                raise StandError(f"{name} must be >= 1, got {getattr(self, name)}")
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
class Calibration:
    """Per-node acceptance estimates for a candidate tree.

    Attributes:
        candidate: the candidate tree.
        alpha_sum: ``[N + 1]`` float64 summed per-step acceptance (index 0, the root, unused).
        steps: the denominator: decoding steps (direct) or their importance-weighted estimate (replay).
        per_prompt: for each finished prompt: id, steps, tokens and its own ``alpha_sum`` (resume,
            and errors clustered by prompt).
        metadata: settings, model, timings, version.
    """

    candidate: DraftTree
    alpha_sum: np.ndarray
    steps: float = 0
    per_prompt: list[dict] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)

    @property
    def alpha(self) -> np.ndarray:
        """``[N]`` alpha-hat per candidate draft node, breadth-first order."""
        return self.alpha_sum[1:] / self.steps if self.steps > 0 else np.zeros(self.candidate.num_nodes)

    def alpha_stderr(self) -> np.ndarray:
        """``[N]`` standard error of alpha-hat, clustered by prompt (trajectories are not i.i.d. steps)."""
        if len(self.per_prompt) < 2:
            return np.full(self.candidate.num_nodes, np.inf)
        sums = np.array([p["alpha_sum"] for p in self.per_prompt])[:, 1:]
        steps = np.array([p["steps"] for p in self.per_prompt], dtype=float)[:, None]
        ratio = sums.sum(0) / steps.sum()
        residual = sums - ratio * steps
        clusters = len(self.per_prompt)
        variance = clusters / (clusters - 1) * (residual**2).sum(0) / steps.sum() ** 2
        return np.sqrt(variance)

    @property
    def expected_acceptance_length(self) -> float:
        """1 + sum of alpha-hat over the whole candidate."""
        return 1.0 + float(self.alpha.sum())

    def add_prompt(self, prompt_id: str, alpha_sum: np.ndarray, steps: float, tokens: int) -> None:
        self.alpha_sum += alpha_sum
        self.steps += steps
        self.per_prompt.append({"id": prompt_id, "steps": steps, "tokens": tokens, "alpha_sum": alpha_sum.tolist()})

    def to_json(self) -> dict:
        return {
            "format": CALIBRATION_FORMAT,
            "version": CALIBRATION_VERSION,
            "candidate": [list(p) for p in self.candidate.paths],
            "alpha": [round(float(a), 8) for a in self.alpha],
            "steps": round(self.steps, 6),
            "per_prompt": [{**p, "steps": round(p["steps"], 6), "alpha_sum": [round(a, 8) for a in p["alpha_sum"]]} for p in self.per_prompt],
            "metadata": self.metadata,
        }

    def save(self, path: str | Path) -> Path:
        """Write the calibration file atomically."""
        return write_text_atomic(path, json.dumps(self.to_json()) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file.

    Raises:
        StandError: missing, not JSON, wrong format or version, or inconsistent contents (one line).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StandError(f"calibration file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise StandError(f"corrupt calibration file {path}: {str(error) or 'nested too deeply'}") from None
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise StandError(f"corrupt calibration file {path}: not a {CALIBRATION_FORMAT} file")
    if data.get("version") != CALIBRATION_VERSION:
        raise StandError(f"calibration file {path}: version {data.get('version')} is not supported")
    try:
        candidate = DraftTree.from_paths(data["candidate"])
        if [list(p) for p in candidate.paths] != data["candidate"]:
            raise StandError("candidate paths are not in breadth-first order")
        per_prompt = list(data["per_prompt"])
        alpha_sum = np.zeros(candidate.num_nodes + 1)
        for entry in per_prompt:
            label = entry.get("id") if isinstance(entry, dict) else entry
            if not isinstance(entry, dict) or not isinstance(entry.get("alpha_sum"), list):
                raise StandError(f"prompt {label!r} has no alpha_sum list")
            if not all(_is_number(a) and a >= 0 for a in entry["alpha_sum"]):
                raise StandError(f"prompt {label!r} has alpha_sum values that are not finite numbers >= 0")
            if not _is_number(entry.get("steps")) or entry["steps"] < 0:
                raise StandError(f"prompt {label!r} has steps {entry.get('steps')!r} (a finite number >= 0 expected)")
            row = np.asarray(entry["alpha_sum"], dtype=float)
            if row.shape != alpha_sum.shape:
                raise StandError(f"prompt {label!r} has {row.shape[0]} values for {alpha_sum.shape[0]} nodes")
            alpha_sum += row
        if not _is_number(data["steps"]):
            raise StandError(f"steps {data['steps']!r} is not a finite number")
        steps = float(data["steps"])
        if abs(steps - sum(float(p["steps"]) for p in per_prompt)) > 1e-6 * max(1.0, steps):
            raise StandError("steps do not add up over prompts")
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise StandError("metadata is not an object")
    except StandError as error:
        raise StandError(f"corrupt calibration file {path}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StandError(f"corrupt calibration file {path}: bad or missing field ({error})") from None
    return Calibration(candidate, alpha_sum, steps, per_prompt, dict(metadata))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Progress:
    """Callbacks the CLI uses to draw progress (the package never imports rich)."""

    start: Callable[[int, int], None] = lambda prompts, tokens: None
    tokens: Callable[[int], None] = lambda count: None
    prompt_done: Callable[[str], None] = lambda prompt_id: None
    stage: Callable[[str], None] = lambda name: None


def replay_trajectory(
    trajectory: Trajectory,
    tree: DraftTree,
    store: NGramStore,
    randomness: RandomStream,
    alpha_sum: np.ndarray,
    *,
    stochastic: bool = True,
    budget: int | None = None,
    segmentations: int = 4,
) -> int:
    """Replay the drafter along one trajectory, adding per-step acceptance to ``alpha_sum``.

    Decoding starts a step only where the previous one ended, and easy stretches of text are covered
    by few long steps, so averaging over *every* start position overweights them (an inspection
    paradox: +30% on tau for HumanEval here). The replay instead walks ``segmentations`` independent
    step sequences along the trajectory. From a step start it walks the candidate tree as the
    module docstring says, and also weighs each way the step can end on the trajectory: at depth d
    by recovering y after every child was rejected, ``w_d (1 - sum a) residual(y) / p(y)``, or with a
    bonus token where nothing was drafted, ``w_d``. The next start is drawn in proportion to those
    weights (greedy decoding makes them 0/1, so the replay then takes exactly the steps decoding
    takes). ``alpha_sum`` receives the contributions of the visited starts, and the return value
    counts them: alpha-hat = accepted per step, the quantity direct calibration measures.

    Args:
        trajectory: the sampled trajectory with its recorded distributions.
        tree: the candidate tree.
        store: the n-gram store as the engine would hold it (fed here as decoding would feed it:
            prompt positions first, then each position after the steps starting there).
        randomness: Gumbel noise for stochastic drafting and uniforms for drawing step ends.
        alpha_sum: ``[N + 1]`` accumulator, updated in place.
        stochastic: Gumbel-Top-K drafts and recursive rejection sampling; False: q's top-m and the
            deterministic-draft rule.
        budget: the max_new_tokens the engine would run with (it drafts no deeper than the tokens
            left); None = the trajectory's length.
        segmentations: independent step sequences walked per trajectory (variance reduction).

    Returns:
        The number of steps replayed.
    """
    sequence = trajectory.sequence
    prompt_len = len(trajectory.prompt)
    generated = trajectory.tokens
    budget = len(generated) if budget is None else budget
    store.update_sequence(sequence, range(prompt_len - 1), trajectory.store_ids, trajectory.store_probs)
    max_n = store.max_n
    next_starts = [0] * segmentations
    steps = 0
    sparse_cache: dict[int, dict[int, float]] = {}

    def target_at(index: int) -> dict[int, float]:
        table = sparse_cache.get(index)
        if table is None:
            table = dict(zip(trajectory.target_ids[index].tolist(), trajectory.target_probs[index].tolist()))
            sparse_cache[index] = table
        return table

    for start in range(len(generated)):
        position = prompt_len - 1 + start
        for walker, walker_start in enumerate(next_starts):
            if walker_start != start:
                continue
            steps += 1
            ends: dict[int, float] = {}
            node, weight, index = 0, 1.0, start
            context = tuple(sequence[max(0, position + 1 - max_n) : position + 1])
            while index < len(generated):
                kids = tree.children[node] if index < budget - 1 else ()
                entry = store.lookup(context) if kids else None
                if entry is None:  # nothing drafted here: the step ends with a bonus token
                    ends[index + 1] = ends.get(index + 1, 0.0) + weight
                    break
                m = min(len(kids), len(entry.id_list))
                if stochastic:
                    slots = gumbel_top_k(entry.log_q, m, randomness.gumbel(len(entry.id_list))).tolist()
                else:
                    slots = list(range(m))
                target = target_at(index)
                on_support = [target.get(token, 0.0) for token in entry.id_list]
                accept, residual = acceptance_chain(on_support, entry.q.tolist() if stochastic else None, slots, stochastic)
                for child, prob in zip(kids, accept):
                    alpha_sum[child] += weight * prob
                next_token = generated[index]
                p_next = target.get(next_token, 0.0)
                if p_next <= 0.0:
                    break
                rejected = max(0.0, 1.0 - sum(accept))  # the step may end here: y recovered from the residual
                residual_total = 1.0 - sum(on_support) + sum(residual)
                if rejected > 0.0 and residual_total > 0.0:
                    slot_of = entry.id_list.index(next_token) if next_token in entry.id_list else None
                    residual_y = residual[slot_of] if slot_of is not None else p_next
                    ends[index + 1] = ends.get(index + 1, 0.0) + weight * rejected * residual_y / residual_total / p_next
                match = next((i for i, slot in enumerate(slots) if entry.id_list[slot] == next_token), None)
                if match is None or accept[match] <= 0.0:
                    break
                weight *= accept[match] / p_next
                node = kids[match]
                context = (context + (next_token,))[-max_n:]
                index += 1
            next_starts[walker] = _draw_end(ends, start + 1, randomness.uniform())
        store.update_sequence(sequence, [position], trajectory.store_ids[position : position + 1], trajectory.store_probs[position : position + 1])
    return steps


def _draw_end(ends: dict[int, float], fallback: int, uniform: float) -> int:
    """Draw where the replayed step ends, with probability proportional to its weight."""
    total = sum(ends.values())
    if total <= 0.0:
        return fallback
    threshold, cumulative = uniform * total, 0.0
    for end, weight in sorted(ends.items()):
        cumulative += weight
        if threshold < cumulative:
            return end
    return max(ends)


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
    """Estimate alpha(v) for every candidate node on the configured prompts; save to ``out``.

    Args:
        config: the settings.
        model, tokenizer: the target model (see :func:`stand_runtime.load_model`).
        out: the calibration file, rewritten atomically after every prompt.
        resume: continue the run saved in ``out`` (same settings), skipping its finished prompts.
        candidate: the candidate tree; None builds one from the config (nodes and prior).
        prompts: the prompts; None loads them from the config's dataset.
        progress: progress callbacks.

    Returns:
        The :class:`Calibration` (also saved).

    Raises:
        StandError: bad dataset, unwritable output, or a resume file with other settings.
    """
    progress = progress or Progress()
    if prompts is None:
        prompts = load_prompts(config.dataset, field=config.field, samples=config.samples, offset=config.offset)
    if candidate is None:
        candidate = candidate_tree(config.candidate_nodes, Prior(config.prior_base, config.prior_decay))
    settings = asdict(config)
    if resume and Path(out).exists():
        calibration = load_calibration(out)
        previous = calibration.metadata.get("settings", {})
        if previous != settings or calibration.candidate.paths != candidate.paths:
            changed = sorted(k for k in settings if previous.get(k) != settings[k]) or ["candidate tree"]
            raise StandError(f"cannot resume {out}: it was made with other settings ({', '.join(changed)})")
    else:
        calibration = Calibration(candidate, np.zeros(candidate.num_nodes + 1))
        check_writable(out)  # fail now, not after an hour
    done = {p["id"] for p in calibration.per_prompt}
    todo = [p for p in prompts if p.id not in done]
    timings = dict(calibration.metadata.get("timings", {"sampling_s": 0.0, "replay_s": 0.0, "direct_s": 0.0}))
    progress.start(len(todo), len(todo) * config.trajectories * config.max_new_tokens)
    params = config.sampling
    eos = default_eos_ids(model, tokenizer)
    generator = torch.Generator().manual_seed(config.seed)
    randomness = RandomStream.seeded(config.seed + 1)
    for start in range(0, len(todo), max(1, config.batch_size // config.trajectories)):
        batch = todo[start : start + max(1, config.batch_size // config.trajectories)]
        encoded = [encode_prompt(tokenizer, p.text) for p in batch]
        if config.method == "replay":
            tick = time.perf_counter()
            progress.stage("sampling")
            repeated = [ids for ids in encoded for _ in range(config.trajectories)]
            trajectories = sample_trajectories(
                model, repeated, params, config.max_new_tokens, eos, generator, config.batch_size, progress.tokens
            )
            timings["sampling_s"] += time.perf_counter() - tick
            tick = time.perf_counter()
            progress.stage("replay")
            for number, prompt in enumerate(batch):
                store = NGramStore()
                alpha_sum = np.zeros(candidate.num_nodes + 1)
                steps = tokens = 0
                for trajectory in trajectories[number * config.trajectories : (number + 1) * config.trajectories]:
                    steps += replay_trajectory(
                        trajectory, candidate, store, randomness, alpha_sum,
                        stochastic=config.stochastic_drafts, budget=config.max_new_tokens,
                    )
                    tokens += len(trajectory.tokens)
                calibration.add_prompt(prompt.id, alpha_sum, steps, tokens)
                _finish_prompt(calibration, config, settings, timings, out, progress, prompt.id)
            timings["replay_s"] += time.perf_counter() - tick
        else:
            for prompt, ids in zip(batch, encoded):
                tick = time.perf_counter()
                store = NGramStore()
                alpha_sum = np.zeros(candidate.num_nodes + 1)
                steps = tokens = 0

                def count(draft, verification):
                    for position in verification.accepted:
                        alpha_sum[draft.nodes[position]] += 1.0

                for trajectory in range(config.trajectories):
                    result = generate(
                        model, tokenizer, ids, method="stand-det" if config.deterministic_drafts else "stand",
                        tree=candidate, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
                        max_new_tokens=config.max_new_tokens, seed=config.seed + 1000 * len(calibration.per_prompt) + trajectory,
                        store=store, eos_token_ids=eos, on_step=count, on_tokens=lambda t: progress.tokens(len(t)),
                    )
                    steps += result.stats.target_forwards
                    tokens += result.stats.new_tokens
                calibration.add_prompt(prompt.id, alpha_sum, steps, tokens)
                timings["direct_s"] += time.perf_counter() - tick
                _finish_prompt(calibration, config, settings, timings, out, progress, prompt.id)
    calibration.metadata = _metadata(config, settings, timings, calibration)
    calibration.save(out)
    return calibration


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
        "expected_acceptance_length": calibration.expected_acceptance_length,
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "settings": settings,
        "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
