"""``treeopt calibrate``: every candidate node's acceptance probability, from decoding or recorded traces."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from stand_runtime import StandError
from stand_runtime.errors import counted

from . import loading, render
from .app import app, console, err_console, one_line_errors
from .options import (BASE_SEED_HELP, DATASET_HELP, FIELD_HELP, MODEL_HELP, TEMPERATURE_HELP, TOP_K_HELP, TOP_P_HELP,
                      check_outputs, refuse_options, sampling_options)

TRACE_ONLY = ["group_field", "text_field", "prompt_field", "max_tokens", "tokenizer_spec"]
DECODING_ONLY = ["samples", "dataset", "field", "offset", "method", "temperature", "top_p", "top_k", "max_new_tokens",
                 "trajectories", "seed", "batch_size", "deterministic", "resume", "acceptance_nodes"]


@app.command()
@one_line_errors
def calibrate(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help=MODEL_HELP),
    samples: int = typer.Option(30, help="Calibration prompts."),
    dataset: str = typer.Option("humaneval", help=DATASET_HELP),
    field: Optional[str] = typer.Option(None, help=FIELD_HELP),
    offset: int = typer.Option(0, help="Skip this many prompts first."),
    method: str = typer.Option("replay", help="replay (batched plain sampling + drafter replay, fast) | direct (decode with the candidate tree)."),
    candidate_file: Optional[Path] = typer.Option(None, "--candidate", help="Candidate tree JSON (default: built from --candidate-nodes)."),
    candidate_nodes: int = typer.Option(625, help="Nodes of the built candidate tree."),
    temperature: float = typer.Option(0.6, help=TEMPERATURE_HELP),
    top_p: float = typer.Option(0.95, help=TOP_P_HELP),
    top_k: int = typer.Option(0, help=TOP_K_HELP),
    max_new_tokens: int = typer.Option(256, help="Tokens per trajectory at most."),
    trajectories: int = typer.Option(1, help="Trajectories per prompt (sharing one store, as best-of-N)."),
    seed: int = typer.Option(0, help=BASE_SEED_HELP),
    batch_size: int = typer.Option(8, help="Trajectories sampled together (replay)."),
    deterministic: bool = typer.Option(False, "--deterministic", metavar="", help="Calibrate for deterministic (top-m) drafting."),
    out: Path = typer.Option(Path("calibration.json"), help="Calibration file (written atomically after every prompt)."),
    resume: bool = typer.Option(False, "--resume", metavar="", help="Continue an interrupted run saved in --out (same settings)."),
    acceptance_nodes: int = typer.Option(80, help="Then decode the prompts on dynamic-N (N nodes) to measure the acceptance seed of value-sized trees (dynamic-auto): NAME.acceptance.json next to --out, and the cache; 0: skip."),
    traces: Optional[Path] = typer.Option(None, help="Instead of decoding: calibrate from the recorded traces of this JSONL file (greedy replay, no model; --group-field, --text-field, --prompt-field, --max-tokens, --tokenizer apply)."),
    group_field: str = typer.Option("sample_group", help="--traces: the field grouping traces of one problem (they share one store)."),
    text_field: str = typer.Option("trace", help="--traces: the field holding a trace's text."),
    prompt_field: str = typer.Option("problem", help="--traces: the field holding the problem text."),
    max_tokens: int = typer.Option(3000, help="--traces: tokens replayed per trace at most."),
    tokenizer_spec: Optional[str] = typer.Option(None, "--tokenizer", help="--traces: tokenizer (a model spec); default: --model's."),
) -> None:
    """Estimate every candidate node's acceptance probability on real prompts (or recorded traces)."""
    if traces is not None:
        refuse_options(ctx, DECODING_ONLY, "calibrate --traces (a greedy replay of recorded text)")
        return _calibrate_traces(traces, candidate_file, candidate_nodes, group_field, text_field, prompt_field,
                                 max_tokens, tokenizer_spec or model, out)
    refuse_options(ctx, TRACE_ONLY, "calibrate without --traces")
    if candidate_file is not None:
        refuse_options(ctx, ["candidate_nodes"], "--candidate (the file is the candidate tree)")
    if method == "direct":
        refuse_options(ctx, ["batch_size"], "--method direct (it decodes one prompt at a time; --batch-size batches replay's sampling)")
    from treeopt import CalibrationConfig

    sampling_options(temperature, top_p, top_k)
    config = CalibrationConfig(
        model=model, dataset=dataset, field=field, samples=samples, offset=offset, method=method,
        candidate_nodes=candidate_nodes, temperature=temperature, top_p=top_p, top_k=top_k,
        max_new_tokens=max_new_tokens, trajectories=trajectories, seed=seed, batch_size=batch_size,
        deterministic_drafts=deterministic,
    )
    _calibrate_decoding(config, candidate_file, out, resume, acceptance_nodes)


