"""``treeopt bench-traces``: recorded traces replayed through the drafters (greedy, no model)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import render
from .app import app, console, one_line_errors
from .options import PLOT_HELP, ResultsFile, check_outputs, json_path, refuse_options


@app.command("bench-traces")
@one_line_errors
def bench_traces(
    ctx: typer.Context,
    traces: Path = typer.Argument(..., help="JSONL file of recorded traces (one per line: a group, the trace's text, the problem)."),
    methods: Optional[str] = typer.Option(None, help="Comma-separated: stand, stand-det (on dynamic-80), stand-static (the static "
                                          "80-node tree), pld, recycle, suffix, suffix-tuned (default: all)."),
    tree: Optional[str] = typer.Option(None, help="Tree of the tree methods: a tree file, a bundled name, dynamic[-N], or with --latency dynamic-auto[-N] (sized by that profile) (default: each method's own; stand-static keeps its own)."),
    group_field: str = typer.Option("sample_group", help="The field grouping traces of one problem (trajectories 1..N)."),
    text_field: str = typer.Option("trace", help="The field holding a trace's text."),
    prompt_field: str = typer.Option("problem", help="The field holding the problem text (the prompt)."),
    max_tokens: int = typer.Option(3000, help="Tokens replayed per trace at most."),
    min_group_size: int = typer.Option(2, help="Replay only groups with at least this many traces."),
    tokenizer_spec: str = typer.Option("smollm2-135m", "--tokenizer", help="Tokenizer (a model spec)."),
    copy_tokens: Optional[int] = typer.Option(None, help="STAND's copy path length (tokens, 0-64; default: 10, "
                                              "64 on a value-sized tree, which keeps what pays)."),
    json_out: Optional[Path] = typer.Option(None, "--json", callback=json_path, help="Write the results as JSON (-: to standard output, the tables then on stderr)."),
    png: Optional[Path] = typer.Option(None, help=f"Plot acceptance length against trajectory index, or with --budgets "
                                       f"against the budget ({PLOT_HELP})."),
    latency: Optional[Path] = typer.Option(None, help="Latency profile JSON of the hardware to project onto (a cached "
                                           "~/.cache/stand/latency/*.json or benchmarks/results/gpu-check-h200.json): "
                                           "adds each method's projected speedup over plain decoding."),
    budgets: Optional[str] = typer.Option(None, help="Comma-separated budgets K of drafted tokens per step (e.g. "
                                          "2,4,8,16,32,80): every method replayed at each K (STAND on dynamic-K, "
                                          "suffix with its limit at K, pld's chain at K, recycle and stand-static on "
                                          "their tree's first K nodes); reports τ and τ per drafted token against K, "
                                          "--png plots τ against K."),
    cross_prompt: bool = typer.Option(False, "--cross-prompt", help="Each group learns from the ones before it: STAND "
                                      "over a cross-prompt memory, the others' memory shared (SuffixDecoding's global tree)."),
) -> None:
    """Replay recorded traces through the drafters (greedy verification, no model) and compare them."""
    from stand_runtime import load_tokenizer
    from treeopt.evaluate.trace_bench import load_replay_groups, run_trace_bench, trace_results_json
    from treeopt.evaluate.projection import load_latency_file, projection_block

    check_outputs({"--json": json_out, "--png": png}, {"TRACES": traces, "--latency": latency}, plot=png)
    out = ResultsFile(json_out, console, ctx)
    if budgets is not None:
        refuse_options(ctx, ("tree", "latency"), "a budget sweep (--budgets sizes every method's draft)")
    profile = None if latency is None else load_latency_file(latency)  # a bad file fails before the replay
    specs = _trace_specs(methods, tree, copy_tokens, None if profile is None else profile[0], budgets)
    tokenizer = load_tokenizer(tokenizer_spec)
    groups, skipped = load_replay_groups(traces, tokenizer, group_field=group_field, text_field=text_field,
                                         prompt_field=prompt_field, max_tokens=max_tokens, min_group_size=min_group_size)
    count = sum(len(g.trace_ids) for g in groups)
    if skipped:
        console.print(f"{skipped} groups with fewer than {min_group_size} traces left out (--min-group-size)")
    with render.progress(console) as bar:
        task = bar.add_task("replaying", total=count * len(specs))
        results = run_trace_bench(groups, specs, len(tokenizer), on_trace=lambda _: bar.advance(task),
                                  cross_prompt=cross_prompt)
    settings = {"traces": str(traces), "group_field": group_field, "text_field": text_field,
                "prompt_field": prompt_field, "max_tokens": max_tokens, "min_group_size": min_group_size,
                "tokenizer": tokenizer_spec, "groups": len(groups), "traces_replayed": count, "groups_left_out": skipped,
                "copy_tokens": copy_tokens, "cross_prompt": cross_prompt, "budgets": None if budgets is None else sorted({s.budget for s in specs})}
    data = trace_results_json(results, settings)
    if profile is not None:
        data["projection"] = projection_block(data["results"], profile[0], {"path": str(latency), "format": profile[1]})
    title = (f"{len(groups)} groups x up to {max(len(g.trace_ids) for g in groups)} traces from {traces.name}, "
             f"{max_tokens} tokens, greedy replay" + (", cross-prompt memory" if cross_prompt else "")
             + ("" if budgets is None else ": τ against budget"))
    _report(data, title, out, png)


def _trace_specs(methods: Optional[str], tree: Optional[str], copy_tokens: Optional[int], latency, budgets: Optional[str]):
    """The bench's configurations: each method once, or at every budget of ``--budgets``."""
    from treeopt.evaluate.trace_bench import TRACE_METHODS, budget_methods, parse_budgets, parse_trace_methods

    methods = ",".join(TRACE_METHODS) if methods is None else methods
    if budgets is None:
        return parse_trace_methods(methods, tree, copy_tokens, latency)
    return budget_methods(methods, parse_budgets(budgets), copy_tokens)


def _report(data: dict, title: str, out: ResultsFile, png: Optional[Path]) -> None:
    """The trace bench's tables and notes; its JSON and plot when asked for."""
    tables = [render.budget_table(data["budgets"], title)] if "budgets" in data else render.trace_tables(data, title)
    for table in tables:
        console.print(table)
    if "projection" in data:
        console.print(render.projection_table(data["projection"]))
    for note in data["notes"]:
        console.print(note, style="yellow")
    if out.path is not None:
        out.save(lambda: data)
        console.print(f"results written to {out.path}")
    if png is not None:
        from treeopt.evaluate.plots import plot_trace_acceptance, plot_trace_budgets

        (plot_trace_budgets if "budgets" in data else plot_trace_acceptance)(data, png)
        console.print(f"plot written to {png}")
