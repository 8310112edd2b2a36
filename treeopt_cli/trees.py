"""Tree files: ``treeopt candidate`` (build one), ``export`` (prune a calibration), ``show`` (profiles)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stand_runtime import StandError

from . import loading, render
from .app import app, console, one_line_errors, print_warning
from .options import PLOT_HELP, check_outputs, refuse_options


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
    from stand_runtime import TreeFile, save_tree
    from stand_runtime.files import check_writable
    from treeopt import Prior, candidate_tree, depth_profile, per_depth_tree

    check_writable(out)
    prior = Prior(base, decay)
    if profile is not None:
        refuse_options(ctx, ["nodes"], "--profile (the profile says the nodes per depth)")
        from stand_runtime.checks import parse_count

        counts = [parse_count("--profile entries", c, 1) for c in profile.split(",")]
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
    from stand_runtime import save_tree
    from treeopt import depth_profile, export_tree, load_calibration
    from treeopt.optimize.calibration import unfinished
    from treeopt.optimize.export import parse_nodes

    check_outputs({"--out": out}, {"CALIBRATION": calibration})
    if fmt not in ("stand", "choices", "family"):
        raise StandError(f"unknown --format {fmt!r} (use stand, choices or family)")
    if fmt == "family":
        refuse_options(ctx, ["nodes", "batch", "model", "show_profile"], "--format family (it holds the best tree of every "
                       "size; treeopt show FILE profiles its largest)")
    elif nodes != "auto":
        refuse_options(ctx, ["batch", "model"], "a fixed --nodes (they size --nodes auto)")
    count = parse_nodes(nodes) if fmt != "family" else None
    result = load_calibration(calibration)
    left = unfinished(result)
    if left is not None:
        print_warning(f"{calibration} holds {left}: an interrupted run (treeopt calibrate --resume completes a run "
                      f"over prompts); the tree is calibrated on those only")
    if fmt == "family":
        return _export_family(result, out)
    extra = {}
    if count is None:
        count, extra = _auto_size(result, model, batch)
    if count > result.candidate.num_nodes:
        raise StandError(f"--nodes {count} is larger than the candidate tree ({result.candidate.num_nodes} nodes)")
    tree_file = export_tree(result, count, extra)
    save_tree(tree_file, out, fmt)
    if show_profile:
        console.print(render.profile_table(str(out), depth_profile(tree_file.tree, tree_file.expected_acceptance)))
    tau = "" if tree_file.expected_acceptance is None else \
        f", calibrated τ̂ {1 + float(sum(tree_file.expected_acceptance)):.2f} tokens per step"
    console.print(f"{tree_file.tree.num_nodes}-node tree, depth {tree_file.tree.max_depth}{tau}, written to {out} "
                  f"({fmt} format; `treeopt show {out}` prints its depth profile)")


def _export_family(result, out: Path) -> None:
    """``export --format family``: the best tree of every size, in one file."""
    from stand_runtime.files import write_json_atomic
    from stand_runtime.trees.tree_io import family_to_json
    from treeopt import export_family

    family = export_family(result)
    write_json_atomic(out, family_to_json(family), None)
    console.print(f"tree family of {len(family.members)} sizes ({min(family.members)}..{max(family.members)} nodes) "
                  f"written to {out}")


def _auto_size(result, model: Optional[str], batch: int) -> tuple[int, dict]:
    """``--nodes auto``: measure (or read) this machine's latency, show the size curve, return (K, metadata)."""
    from treeopt.optimize.export import choose_export_size, latency_model

    name = latency_model(result, model)
    target, _ = loading.load_model(name)
    profile = loading.cached_profile(target, name, "forward latency (once per model and device)")
    loading.warn_latency(profile)
    choice = choose_export_size(result, profile, batch)
    console.print(render.curve_table(choice.curve, choice.nodes))
    choice.check()
    return choice.nodes, choice.metadata


def _note_families(files: list[str]) -> None:
    """A line for each tree family among ``files``: how many trees it holds (show profiles its largest)."""
    from stand_runtime.trees.tree_io import bundled_calibrations, is_family, load_family

    for spec in files:  # a bundled name of a calibration and a family both shows the calibration
        if is_family(spec) and (Path(spec).is_file() or spec not in bundled_calibrations()):
            sizes = sorted(load_family(spec).members)
            console.print(f"{spec}: a tree family of {len(sizes)} trees ({sizes[0]}-{sizes[-1]} nodes), shown by its "
                          "largest; treeopt export CALIBRATION --nodes N writes any one from the calibration it "
                          "came from", highlight=False, soft_wrap=True)


def _load_shown(files: list[str], load) -> list[tuple]:
    """``(spec, tree, alpha)`` of every file ``load`` reads. A file that exists but holds no tree (e.g.
    ``trees/*.json`` takes the bundled acceptance seed) is skipped with one warning naming it, as long as
    another file is shown; a missing file or an unknown name stays an error.

    Raises:
        StandError: a spec that is neither a file nor a known name, or no file holding a tree.
    """
    loaded, skipped = [], []
    for spec in files:
        try:
            loaded.append((spec, *load(spec)))
        except StandError as error:
            if len(files) == 1 or not Path(spec).is_file():
                raise
            skipped.append(error)
    if not loaded:
        raise skipped[0]
    for error in skipped:
        print_warning(f"skipped: {error}")
    return loaded


@app.command()
@one_line_errors
def show(
    files: list[str] = typer.Argument(..., help="Tree files, bundled tree names, or calibration files."),
    png: Optional[Path] = typer.Option(None, help=f"Also draw the profiles side by side into this PNG ({PLOT_HELP})."),
    tree_png: Optional[Path] = typer.Option(None, help="Also draw each tree node by node into this PNG, colour and size = α̂ (needs matplotlib)."),
) -> None:
    """Show depth profiles side by side: nodes, fan-out and expected accepted tokens per depth."""
    from rich.columns import Columns

    from treeopt import depth_profile, load_tree_or_calibration
    from treeopt.evaluate.plots import plot_profiles, plot_trees

    check_outputs({"--png": png, "--tree-png": tree_png}, {"FILES": files}, plot=png or tree_png)
    loaded = _load_shown(files, load_tree_or_calibration)
    profiles = [(spec, depth_profile(tree, alpha)) for spec, tree, alpha in loaded]
    console.print(Columns([render.profile_table(spec, profile) for spec, profile in profiles], padding=(0, 3)))
    _note_families(files)
    if png is not None:
        plot_profiles(profiles, png)
        console.print(f"plot written to {png}")
    if tree_png is not None:
        plot_trees(loaded, tree_png)
        console.print(f"tree view written to {tree_png}")