def _calibrate_decoding(config, candidate_file: Optional[Path], out: Path, resume: bool, acceptance_nodes: int) -> None:
    """``treeopt calibrate``: decode the prompts (:func:`treeopt.calibrate`), with progress bars."""
    from stand_runtime import load_tree
    from treeopt import calibrate as run_calibration, depth_profile, load_prompts
    from treeopt.optimize.calibrate import resumable

    check_outputs({"--out": out}, {"--candidate": candidate_file, "--dataset": config.dataset})
    seed_out = _check_acceptance(out, acceptance_nodes)
    prompts = load_prompts(config.dataset, field=config.field, samples=config.samples, offset=config.offset)
    tree = load_tree(candidate_file).tree if candidate_file is not None else None
    if tree is not None and tree.num_nodes == 0:
        raise StandError(f"candidate tree {candidate_file} has no nodes")
    done = 0
    if resume and out.exists():  # a corrupt file or other settings fail now, not after the model has loaded
        done = len(resumable(config, out, tree, prompts).per_prompt)
    elif resume:
        console.print(f"nothing to resume at {out}: a new calibration starts", highlight=False)
    target, tokenizer = loading.load_model(config.model)
    with render.progress(console, *render.calibration_columns()) as bar:
        if done:
            console.print(f"resuming {out}: {done} of {len(prompts)} prompts already calibrated")
        result = run_calibration(config, target, tokenizer, out, resume=resume, candidate=tree, prompts=prompts,
                                 progress=_calibration_hooks(bar, len(prompts)))
    console.print(render.profile_table(f"calibrated candidate ({config.method})",
                                       depth_profile(result.candidate, result.alpha)))
    timings = result.metadata.get("timings", {})
    counted = ("decoding steps (target forwards)" if config.method == "direct" else
               "replayed steps (several step sequences walked along each trajectory)")
    times = ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in timings.items() if v)
    console.print(f"{result.steps:.0f} {counted} over {len(result.per_prompt)} prompts; trajectories that reach "
                  "EOS end before --max-new-tokens, so the tokens bar may stop short of its total"
                  + (f"; times (s): {times}" if times else ""))
    console.print(f"calibration written to {out}")
    if seed_out is not None:
        _measure_acceptance(config, target, tokenizer, prompts, seed_out, acceptance_nodes)


def _check_acceptance(out: Path, nodes: int) -> Optional[Path]:
    """The acceptance seed's path next to ``out`` (checked writable now), None when ``nodes`` is 0."""
    from stand_runtime.store.drafting import parse_dynamic
    from stand_runtime.files import check_writable
    from treeopt.optimize.acceptance import acceptance_path

    if nodes == 0:
        return None
    if nodes < 0:
        raise StandError(f"--acceptance-nodes must be >= 0 (0: skip), got {nodes}")
    try:
        parse_dynamic(f"dynamic-{nodes}")  # its range, said now
    except StandError as error:
        raise StandError(f"--acceptance-nodes {nodes}: {error}") from None
    path = acceptance_path(out)
    check_writable(path)
    return path


