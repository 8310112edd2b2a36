"""``treeopt search``: best-of-N or DVTS on a dataset, each problem decoded by every method."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stand_runtime.limits import METHODS
from stand_runtime.errors import counted

from . import loading, render
from .app import app, console, err_console, one_line_errors
from .options import (dtype_name, DTYPE_HELP, FIXED_SEED_HELP, MODEL_HELP, PRIOR_HELP, TEMPERATURE_HELP, TOP_P_HELP,
                      VERIFICATION_HELP, Verification, check_budget_fits, check_outputs,
                      check_prior_option, json_path, refuse_options, sampling_options, ResultsFile)


@app.command()
@one_line_errors
def search(
    ctx: typer.Context,
    dataset: str = typer.Option(..., help="Problems: a JSONL file (e.g. GSM8K: problem + answer fields; accuracy needs answers), a local Hugging Face dataset, or humaneval (built in: no answers to grade)."),
    strategy: str = typer.Option("best-of-n", help="best-of-n (N samples, majority vote) or dvts (verifier-guided tree search)."),
    n: int = typer.Option(4, help="Samples (best-of-n) or beams (dvts) per problem."),
    subtrees: int = typer.Option(1, help="DVTS: independent subtrees (must divide --n; each extends n/subtrees candidates per step)."),
    methods: str = typer.Option("ar,stand", help=f"Comma-separated decoding methods, run interleaved per problem ({', '.join(METHODS)})."),
    tree: Optional[str] = typer.Option(None, help="Tree for the tree methods (default: each method's own; auto is sized for --max-batch rows)."),
    max_batch: int = typer.Option(4, help="Rows decoded together per target forward (1 = one sample after another)."),
    in_flight: int = typer.Option(1, help="Problems searched together: their samples (DVTS: each round's candidates) share the batch, a finished row's place taken by the next waiting one from any of them; their wall time is shared by tokens."),
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    field: Optional[str] = typer.Option(None, help="Text field of the dataset (default: prompt, problem or question)."),
    samples: int = typer.Option(10, help="Problems."),
    offset: int = typer.Option(0, help="Skip this many problems first."),
    max_new_tokens: int = typer.Option(256, help="Tokens per sample (best-of-n) or per subtree path (dvts) at most."),
    step_tokens: int = typer.Option(96, help="DVTS: tokens per step at most (a step ends at a blank line or EOS)."),
    max_rounds: int = typer.Option(16, help="DVTS: steps per subtree at most."),
    verifier: str = typer.Option("confidence", help="DVTS verifier: confidence (the target's mean token log-prob of the step: a stand-in, not a PRM) or prm:PATH (a local process reward model)."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", metavar="", help="Let a prm:PATH model run its own code (Qwen2.5-Math-PRM needs it)."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    seed: int = typer.Option(0, help=FIXED_SEED_HELP),
    verification: Verification = typer.Option(Verification.invariant, help=VERIFICATION_HELP),
    json_out: Optional[Path] = typer.Option(None, "--json", callback=json_path, help="Write the results as JSON (after every problem; to -, /dev/stdout or a pipe once, at the end, the tables then on stderr)."),
    dtype: str = typer.Option("float32", callback=dtype_name, help=DTYPE_HELP),
    prior: bool = typer.Option(True, "--prior/--no-prior", help=PRIOR_HELP),
    cross_prompt: bool = typer.Option(False, "--cross-prompt", metavar="", help="Each problem's STAND store over a cross-prompt memory of every problem so far."),
) -> None:
    """Test-time scaling: best-of-N or DVTS on a dataset, each problem decoded by every method (interleaved)."""
    from treeopt import load_prompts
    from treeopt.evaluate.search import SearchSettings, parse_search_methods
    from treeopt.evaluate.verifiers import make_verifier

    check_outputs({"--json": json_out}, {"--dataset": dataset})
    out = ResultsFile(json_out, console, ctx)
    names = parse_search_methods(methods, tree)
    check_prior_option(ctx, names, prior, [name.startswith("stand") for name in names], [False] * len(names))
    if strategy != "dvts":
        refuse_options(ctx, ["subtrees", "verifier", "trust_remote_code", "step_tokens", "max_rounds"],
                       f"--strategy {strategy} (options of --strategy dvts)")
    check_budget_fits(model, max_new_tokens)
    settings = SearchSettings(strategy, n, subtrees, max_new_tokens, step_tokens, max_rounds,
                              sampling_options(temperature, top_p), seed, in_flight)
    problems = load_prompts(dataset, field=field, samples=samples, offset=offset)
    settings.check_problems(len(problems))
    judge = make_verifier(verifier, trust_remote_code=trust_remote_code) if strategy == "dvts" else None
    _note_own_trees(names, tree)  # after every check: a bad option stays a one-line error
    config = {"dataset": dataset, "strategy": strategy, "n": n, "subtrees": subtrees, "max_batch": max_batch,
              "in_flight": in_flight, "model": model, "dtype": dtype, "samples": samples, "offset": offset, "max_new_tokens": max_new_tokens,
              "step_tokens": step_tokens, "max_rounds": max_rounds, "verifier": verifier if judge else None,
              "temperature": temperature, "top_p": top_p, "seed": seed, "tree": tree or _default_trees(names),
              "prior": prior, "verification": verification.value, "cross_prompt": cross_prompt}
    data = _search(model, dtype, names, tree, max_batch, problems, settings, judge, config, out)
    title = (f"{strategy} n={n}" + (f", {subtrees} subtrees" if strategy == "dvts" else "")
             + f", {counted(len(problems), 'problem')} from {Path(dataset).name}, "
             f"batch {min(max_batch, n * in_flight)}, T={temperature}")  # rows at once: n per problem in flight
    for table in filter(None, (render.search_table(data["summary"], title), render.batched_sizing_table(data["summary"]))):
        console.print(table)
    if json_out is not None:
        console.print(f"results written to {json_out}")


def _default_trees(names: list[str]) -> dict | None:
    """The tree each tree method of ``names`` decodes on when ``--tree`` is not given (what the JSON
    records), or None when none takes a tree."""
    from stand_runtime.method import DEFAULT_TREES

    trees = {name: DEFAULT_TREES[name] for name in names if name in DEFAULT_TREES}
    return trees or None


def _note_own_trees(names: list, tree: Optional[str]) -> None:
    """Say (on stderr, one line each) which tree methods run on their own tree because --tree does not
    apply to them (recycle under a dynamic tree), as ``treeopt bench`` does."""
    from stand_runtime.drafters import TREE_METHODS, takes_tree
    from stand_runtime.method import DEFAULT_TREES

    for name in names:
        if tree is not None and name in TREE_METHODS and not takes_tree(name, tree):
            err_console.print(f"note: {name} runs on its own tree {DEFAULT_TREES[name]}: --tree {tree} does not "
                              f"apply to it", highlight=False, soft_wrap=True)


def _token_progress(bar, task: int, settings, searches: int):
    """The ``on_tokens`` of a search's progress. Best-of-N: a bar of its budget, N samples of
    ``max_new_tokens`` per problem and method (EOS stops short of it). DVTS has no such total (its
    rounds end where the verifier's chosen paths end, and every round decodes N candidate steps of
    which ``subtrees`` are kept), so it counts the tokens decoded beside the searches done."""
    if settings.strategy != "dvts":
        tokens = bar.add_task("tokens", total=searches * settings.n * settings.max_new_tokens, tokens="")
        return lambda count: bar.advance(tokens, count)
    decoded = [0]

    def count(tokens: int) -> None:
        decoded[0] += tokens
        bar.update(task, tokens=f"{decoded[0]:,} tokens decoded")

    return count


def _search(model: str, dtype: str, names: list, tree: Optional[str], max_batch: int, problems: list, settings, judge,
            config: dict, out: ResultsFile) -> dict:
    """Load the model, search every problem with every method (saving after each problem); the report."""
    from stand_runtime.method import DEFAULT_TREES
    from stand_runtime.target.model_facts import vocab_size
    from treeopt.evaluate.reliability import ForwardLog
    from treeopt.evaluate.search import compare_methods, method_backends, search_report

    target, tokenizer = loading.load_model(model, dtype)
    announced = set()  # how each sized tree is sized, and a latency profile not to trust, as bench and generate say
    for name in names:
        spec = tree or DEFAULT_TREES.get(name)
        if spec not in announced and loading.announce_tree(target, name, tree) is not None:
            announced.add(spec)
    prior = loading.successor_prior(target, tokenizer, names, settings.sampling, config["prior"])
    config["prior"] = prior is not None  # whether any method drafts with it
    backends = method_backends(target, tokenizer, names, tree, max_batch, prior, config["verification"],
                               config["cross_prompt"])
    profile = loading.cached_profile(target, model) if any(name != "ar" for name in names) else None  # the ceiling's t(n)
    batch = min(max_batch, settings.n * settings.in_flight)  # rows per forward
    forwards = {name: ForwardLog() for name, backend in backends.items() if backend.sizing is not None}
    for name, log in forwards.items():  # the value rule's forecasts of each batched forward, with outcomes
        backends[name].sizing.on_forward = log.add

    def save(results: dict) -> None:
        out.progress(lambda: search_report(config, results, profile, batch, forwards))

    with render.progress(console, *render.search_columns()) as bar:
        windows = -(-len(problems) // settings.in_flight)
        task = bar.add_task("searching", total=windows * len(names), tokens="")
        results = compare_methods(backends, tokenizer, problems, settings, judge, vocab_size(target),
                                  on_search=lambda _: bar.advance(task), on_problem=save,
                                  on_tokens=_token_progress(bar, task, settings, len(problems) * len(names)))
    report = search_report(config, results, profile, batch, forwards)
    out.done(lambda: report)
    return report
