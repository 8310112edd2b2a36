"""The acceptance seed of value-sized dynamic trees, measured on the calibration prompts (docs/algorithms.md §3.7).

A value-sized dynamic tree (``dynamic-auto``) needs P(path accepted) as a function of a node's
best-first score (:class:`stand_runtime.sizing.value.AcceptanceMap`). :func:`measure_acceptance` decodes
the calibration prompts with STAND on a fixed-budget dynamic tree (which also observes the low-score
bins a value-sized tree rarely drafts) and counts, per map bin and kind (drawn, copied), the nodes
drafted and those whose path was accepted. A path's acceptance depends on the path alone, so the
counts transfer to the value-sized prefix of the same best-first order. :func:`calibrate_acceptance`
saves them (:class:`stand_runtime.sizing.acceptance_seed.AcceptanceSeed`) next to the calibration and
in the cache the runtime reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from stand_runtime import Method, NGramStore, generate
from stand_runtime.sizing.acceptance_seed import AcceptanceSeed, find_acceptance_seed, model_identity, seed_path
from stand_runtime.errors import StandError
from stand_runtime.drafters import DYNAMIC_MAX_N, STORE_TOP_K
from stand_runtime.sizing.value import AcceptanceMap, copied_mask, value_scores

DEFAULT_NODES = 80
"""Nodes of the fixed-budget dynamic tree the seed is measured with (the dynamic tree's default budget)."""


def observe_step(acceptance: AcceptanceMap, settled) -> None:
    """Add one settled step (:class:`stand_runtime.engine.row.Settled`) to ``acceptance``: per
    drafted node its score, kind, and whether its path was accepted (drafts without scores are skipped)."""
    draft = settled.draft
    if draft.scores is None or draft.num_nodes == 0:
        return
    accepted = np.zeros(draft.num_nodes, dtype=bool)
    accepted[[a - 1 for a in settled.verification.accepted if 0 < a <= draft.num_nodes]] = True
    acceptance.observe(value_scores(draft), copied_mask(draft), accepted)  # copied: by chain position


def measure_acceptance(model, tokenizer, prompts: list[str], seeds: list[int], *, sampling, max_new_tokens: int,
                       nodes: int = DEFAULT_NODES, deterministic: bool = False,
                       on_tokens: Callable[[int], None] | None = None) -> AcceptanceMap:
    """Decode each prompt (text or token ids, seeded by its entry of ``seeds``) with STAND on
    ``dynamic-<nodes>`` (``stand-det`` when ``deterministic``; a fresh Python store per prompt, so every
    node is scored) and count acceptance per score bin (module docstring); the :class:`AcceptanceMap`.
    ``on_tokens``: called with the tokens of every step.

    Raises:
        StandError: bad prompts, seeds or settings (as :func:`stand_runtime.generate`).
    """
    for name, values in (("prompts", prompts), ("seeds", seeds)):
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
            raise StandError(f"{name} must be a list, got {type(values).__name__}")
    if len(prompts) != len(seeds):
        raise StandError(f"one seed per prompt: {len(prompts)} prompts, {len(seeds)} seeds")
    acceptance = AcceptanceMap()
    method = Method.parse("stand-det" if deterministic else "stand", f"dynamic-{nodes}", model)

    def count(settled) -> None:
        observe_step(acceptance, settled)
        if on_tokens is not None:
            on_tokens(len(settled.tokens))

    for prompt, seed in zip(prompts, seeds, strict=True):
        store = NGramStore(top_k=STORE_TOP_K, max_n=DYNAMIC_MAX_N)
        generate(model, tokenizer, prompt, method=method, sampling=sampling, max_new_tokens=max_new_tokens,
                 seed=seed, store=store, on_step=count)
    return acceptance


def acceptance_path(calibration_out: str | Path) -> Path:
    """Where the seed goes next to a calibration file: ``NAME.calibration.json`` (or ``NAME.json``) →
    ``NAME.acceptance.json``."""
    out = Path(calibration_out)
    name = out.name
    for suffix in (".calibration.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return out.with_name(name + ".acceptance.json")


def calibrate_acceptance(config, model, tokenizer, prompts: list, out: str | Path, *, nodes: int = DEFAULT_NODES,
                         on_tokens: Callable[[int], None] | None = None) -> tuple[AcceptanceSeed, list[Path]]:
    """Measure the acceptance seed on a calibration's prompts (:func:`measure_acceptance`, prompt i seeded
    ``config.seed + 1000 i`` as :class:`treeopt.CalibrationConfig` seeds it) and save it at ``out`` and,
    where it replaces the one in use (:func:`_replaces`), at the model's
    :func:`stand_runtime.sizing.acceptance_seed.seed_path`; (the seed, the paths written).

    Raises:
        StandError: unwritable paths, or what :func:`measure_acceptance` raises.
    """
    from .calibrate import SEED_STRIDE

    seeds = [config.seed + SEED_STRIDE * number for number in range(len(prompts))]
    acceptance = measure_acceptance(model, tokenizer, [p.text for p in prompts], seeds, sampling=config.sampling,
                                    max_new_tokens=config.max_new_tokens, nodes=nodes,
                                    deterministic=config.deterministic_drafts, on_tokens=on_tokens)
    metadata = {"model_spec": config.model, "dataset": config.dataset, "samples": len(prompts),
                "offset": config.offset, "tree": f"dynamic-{nodes}", "temperature": config.temperature,
                "top_p": config.top_p, "top_k": config.top_k, "max_new_tokens": config.max_new_tokens,
                "seed": config.seed, "deterministic_drafts": config.deterministic_drafts}
    seed = AcceptanceSeed.from_map(model_identity(model), acceptance, metadata)
    written = [seed.save(out)]
    if _replaces(seed, model):
        cached = seed_path(seed.model)
        cached.parent.mkdir(parents=True, exist_ok=True)
        written.append(seed.save(cached))
    return seed, written


def _replaces(seed: AcceptanceSeed, model) -> bool:
    """True when ``seed`` is to be the one value-sized trees read for ``model``: the seed in use (cached
    or bundled, :func:`stand_runtime.sizing.acceptance_seed.find_acceptance_seed`) counted no more drafted
    nodes, or there is none (or a bad one). A smaller measurement (a quick test run) does not replace
    a larger one machine-wide; it is written next to the calibration only."""
    try:
        current = find_acceptance_seed(model)
    except StandError:
        return True
    return current is None or float(current.drafted.sum()) <= float(seed.drafted.sum())


__all__ = ["DEFAULT_NODES", "acceptance_path", "calibrate_acceptance", "measure_acceptance", "observe_step"]
