"""``treeopt bench``: decoding methods side by side on this toolkit's engine, interleaved per prompt.

The trace replay and the vLLM bench are their own commands (:mod:`.bench_traces`, :mod:`.bench_vllm`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stand_runtime.limits import METHODS
from stand_runtime.errors import StandError, counted

from . import loading, render
from .app import app, console, err_console, one_line_errors
from .options import (dtype_name, BASE_SEED_HELP, DATASET_HELP, DTYPE_HELP, FIELD_HELP, MODEL_HELP, OFFSET_HELP, PLOT_HELP,
                      PRIOR_HELP, TEMPERATURE_HELP, TOP_P_HELP, VERIFICATION_HELP, Verification, check_budget_fits, check_outputs, check_prior_option,
                      json_path, refuse_options, sampling_options, ResultsFile)


@app.command()
@one_line_errors
def bench(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    dataset: str = typer.Option("humaneval", help=DATASET_HELP),
    field: Optional[str] = typer.Option(None, help=FIELD_HELP),
    samples: int = typer.Option(5, help="Prompts."),
    offset: Optional[int] = typer.Option(None, help=OFFSET_HELP),
    methods: str = typer.Option("ar,stand", help=f"Comma-separated: {', '.join(METHODS)}; "
                                "stand+rejected (or stand-det+rejected) also feeds the store at rejected tree nodes; "
                                "a +noprior suffix (stand+noprior, stand-det+noprior, after +rejected when both) drafts without "
                                "the successor prior."),
    tree: Optional[list[str]] = typer.Option(None, metavar="TEXT", help="Tree file, bundled name, auto, dynamic[-N] (stand, stand-det: N nodes spent best-first each step) or dynamic-auto[-N] (as many as pay for themselves, N at most) for every tree method (repeat to compare trees); default: each method's own."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens per trajectory at most."),
    seed: int = typer.Option(0, help=BASE_SEED_HELP),
    verification: Verification = typer.Option(Verification.invariant, help=VERIFICATION_HELP),
    trajectories: int = typer.Option(1, help="Trajectories per prompt (1 to 4096), sharing one drafter memory (best-of-N)."),
    share_store: bool = typer.Option(False, "--share-store", metavar="", help="One drafter memory per method for all prompts (default: per prompt)."),
    cross_prompt: bool = typer.Option(False, "--cross-prompt", metavar="", help="Each prompt's STAND store over a cross-prompt memory of every prompt so far (other methods: one memory for all prompts)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", metavar="", help="Decode every trajectory to --max-new-tokens (equal token counts for speed; answers are read before the first EOS)."),
    json_out: Optional[Path] = typer.Option(None, "--json", callback=json_path, help="Write the results as JSON (after every prompt; to -, /dev/stdout or a pipe once, at the end, the tables then on stderr)."),
    dtype: str = typer.Option("float32", callback=dtype_name, help=DTYPE_HELP),
    prior: bool = typer.Option(True, "--prior/--no-prior", help=PRIOR_HELP),
    png: Optional[Path] = typer.Option(None, help=f"Plot acceptance length against trajectory index, and for value-sized trees (dynamic-auto) the reliability diagram into NAME-reliability.png ({PLOT_HELP})."),
) -> None:
    """Decode the same prompts with several methods, interleaved, and compare them (recorded traces:
    bench-traces; vLLM: bench-vllm)."""
    from stand_runtime.engine.row import check_budget
    from stand_runtime.drafters import STORE_METHODS
    from stand_runtime.method import check_tree_spec
    from treeopt import load_prompts, parse_methods
    from treeopt.evaluate.bench import check_bench_settings, default_offset

    check_outputs({"--json": json_out, "--png": png, "--png's reliability diagram": _reliability_path(png)},
                  {"--dataset": dataset, "--tree": tree}, plot=png)
    out = ResultsFile(json_out, console, ctx)
    specs = parse_methods(methods, tree)
    check_prior_option(ctx, [spec.label for spec in specs], prior, [spec.method in STORE_METHODS for spec in specs],
                       [not spec.prior for spec in specs])
    _check_memory_options(ctx, methods, specs, share_store and cross_prompt)
    for spec in specs:
        check_tree_spec(spec.method, spec.tree)
        if tree and spec.tree is None and spec.tree_name is not None:  # no tree given applies (recycle: static only)
            err_console.print(f"note: {spec.method} runs on its own tree {spec.tree_name}: none of --tree "
                              f"{', '.join(tree)} applies to it", highlight=False, soft_wrap=True)
    sampling = sampling_options(temperature, top_p)
    check_budget(max_new_tokens)
    check_bench_settings(samples, trajectories, seed)
    check_budget_fits(model, max_new_tokens)
    offset = default_offset(dataset, offset)
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    settings = {"model": model, "dtype": dtype, "dataset": dataset, "samples": samples, "offset": offset, "seed": seed,
                "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "prior": prior,
                "trajectories": trajectories, "share_store": share_store, "cross_prompt": cross_prompt, "ignore_eos": ignore_eos, "verification": verification.value}
    results, profile = _decode(prompts, specs, sampling, settings, out)
    title = (f"{counted(len(prompts), 'prompt')} from {dataset} (offset {offset}) x "
             f"{counted(trajectories, 'trajectory', 'trajectories')}, "
             f"{max_new_tokens} tokens, T={temperature}, top-p={top_p}")
    _report(results, profile, title, json_out, png)


def _check_memory_options(ctx: typer.Context, methods: str, specs: list, both: bool) -> None:
    """Refuse --share-store / --cross-prompt for methods without a drafter memory, and the two together."""
    from stand_runtime.drafters import MEMORY_METHODS

    if not any(spec.method in MEMORY_METHODS for spec in specs):
        refuse_options(ctx, ["share_store", "cross_prompt"], f"--methods {methods} (none of them keeps a drafter memory)")
    if both:
        raise StandError("--share-store and --cross-prompt both share a memory across prompts: choose one")


def _decode(prompts: list, specs: list, sampling, settings: dict, out: ResultsFile):
    """Load the model, decode every prompt with every configuration (saving after each prompt);
    (results, the machine's latency profile)."""
    from treeopt import results_json, run_bench
    from treeopt.data.datasets import check_prompts_fit

    model, trajectories = settings["model"], settings["trajectories"]
    target, tokenizer = loading.load_model(model, settings["dtype"])
    check_prompts_fit(target, tokenizer, prompts, settings["max_new_tokens"])
    announced = any(loading.announce_tree(target, spec.method, spec.tree) is not None for spec in specs)  # once: shared
    profile = loading.cached_profile(target, model)
    if not announced:
        loading.warn_latency(profile)  # the profile's spread (announce_tree checks it for the methods it sizes)
    found = loading.successor_prior(target, tokenizer, [s.method for s in specs if s.prior], sampling, settings["prior"])
    settings["prior"] = found is not None  # whether any configuration drafts with it

    def save(done: int, partial: list) -> None:  # after every prompt: an interrupted run keeps what it measured
        out.progress(lambda: results_json(partial, {**settings, "prompts_done": done}, profile))

    with render.progress(console) as bar:
        task = bar.add_task("decoding", total=len(prompts) * len(specs) * trajectories)
        results = run_bench(target, tokenizer, prompts, specs, sampling=sampling,
                            max_new_tokens=settings["max_new_tokens"], seed=settings["seed"], trajectories=trajectories,
                            on_run=lambda *_: bar.advance(task), on_prompt=save,
                            share_across_prompts=settings["share_store"], ignore_eos=settings["ignore_eos"],
                            priors=settings["prior"], verification=settings["verification"],
                            cross_prompt=settings["cross_prompt"])
    out.done(lambda: results_json(results, {**settings, "prompts_done": len(prompts)}, profile))
    return results, profile


def _report(results: list, profile, title: str, json_out: Optional[Path], png: Optional[Path]) -> None:
    """The bench's tables, warnings and plot."""
    from treeopt import speedups
    from treeopt.evaluate.bench import latency_bounds, speedup_intervals

    ratios, intervals = speedups(results), speedup_intervals(results)
    plain = next((r for r in results if r.method == "ar"), None)
    loading.warn_latency(profile, spread=False,
                         **({} if plain is None else {"forward_s": plain.forward_s, "forwards": plain.steps}))
    bounds = latency_bounds(results, profile)
    for table in render.bench_tables(results, ratios, title, intervals, bounds):
        console.print(table)
    for line in speedup_warnings(results, ratios, intervals, bounds):
        console.print(line, style="yellow")
    for table in render.diagnostics_tables(results):
        console.print(table)
    for table in render.reliability_tables(results):
        console.print(table)
    if json_out is not None:
        console.print(f"results written to {json_out}")
    if png is not None:
        from treeopt.evaluate.plots import plot_acceptance_by_trajectory

        plot_acceptance_by_trajectory(results, png)
        console.print(f"plot written to {png}")
        _plot_reliability(results, png)


def _reliability_path(png: Optional[Path]) -> Optional[Path]:
    """Where ``--png`` puts the reliability diagram: NAME-reliability.png beside it (None without --png)."""
    return None if png is None else png.with_name(f"{png.stem}-reliability{png.suffix or '.png'}")


def _plot_reliability(results: list, png: Path) -> None:
    """The reliability diagram of the value-sized trees, next to ``png`` (NAME-reliability.png)."""
    from treeopt.evaluate.plots import plot_reliability

    summaries = [(r.label, r.reliability.summary()) for r in results if r.reliability is not None]
    if summaries:
        path = plot_reliability(summaries, _reliability_path(png))
        console.print(f"reliability diagram written to {path}")


ABOVE_BOUND = 1.15
"""A speedup this far above its latency bound (:func:`treeopt.evaluate.bench.latency_bounds`: the
acceptance length at the profile's forward costs, no host work) says plain decoding ran slow, not that
drafting did well (docs/decisions.md)."""


def speedup_warnings(results, speedups: dict, intervals: dict, bounds: dict | None = None) -> list[str]:
    """Lines that stop a reader from trusting a speedup the data cannot support (``bounds``: label →
    latency bound, when the machine's profile is known)."""
    if not any(r.method == "ar" for r in results):
        return ["no plain decoding (ar) in this run: no speedup can be given (add ar to --methods)"]
    lines = []
    prompts = len(results[0].per_prompt)
    if prompts < 3:
        lines.append(f"only {prompts} prompt(s): speedups are shown without an interval and may be noise "
                     "(use --samples 3 or more)")
    for result in results:
        interval = intervals.get(result.label)
        if result.method != "ar" and interval is not None and interval[0] <= 1.0 <= interval[1]:
            lines.append(f"{result.label}: the 95% interval {interval[0]:.2f}-{interval[1]:.2f} includes 1: "
                         "no speedup or slowdown resolved")
        bound, ratio = (bounds or {}).get(result.label), speedups.get(result.label)
        if result.method != "ar" and bound and ratio and ratio > ABOVE_BOUND * bound:
            lines.append(f"{result.label}: {ratio:.2f}x plain is above the {bound:.2f}x its acceptance length allows "
                         "at this machine's forward costs: plain decoding ran slower than measured before (load during "
                         "the run, or a latency profile or kernel choice measured under load: delete the cache's "
                         "latency/ folder to measure them again)")
    return lines