def _measure_acceptance(config, target, tokenizer, prompts: list, out: Path, nodes: int) -> None:
    """Decode the prompts on dynamic-``nodes`` and save the value rule's acceptance seed (with progress)."""
    from stand_runtime.sizing.acceptance_seed import find_acceptance_seed, seed_path
    from treeopt.optimize.acceptance import calibrate_acceptance

    with render.progress(console) as bar:
        task = bar.add_task(f"acceptance seed (dynamic-{nodes})", total=len(prompts) * config.max_new_tokens)
        seed, paths = calibrate_acceptance(config, target, tokenizer, prompts, out, nodes=nodes,
                                           on_tokens=lambda count: bar.advance(task, count))
    drafted = int(seed.drafted.sum())
    accepted = int(seed.accepted.sum())
    console.print(f"acceptance seed for {seed.model}: {drafted} nodes drafted, {accepted} on accepted paths; "
                  f"written to {' and '.join(map(str, paths))}")
    if len(paths) == 1:
        cached, kept = seed_path(seed.model), find_acceptance_seed(target)
        where = f"cached at {cached}" if cached.is_file() else "bundled with the package"
        err_console.print(f"note: the acceptance seed value-sized trees use for this model ({where}, "
                          f"{int(kept.drafted.sum())} nodes drafted) counted more than this one and stays in use; "
                          f"to use this one instead: cp {paths[0]} {cached}", highlight=False, soft_wrap=True)


def _calibration_hooks(bar, prompts: int):
    """:class:`treeopt.Progress` hooks that drive a prompts bar and a tokens bar (with its rate)."""
    from treeopt import Progress

    prompts_task = bar.add_task("prompts", total=prompts, rate="")
    tokens_task = bar.add_task("tokens", total=None, rate="")
    started = {}

    def start(count, tokens):
        bar.update(prompts_task, total=prompts, advance=prompts - count)
        bar.update(tokens_task, total=tokens)
        started.update(t=time.perf_counter(), n=0)

    def tokens(count):
        started["n"] += count
        elapsed = time.perf_counter() - started["t"]
        bar.update(tokens_task, advance=count, rate=f"{started['n'] / max(elapsed, 1e-9):.0f} tok/s")

    return Progress(start=start, tokens=tokens, prompt_done=lambda _: bar.advance(prompts_task),
                    stage=lambda name: bar.update(prompts_task, description=f"prompts ({name})"))


def _calibrate_traces(path: Path, candidate_file: Optional[Path], candidate_nodes: int, group_field: str, text_field: str,
                      prompt_field: str, max_tokens: int, tokenizer_spec: str, out: Path) -> None:
    """``treeopt calibrate --traces``: greedy replay calibration from recorded traces."""
    from stand_runtime import load_tokenizer, load_tree
    from treeopt import Prior, candidate_tree, depth_profile
    from treeopt.data.traces import load_traces, tokenize_groups
    from treeopt.optimize.trace_calibration import calibrate_traces

    check_outputs({"--out": out}, {"--traces": path, "--candidate": candidate_file})
    tree = load_tree(candidate_file).tree if candidate_file is not None else candidate_tree(candidate_nodes, Prior())
    if tree.num_nodes == 0:
        raise StandError(f"candidate tree {candidate_file} has no nodes")
    groups, _ = load_traces(path, group_field=group_field, text_field=text_field, prompt_field=prompt_field)
    tokenizer = load_tokenizer(tokenizer_spec)
    tokenize_groups(groups, tokenizer, max_tokens)
    total = sum(len(t) for g in groups for t in g.trace_ids)

    def save(calibration, group) -> None:
        calibration.metadata = {"source": "traces", "traces": str(path), "groups": len(calibration.per_prompt),
                                "groups_total": len(groups)}  # export names an interrupted run's file as such
        calibration.save(out)
        bar.advance(groups_task)

    with render.progress(console) as bar:
        groups_task = bar.add_task("trace groups", total=len(groups))
        result = calibrate_traces(groups, tree, on_group=save)
    result.metadata.update({"traces": str(path), "groups_total": len(groups), "tokenizer": tokenizer_spec, "tokens": total})
    result.save(out)
    console.print(render.profile_table("calibrated candidate (traces, greedy replay)", depth_profile(result.candidate, result.alpha)))
    console.print(f"{counted(round(result.steps), 'step')} over {counted(len(groups), 'trace group')} "
                  f"({counted(total, 'token')}); calibration written to {out}")
