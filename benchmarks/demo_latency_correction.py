"""A latency profile measured under load, corrected by the run's own forwards (issue 23, docs §3.7).

Decodes one HumanEval prompt with STAND's value-sized tree (``dynamic-auto``) on the default model
twice: with this machine's cached profile, and with that profile as a loaded machine would have
measured it (one token 15x slower, and every size past it costing the same: a flat curve, as the
profile of 1135 ms for one token measured under load in issue 23 was). Prints the sizes the rule chose
step by step and the latency model's modelled seconds at 1, 4, 8 and 16 tokens after the run, for
both; the loaded run's sizes start far too large and reach the cached run's within a few steps.

Sizes alone do not say how wrong a step was: near the best size the expected rate is flat, so 5 and
15 nodes can be worth the same. Each sized step is also priced with the cached profile as the truth:
its *efficiency* is the expected tokens per second of the size chosen over that of the best size for
the same candidates, ``(1 + sum_{i<=n} P_i) / t(1 + n)`` against its maximum over n (P: the rule's own
calibrated estimates). The table gives the mean efficiency over step windows for both runs.

Run (quiet machine): ``python benchmarks/demo_latency_correction.py --json out.json``.
"""

from __future__ import annotations

import argparse

import numpy as np

from stand_runtime import LatencyProfile, Method, SamplingParams, SizingSession, generate, load_model
from stand_runtime.files import write_json_atomic
from stand_runtime.target.latency import cached_latency, profile_name
from treeopt.data.datasets import load_prompts


def loaded(profile: LatencyProfile) -> LatencyProfile:
    """The profile as measured under load: t(1) x 15, every larger size at the same cost."""
    slow = profile.seconds[0] * 15
    return LatencyProfile(profile.sizes, tuple(slow * (1 + 1e-4 * (s - 1)) for s in profile.sizes))


WINDOWS = ((0, 10), (10, 20), (20, 40), (40, None))
"""Step windows (decode steps, 0-based) the efficiency is averaged over."""


def _mean(values: list) -> float | None:
    """The mean of the steps that had candidates (None: a store miss, nothing to size), None if none."""
    kept = [v for v in values if v is not None]
    return round(float(np.mean(kept)), 3) if kept else None


def efficiency(acceptance: np.ndarray, chosen: int, truth: LatencyProfile) -> float:
    """Expected tokens per second of drafting the first ``chosen`` of candidates with P ``acceptance``
    (``[L]``), over the best size's, both priced by ``truth``."""
    gains = 1.0 + np.concatenate([[0.0], np.cumsum(acceptance)])
    rates = gains / np.array([truth.at(float(n)) for n in range(1, len(gains) + 1)])
    return float(rates[chosen] / rates.max())


def run(model, tokenizer, prompt: str, profile: LatencyProfile, tokens: int, truth: LatencyProfile) -> dict:
    """One decode with the value rule built on ``profile`` as if it were this machine's cached one;
    every sized step priced by ``truth`` (:func:`efficiency`)."""
    from stand_runtime.sizing.acceptance_seed import seeded_map
    from stand_runtime.target.latency import target_identity

    method = Method.parse("stand", "dynamic-auto", model)
    sizing = SizingSession(profile, seeded_map(model), target=target_identity(model))
    import stand_runtime.sizing.allocation as allocation

    steps, offered = [], []
    found_by = allocation.candidates

    def recorded(draft, *args):  # the allocator's candidates of a step: their P
        found = found_by(draft, *args)
        offered.append(found.p)
        return found

    allocation.candidates = recorded
    result = generate(model, tokenizer, prompt, method=method, sampling=SamplingParams(0.6, 0.95, 0),
                      max_new_tokens=tokens, seed=0, eos_token_ids=[], sizing=sizing)
    allocation.candidates = found_by
    rule = sizing.last_rule
    if len(offered) != len(rule.batches):
        raise SystemExit(f"{len(offered)} candidate sets for {len(rule.batches)} sized forwards: the engine changed")
    for acceptance, sizes in zip(offered, rule.batches):  # one row a forward: one draft a step
        steps.append(efficiency(acceptance, sizes[0], truth) if len(acceptance) else None)
    latency = rule.latency
    return {"sizes": list(rule.sizes), "acceptance_length": result.stats.acceptance_length,
            "efficiency": steps,
            "efficiency_by_window": {f"{a}-{'' if b is None else b - 1}": _mean(steps[a:b]) for a, b in WINDOWS},
            "modelled_ms": {n: 1000 * latency.at(n) for n in (1, 4, 8, 16)},
            "profile_ms": {n: 1000 * profile.at(n) for n in (1, 4, 8, 16)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offset", type=int, default=70, help="HumanEval prompt")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, tokenizer = load_model("smollm2-135m")
    prompt = load_prompts("humaneval", samples=1, offset=args.offset)[0].text
    cached = cached_latency(model, profile_name(model))
    out = {"cached": run(model, tokenizer, prompt, cached, args.tokens, cached),
           "loaded": run(model, tokenizer, prompt, loaded(cached), args.tokens, cached)}
    for name, row in out.items():
        print(f"{name:7s} sizes, first 30 steps: {row['sizes'][:30]}")
        print(f"{'':7s} profile ms at 1/4/8/16 tokens {[round(v, 1) for v in row['profile_ms'].values()]}, "
              f"after the run {[round(v, 1) for v in row['modelled_ms'].values()]}; "
              f"acceptance length {row['acceptance_length']:.2f}")
        print(f"{'':7s} efficiency (expected tokens/s of the size chosen / of the best size, cached profile as "
              f"the truth) by step window (steps with candidates) {row['efficiency_by_window']}")
    if args.json:
        write_json_atomic(args.json, out)


if __name__ == "__main__":
    main()
