"""The ``treeopt`` command line: thin Typer commands over the ``treeopt`` and ``stand_runtime`` packages.

Each command parses options into the packages' frozen configs, calls them, and renders results with
rich. Bad input surfaces as a one-line ``error: ...`` and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from stand_runtime import StandError, __version__
from treeopt import render

app = typer.Typer(
    name="treeopt",
    help="STAND: model-free speculative decoding with a logit n-gram store, and draft-tree optimization.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# markup off: file names and error messages print literally (a "[" in a path is not a style tag)
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)


def one_line_errors(command):
    """Print StandError (and other expected input errors) as ``error: ...`` and exit 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except StandError as error:
            err_console.print(Text("error: ", style="bold red") + Text(str(error)), highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        console.print(f"treeopt {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """STAND toolkit: calibrate, export and inspect draft trees; decode with them."""


@app.command()
@one_line_errors
def generate(
    prompt: str = typer.Argument(..., help="Prompt text (wrapped in the model's chat template)."),
    model: str = typer.Option("smollm2-135m", help="Model: smollm2-135m, a .gguf file, a model folder or a hub id."),
    tree: Optional[str] = typer.Option(None, help="Draft tree: a JSON file or a bundled name (default: the bundled default)."),
    method: str = typer.Option("stand", help="stand | stand-det | pld | recycle | ar"),
    temperature: float = typer.Option(0.6, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(0.95, help="Nucleus mass."),
    top_k: int = typer.Option(0, help="Top-k (0 = off)."),
    max_new_tokens: int = typer.Option(256, help="Tokens to generate at most."),
    seed: Optional[int] = typer.Option(None, help="Seed for every random draw."),
    feed_rejected: bool = typer.Option(False, help="STAND: feed the store at rejected tree nodes too."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the statistics to this JSON file."),
) -> None:
    """Decode one prompt, streaming the text, then show the decoding statistics."""
    from stand_runtime import SamplingParams, generate as run_generate, load_model
    from stand_runtime.decode import METHODS, STORE_METHODS, resolve_tree
    from stand_runtime.tree_io import check_writable

    if not prompt.strip():
        raise StandError("empty prompt")
    if method not in METHODS:
        raise StandError(f"unknown method {method!r} (valid: {', '.join(METHODS)})")
    if feed_rejected and method not in STORE_METHODS:
        raise StandError(f"--feed-rejected applies to stand and stand-det, not {method!r}")
    if max_new_tokens < 1:
        raise StandError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    SamplingParams(temperature, top_p, top_k)
    if method in ("stand", "stand-det", "recycle"):
        resolve_tree(tree)
    if json_out is not None:
        check_writable(json_out)
    with console.status(f"loading {model} ..."):
        target, tokenizer = load_model(model)
    streamer = _TextStreamer(tokenizer)
    result = run_generate(
        target, tokenizer, prompt, method=method, tree=tree, temperature=temperature, top_p=top_p, top_k=top_k,
        max_new_tokens=max_new_tokens, seed=seed, on_tokens=streamer, feed_rejected=feed_rejected,
    )
    streamer.finish()
    console.print(render.stats_table(result.stats, title=f"{method} on {model}"))
    if json_out is not None:
        write_json(json_out, {"method": method, "model": model, "tree": tree, "text": result.text, "stats": result.stats.as_dict()})
        console.print(f"statistics written to {json_out}")


@app.command()
@one_line_errors
def candidate(
    nodes: int = typer.Option(625, help="Draft nodes in the candidate tree."),
    base: float = typer.Option(0.9, help="Prior a(r) = base / (r + 1)^decay: value of the rank-0 child."),
    decay: float = typer.Option(1.0, help="Prior decay over ranks."),
    max_width: int = typer.Option(10, help="Children per node at most (<= 10, the store's k)."),
    out: Path = typer.Option(..., help="Where to write the tree JSON."),
) -> None:
    """Build the candidate tree (top paths under a rank-product prior) and write it."""
    from stand_runtime import TreeFile, save_tree
    from treeopt.candidate import Prior, candidate_tree
    from treeopt.profile import depth_profile

    tree = candidate_tree(nodes, Prior(base, decay), max_width)
    meta = {"kind": "candidate", "prior": {"base": base, "decay": decay}, "max_width": max_width}
    save_tree(TreeFile(tree, None, meta), out)
    console.print(render.profile_table(str(out), depth_profile(tree)))
    console.print(f"candidate tree written to {out}")


@app.command()
@one_line_errors
def calibrate(
    model: str = typer.Option("smollm2-135m", help="Model spec."),
    samples: int = typer.Option(30, help="Calibration prompts."),
    dataset: str = typer.Option("humaneval", help="humaneval, a JSONL file, or a local HF dataset."),
    field: Optional[str] = typer.Option(None, help="Text field of a JSONL/HF dataset."),
    offset: int = typer.Option(0, help="Skip this many prompts first."),
    method: str = typer.Option("replay", help="replay (plain sampling + drafter replay) | direct (decode with the candidate)."),
    candidate_file: Optional[Path] = typer.Option(None, "--candidate", help="Candidate tree JSON (default: built)."),
    candidate_nodes: int = typer.Option(625, help="Nodes of the built candidate tree."),
    temperature: float = typer.Option(0.6),
    top_p: float = typer.Option(0.95),
    top_k: int = typer.Option(0),
    max_new_tokens: int = typer.Option(256),
    trajectories: int = typer.Option(1, help="Trajectories per prompt (sharing one store)."),
    seed: int = typer.Option(0),
    batch_size: int = typer.Option(8, help="Prompts sampled together (replay)."),
    deterministic: bool = typer.Option(False, help="Calibrate for deterministic (top-m) drafting."),
    out: Path = typer.Option(Path("calibration.json"), help="Calibration file (written atomically after every prompt)."),
    resume: bool = typer.Option(False, help="Continue an interrupted run saved in --out."),
) -> None:
    """Estimate every candidate node's acceptance probability on real prompts."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from stand_runtime import load_model, load_tree
    from stand_runtime.tree_io import check_writable
    from treeopt.calibrate import CalibrationConfig, Progress as Hooks, calibrate as run_calibration, load_calibration
    from treeopt.datasets import load_prompts
    from treeopt.profile import depth_profile

    config = CalibrationConfig(
        model=model, dataset=dataset, field=field, samples=samples, offset=offset, method=method,
        candidate_nodes=candidate_nodes, temperature=temperature, top_p=top_p, top_k=top_k,
        max_new_tokens=max_new_tokens, trajectories=trajectories, seed=seed, batch_size=batch_size,
        deterministic_drafts=deterministic,
    )
    check_writable(out)
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    tree = load_tree(candidate_file).tree if candidate_file is not None else None
    if tree is not None and tree.num_nodes == 0:
        raise StandError(f"candidate tree {candidate_file} has no nodes")
    if resume and out.exists():
        load_calibration(out)  # a corrupt file fails now, not after the model has loaded
    with console.status(f"loading {model} ..."):
        target, tokenizer = load_model(model)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    started = {}
    with Progress(*columns, console=console) as bar:
        prompts_task = bar.add_task("prompts", total=len(prompts), rate="")
        tokens_task = bar.add_task("tokens", total=None, rate="")

        def start(count, tokens):
            bar.update(prompts_task, total=count)
            bar.update(tokens_task, total=tokens)
            started["t"] = time.perf_counter()
            started["n"] = 0

        def tokens(count):
            started["n"] += count
            elapsed = time.perf_counter() - started["t"]
            bar.update(tokens_task, advance=count, rate=f"{started['n'] / max(elapsed, 1e-9):.1f} tok/s")

        hooks = Hooks(start=start, tokens=tokens, prompt_done=lambda _: bar.advance(prompts_task),
                      stage=lambda name: bar.update(prompts_task, description=f"prompts ({name})"))
        result = run_calibration(config, target, tokenizer, out, resume=resume, candidate=tree, prompts=prompts, progress=hooks)
    console.print(render.profile_table(f"calibrated candidate ({method})", depth_profile(result.candidate, result.alpha)))
    timings = result.metadata.get("timings", {})
    console.print(f"{result.steps} steps over {len(result.per_prompt)} prompts; times (s): " +
                  ", ".join(f"{k} {v:.1f}" for k, v in timings.items() if v))
    console.print(f"calibration written to {out}")


@app.command()
@one_line_errors
def export(
    calibration: Path = typer.Argument(..., help="Calibration file from `treeopt calibrate`."),
    nodes: str = typer.Option("80", help="Tree size K, or 'auto' to pick it from this machine's latency profile."),
    fmt: str = typer.Option("stand", "--format", help="stand (versioned JSON) | choices (plain list of paths)."),
    model: Optional[str] = typer.Option(None, help="Model for --nodes auto (default: the calibration's)."),
    out: Path = typer.Option(Path("tree.json"), help="Where to write the tree."),
) -> None:
    """Prune the calibrated candidate to the best K nodes and write the tree."""
    from stand_runtime import save_tree
    from stand_runtime.tree_io import check_writable
    from treeopt.calibrate import load_calibration
    from treeopt.export import export_tree
    from treeopt.profile import depth_profile

    check_writable(out)
    if out.resolve() == calibration.resolve():
        raise StandError(f"--out {out} is the calibration file itself; choose another path")
    result = load_calibration(calibration)
    extra = {}
    if nodes == "auto":
        from stand_runtime import load_model
        from treeopt.latency import cached_latency, choose_nodes
        from treeopt.prune import best_sums

        name = model or result.metadata.get("model") or "smollm2-135m"
        with console.status(f"loading {name} ..."):
            target, _ = load_model(name)
        profile = cached_latency(target, name, on_measure=lambda: console.print("measuring forward latency (once per model and device) ..."))
        sums = best_sums(result.candidate, result.alpha, min(result.candidate.num_nodes, max(profile)))
        count, curve = choose_nodes(sums, profile)
        console.print(render.curve_table(curve, count))
        extra = {"nodes_auto": {"latency_s": {str(k): v for k, v in profile.items()}, "chosen": count}}
        if count == 0:
            raise StandError("--nodes auto: no tree beats plain decoding on this hardware (K = 0); export a fixed size instead")
    else:
        try:
            count = int(nodes)
        except ValueError:
            raise StandError(f"--nodes must be an integer or 'auto', got {nodes!r}") from None
    tree_file = export_tree(result, count, extra)
    save_tree(tree_file, out, fmt)
    console.print(render.profile_table(str(out), depth_profile(tree_file.tree, tree_file.expected_acceptance)))
    console.print(f"{tree_file.tree.num_nodes}-node tree written to {out} ({fmt} format)")


@app.command()
@one_line_errors
def show(
    files: list[str] = typer.Argument(..., help="Tree files, bundled tree names, or calibration files."),
    png: Optional[Path] = typer.Option(None, help="Also draw the profiles side by side into this PNG (needs matplotlib)."),
) -> None:
    """Show depth profiles: nodes, width and expected accepted tokens per depth."""
    from treeopt.profile import depth_profile
    from treeopt.show import load_any, plot_profiles

    profiles = []
    for spec in files:
        tree, alpha = load_any(spec)
        profile = depth_profile(tree, alpha)
        profiles.append((spec, profile))
        console.print(render.profile_table(spec, profile))
    if png is not None:
        plot_profiles(profiles, png)
        console.print(f"plot written to {png}")


@app.command()
@one_line_errors
def bench(
    model: str = typer.Option("smollm2-135m", help="Model spec."),
    dataset: str = typer.Option("humaneval"),
    field: Optional[str] = typer.Option(None),
    samples: int = typer.Option(5, help="Prompts."),
    offset: int = typer.Option(30, help="Skip this many prompts first (default: past the 30 calibration prompts)."),
    methods: str = typer.Option("ar,stand", help="Comma-separated: ar, pld, recycle, stand-det, stand; "
                                "stand+rejected (or stand-det+rejected) also feeds the store at rejected tree nodes."),
    tree: Optional[list[str]] = typer.Option(None, help="Tree file or bundled name (repeat to compare trees)."),
    temperature: float = typer.Option(0.6),
    top_p: float = typer.Option(0.95),
    max_new_tokens: int = typer.Option(256),
    seed: int = typer.Option(0),
    trajectories: int = typer.Option(1, help="Trajectories per prompt, sharing one drafter memory (best-of-N)."),
    share_store: bool = typer.Option(False, help="One drafter memory per method for all prompts (default: per prompt)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON."),
    png: Optional[Path] = typer.Option(None, help="Plot acceptance length against trajectory index (needs matplotlib)."),
) -> None:
    """Decode the same prompts with several methods, interleaved, and compare them."""
    from rich.progress import Progress

    from stand_runtime import load_model
    from stand_runtime.tree_io import check_writable
    from treeopt.bench import parse_methods, results_json, run_bench, speedups
    from treeopt.datasets import load_prompts

    from stand_runtime import SamplingParams
    from stand_runtime.decode import resolve_tree

    specs = parse_methods(methods, tree)
    for spec in specs:
        if spec.method in ("stand", "stand-det", "recycle"):
            resolve_tree(spec.tree)
    SamplingParams(temperature, top_p, 0)
    if max_new_tokens < 1 or trajectories < 1:
        raise StandError(f"max_new_tokens and trajectories must be >= 1, got {max_new_tokens} and {trajectories}")
    for path in (json_out, png):
        if path is not None:
            check_writable(path)
    if png is not None:
        from treeopt.show import _pyplot

        _pyplot()  # matplotlib missing: say so before the run, not after it
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    with console.status(f"loading {model} ..."):
        target, tokenizer = load_model(model)
    settings = {"model": model, "dataset": dataset, "samples": samples, "offset": offset, "temperature": temperature,
                "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed, "trajectories": trajectories,
                "share_store": share_store}

    def save(done: int, partial: list) -> None:  # after every prompt: an interrupted run keeps what it measured
        if json_out is not None:
            write_json(json_out, results_json(partial, {**settings, "prompts_done": done}))

    with Progress(console=console) as bar:
        task = bar.add_task("decoding", total=len(prompts) * len(specs) * trajectories)
        results = run_bench(target, tokenizer, prompts, specs, temperature=temperature, top_p=top_p,
                            max_new_tokens=max_new_tokens, seed=seed, trajectories=trajectories,
                            on_run=lambda *_: bar.advance(task), on_prompt=save, share_across_prompts=share_store)
    ratios = speedups(results)
    title = (f"{len(prompts)} prompts from {dataset} (offset {offset}) x {trajectories} trajectories, "
             f"{max_new_tokens} tokens, T={temperature}, top-p={top_p}")
    console.print(render.bench_table(results, ratios, title))
    console.print(render.diagnostics_table(results))
    if json_out is not None:
        console.print(f"results written to {json_out}")
    if png is not None:
        from treeopt.show import plot_acceptance_by_trajectory

        plot_acceptance_by_trajectory(results, png)
        console.print(f"plot written to {png}")


class _TextStreamer:
    """Print newly decoded text as each step commits tokens."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._tokens: list[int] = []
        self._printed = 0

    def __call__(self, tokens: list[int]) -> None:
        self._tokens += tokens
        text = self._tokenizer.decode(self._tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            console.out(text[self._printed :], end="", highlight=False)
            self._printed = len(text)

    def finish(self) -> None:
        console.out("")


def write_json(path: Path, data) -> None:
    """Write JSON atomically (one-line error when the folder is missing or unwritable)."""
    from stand_runtime.tree_io import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    app()
