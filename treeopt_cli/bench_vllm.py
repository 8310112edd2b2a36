"""``treeopt bench-vllm``: vLLM plain decoding, its proposers and STAND on this machine, interleaved."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import typer

from stand_runtime.errors import counted

from . import loading, render
from .app import app, console, one_line_errors
from .options import (dtype_name, DATASET_HELP, DTYPE_HELP, FIELD_HELP, MODEL_HELP, OFFSET_HELP, PRIOR_HELP, TEMPERATURE_HELP,
                      TOP_P_HELP, check_budget_fits, check_outputs, check_prior_option, json_path, sampling_options,
                      ResultsFile)

METHODS_HELP = ("Comma-separated: ar (vLLM's plain decoding), ngram, suffix, stand (one chain length K for every "
                "request), stand-auto (each request's chain length by expected tokens per second, at most 16), "
                "stand+noprior and stand-auto+noprior (without the successor prior), hf (this toolkit's engine, plain "
                "decoding).")


@app.command("bench-vllm")
@one_line_errors
def bench_vllm(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    dataset: str = typer.Option("humaneval", help=DATASET_HELP),
    field: Optional[str] = typer.Option(None, help=FIELD_HELP),
    samples: int = typer.Option(5, help="Prompts."),
    offset: Optional[int] = typer.Option(None, help=OFFSET_HELP),
    methods: str = typer.Option("ar,ngram,suffix,stand", help=METHODS_HELP),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens per sample at most."),
    seed: int = typer.Option(0, help="Base seed, an integer in [0, 2**64): prompt i's request uses seed + 1000 i."),
    trajectories: int = typer.Option(1, help="Samples per prompt (1 to 4096), in one request (n): STAND's share the prompt's store."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", metavar="", help="Decode every sample to --max-new-tokens (equal token counts for speed)."),
    json_out: Optional[Path] = typer.Option(None, "--json", callback=json_path, help="Write the results as JSON (after every prompt; to -, /dev/stdout or a pipe once, at the end, the tables then on stderr)."),
    dtype: str = typer.Option("float32", callback=dtype_name, help=DTYPE_HELP),
    k: str = typer.Option("auto", help="Draft tokens per step for stand (auto: from the calibrated tree and vLLM's "
                          "latency here) and ngram/suffix (auto: their defaults 5/16), or an integer."),
    prior: bool = typer.Option(True, "--prior/--no-prior", help=PRIOR_HELP + " Measured with this toolkit's engine "
                               "on the same weights, then handed to vLLM's STAND proposer."),
) -> None:
    """Compare vLLM's plain decoding, its ngram and suffix proposers and STAND's (needs the vllm extra)."""
    from stand_runtime import DEFAULT_MODEL, load_tokenizer
    from stand_runtime.engine.row import check_budget
    from stand_runtime.target.prompts import encode_prompt
    from stand_runtime.vllm import check_model_folder, check_version, check_vllm_dtype, default_model_folder
    from treeopt import load_prompts
    from treeopt.evaluate.bench import check_bench_settings, default_offset
    from treeopt.evaluate.vllm_bench import NOPRIOR_SUFFIX, check_greedy_samples, parse_k, parse_vllm_methods

    check_outputs({"--json": json_out}, {"--dataset": dataset})
    out = ResultsFile(json_out, console, ctx)
    check_vllm_dtype(dtype)
    check_budget(max_new_tokens)
    check_budget_fits(model, max_new_tokens)
    names = parse_vllm_methods(methods)
    check_prior_option(ctx, names, prior, [name.startswith("stand") for name in names],
                       [name.endswith(NOPRIOR_SUFFIX) for name in names])
    chain = parse_k(k, names)
    check_greedy_samples(temperature, trajectories)  # vLLM refuses greedy n > 1 once every engine has started
    check_version()
    sampling = sampling_options(temperature, top_p)
    check_bench_settings(samples, trajectories, seed)
    offset = default_offset(dataset, offset)
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    folder = default_model_folder() if model == DEFAULT_MODEL else check_model_folder(model)
    tokenizer = load_tokenizer(model)
    ids = [encode_prompt(tokenizer, prompt.text) for prompt in prompts]
    with tempfile.TemporaryDirectory(prefix="stand-prior-") as scratch:
        engines, ks, hf_backend, priors = _start(names, chain, folder, model, dtype, ids[0], trajectories,
                                                     _prior_file(names, model, dtype, sampling, prior, scratch))
        settings = {"engine": "vllm", "model": model, "dtype": dtype, "dataset": dataset, "samples": samples,
                    "offset": offset, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
                    "seed": seed, "n": trajectories, "ignore_eos": ignore_eos, "k": {name: ks.get(name) for name in names},
                    "prior": bool(priors)}
        results = _decode(engines, hf_backend, ids, prompts, sampling, settings, out, priors)
    title = (f"vLLM on this CPU: {counted(len(prompts), 'prompt')} from {dataset} (offset {offset}) x n={trajectories}, "
             f"{max_new_tokens} tokens, T={temperature}, top-p={top_p}")
    _report(results, title, json_out)


def _prior_file(names: list, model: str, dtype: str, sampling, enabled: bool, scratch: str) -> tuple[Optional[str], tuple]:
    """The successor prior for the STAND engines, measured (once, cached) with this toolkit's engine
    on the same weights and written to a file in ``scratch`` for vLLM's proposer; (its path or None,
    the loaded target and tokenizer, kept for ``hf``, or ())."""
    from treeopt.evaluate.vllm_bench import NOPRIOR_SUFFIX

    if not enabled or not any(name.startswith("stand") and not name.endswith(NOPRIOR_SUFFIX) for name in names):
        return None, ()
    from stand_runtime.files import write_bytes_atomic

    target, tokenizer = loading.load_model(model, dtype)
    found = loading.successor_prior(target, tokenizer, ["stand"], sampling)
    path = Path(scratch) / "prior.npz"
    write_bytes_atomic(path, found.to_bytes())
    return str(path), (target, tokenizer)


def _start(names: list, chain: Optional[int], folder, model: str, dtype: str, probe_ids: list, trajectories: int,
           prior: tuple):
    """Start the vLLM engines (and the HF reference for ``hf``), saying what they chose; (engines, ks, hf
    backend, the labels of the engines drafting with the successor prior). ``prior``: :func:`_prior_file`'s answer."""
    from treeopt.evaluate.vllm_bench import NOPRIOR_SUFFIX, hf_reference, start_engines

    path, loaded = prior
    with console.status("starting vLLM engines (~1 minute each) ..."), loading.runtime_warnings():
        engines, ks = start_engines(
            names, chain, folder, dtype, probe_ids, trajectories,
            on_measure=lambda: console.print("measuring vLLM's step latency on this machine (once, cached) ..."),
            on_curve=lambda curve, chosen: console.print(render.curve_table(curve, chosen, every=1)),
            stand_options={"prior": path} if path else None)
    hf_backend = None
    if "hf" in names:
        hf_backend = hf_reference(*(loaded or loading.load_model(model, dtype)), trajectories)
    priors = {label for label, (name, _) in engines.items()
              if path is not None and name.startswith("stand") and not name.endswith(NOPRIOR_SUFFIX)}
    return engines, ks, hf_backend, priors


