"""``treeopt generate``: decode one prompt, streaming the text, then show the statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stand_runtime.limits import METHODS

from . import loading, render
from .app import app, console, one_line_errors
from .options import (dtype_name, DTYPE_HELP, PRIOR_HELP, MODEL_HELP, SEED_HELP, TEMPERATURE_HELP, TOP_K_HELP, TOP_P_HELP,
                      VERIFICATION_HELP, Verification, check_budget_fits,
                      check_outputs, json_path, read_prompt, refuse_options, sampling_options, ResultsFile)

FINISH_NOTES = {"length": "(stopped at --max-new-tokens {})", "stop": "(stopped at a --stop string, which the text leaves out)",
                "eos": "(stopped at the model's end-of-sequence token)"}
"""What ended the text, by ``finish_reason``."""


@app.command("generate")
@one_line_errors
def generate_command(
    ctx: typer.Context,
    prompt: Optional[str] = typer.Argument(None, help="Prompt text (wrapped in the model's chat template).", show_default=False),
    prompt_file: Optional[Path] = typer.Option(None, help="Read the prompt from this file ('-' = standard input); its trailing line breaks are dropped."),
    keep_newline: bool = typer.Option(False, "--keep-newline", help="--prompt-file: keep the file's trailing line breaks in the prompt."),
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    tree: Optional[str] = typer.Option(None, help="Draft tree (stand, stand-det, recycle): a tree file, a tree family file (sized for this machine), a bundled name, auto, dynamic[-N] (stand, stand-det: N nodes spent best-first each step) or dynamic-auto[-N] (as many as pay for themselves, N at most); default: dynamic-auto for stand, auto for stand-det, heuristic-80 for recycle."),
    method: str = typer.Option("stand", help=f"Decoding method: {' | '.join(METHODS)} (ar: plain decoding)."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    top_k: int = typer.Option(0, help=TOP_K_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens to generate at most."),
    seed: Optional[int] = typer.Option(None, help=SEED_HELP),
    verification: Verification = typer.Option(Verification.invariant, help=VERIFICATION_HELP),
    stop: Optional[list[str]] = typer.Option(None, metavar="TEXT", help="Stop once the text contains this string (repeatable)."),
    feed_rejected: bool = typer.Option(False, "--feed-rejected", metavar="", help="STAND: also feed the store at rejected tree nodes."),
    dtype: str = typer.Option("float32", callback=dtype_name, help=DTYPE_HELP),
    prior: bool = typer.Option(True, "--prior/--no-prior", help=PRIOR_HELP),
    json_out: Optional[Path] = typer.Option(None, "--json", callback=json_path, help="Also write the statistics to this JSON file (-: to standard output, the text then on stderr)."),
) -> None:
    """Decode one prompt, streaming the text, then show the decoding statistics."""
    from stand_runtime.drafters import STORE_METHODS, check_method
    from stand_runtime.engine.row import check_budget
    from stand_runtime.engine.stopping import check_stop_strings
    from stand_runtime.method import DEFAULT_TREES, check_tree_spec
    from stand_runtime.randomness import check_seed

    check_outputs({"--json": json_out}, {"--prompt-file": prompt_file, "--tree": tree})
    text = read_prompt(prompt, prompt_file, keep_newline)
    check_method(method, tree=tree, feed_rejected=feed_rejected)
    if method not in STORE_METHODS:
        refuse_options(ctx, ["prior"], f"--method {method} (it drafts for STAND only)")
    check_budget(max_new_tokens)
    check_seed(seed)
    stops = check_stop_strings(tuple(stop or ()))
    sampling = sampling_options(temperature, top_p, top_k)
    check_tree_spec(method, tree)
    check_budget_fits(model, max_new_tokens)
    out = ResultsFile(json_out, console, ctx)
    target, tokenizer = loading.load_model(model, dtype)
    choice = loading.announce_tree(target, method, tree)
    seeded = loading.successor_prior(target, tokenizer, [method], sampling, prior)
    result = _decode(target, tokenizer, text, method, tree, sampling, max_new_tokens, seed, stops, feed_rejected, seeded,
                     verification.value)
    if result.finish_reason in FINISH_NOTES:
        console.print(FINISH_NOTES[result.finish_reason].format(max_new_tokens), style="dim")
    console.print(render.stats_table(result.stats, title=f"{method} on {model}"))
    if choice is not None:
        _warn_observed(choice.profile, result.stats)
    if json_out is not None:
        out.save(lambda: {"method": method, "model": model, "tree": tree or DEFAULT_TREES.get(method), "seed": seed,
                          "temperature": temperature, "top_p": top_p, "top_k": top_k, "max_new_tokens": max_new_tokens,
                          "dtype": dtype, "verification": verification.value, "prior": seeded is not None,
                          "text": result.text, "finish_reason": result.finish_reason, "stats": result.stats.as_dict()})
        console.print(f"statistics written to {json_out}")


def _decode(target, tokenizer, text: str, method: str, tree, sampling, max_new_tokens: int, seed: Optional[int],
            stops: tuple, feed_rejected: bool, prior=None, verification: str = "invariant"):
    """The CLI's one call of :func:`stand_runtime.generate`, streaming the text to the console."""
    from stand_runtime import Method, generate as run_generate

    stream = render.TextStream(tokenizer, console, stops)
    try:
        result = run_generate(target, tokenizer, text, method=Method.parse(method, tree, target, feed_rejected=feed_rejected,
                                                                               prior=prior, verification=verification),
                              sampling=sampling, max_new_tokens=max_new_tokens, seed=seed, stop=stops,
                              on_step=lambda step: stream(step.tokens))
    finally:  # an interrupt's line starts on a line of its own, after the text streamed so far
        stream.end()
    return result


def _warn_observed(profile, stats) -> None:
    """Warn where this run's forward times contradict the latency profile (its spread was checked
    before the run; a long context's slower forwards are not the profile's fault)."""
    drafted = sum(stats.drafted_per_step) / len(stats.drafted_per_step) if stats.drafted_per_step else 0.0
    loading.warn_latency(profile, forward_s=stats.forward_s, forwards=stats.target_forwards,
                         tokens_per_forward=1 + drafted, context_tokens=stats.prompt_tokens + stats.new_tokens / 2,
                         spread=False)
