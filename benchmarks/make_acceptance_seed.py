"""Measure the bundled acceptance seed of the default model (docs/algorithms.md §3.7, docs/trees.md §8.5).

The same decode ``treeopt calibrate`` ends with (``dynamic-80``, Gumbel-Top-K drafts, a fresh store per
prompt), on the bundled calibration's prompts and settings (``trees/stand-smollm2-humaneval.calibration.json``:
30 HumanEval prompts, T 0.6, top-p 0.95, 256 tokens, seed 0), written to
``trees/stand-smollm2-humaneval.acceptance.json`` and to the cache. Not timed: run it on any machine.

Run: ``python benchmarks/make_acceptance_seed.py`` (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

from stand_runtime.target.models import load_model
from treeopt import CalibrationConfig
from treeopt.data.datasets import load_prompts
from treeopt.optimize.acceptance import calibrate_acceptance

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "trees" / "stand-smollm2-humaneval.calibration.json"
OUT = ROOT / "trees" / "stand-smollm2-humaneval.acceptance.json"


def main() -> None:
    settings = json.loads(CALIBRATION.read_text())["metadata"]["settings"]
    fields = CalibrationConfig.__dataclass_fields__
    config = CalibrationConfig(**{k: v for k, v in settings.items() if k in fields})
    model, tokenizer = load_model(config.model)
    prompts = load_prompts(config.dataset, field=config.field, samples=config.samples, offset=config.offset)
    seed, paths = calibrate_acceptance(config, model, tokenizer, prompts, OUT)
    print(f"acceptance seed for {seed.model}: {int(seed.drafted.sum())} nodes drafted, "
          f"{int(seed.accepted.sum())} on accepted paths; written to {', '.join(map(str, paths))}")


if __name__ == "__main__":
    main()