def _decode(engines: dict, hf_backend, ids: list, prompts: list, sampling, settings: dict, out: ResultsFile,
            priors: set) -> list:
    """Every prompt on every engine, saving after each prompt (``priors``: labels drafting with the successor prior)."""
    from treeopt.evaluate.bench import results_json
    from treeopt.evaluate.vllm_bench import run_vllm_bench

    def save(done: int, partial: list) -> None:
        out.progress(lambda: results_json(partial, {**settings, "prompts_done": done}))

    with render.progress(console) as bar:
        task = bar.add_task("decoding", total=len(prompts))
        results = run_vllm_bench(engines, ids, [p.id for p in prompts], n=settings["n"], sampling=sampling,
                                 max_new_tokens=settings["max_new_tokens"], seed=settings["seed"],
                                 ignore_eos=settings["ignore_eos"], hf_backend=hf_backend, priors=priors,
                                 on_prompt=lambda done, partial: (save(done, partial), bar.advance(task)))
    out.done(lambda: results_json(results, {**settings, "prompts_done": len(prompts)}))
    return results


def _report(results: list, title: str, json_out: Optional[Path]) -> None:
    from treeopt.evaluate.bench import speedup_intervals, speedups

    console.print(render.vllm_bench_table(results, speedups(results), speedup_intervals(results), title))
    if json_out is not None:
        console.print(f"results written to {json_out}")
