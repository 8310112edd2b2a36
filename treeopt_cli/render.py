"""Presentation for the CLI: rich tables of decoding statistics, tree profiles, benchmark results and
the reliability of value-sized trees (docs/algorithms.md §3.7), progress displays and streamed text.

The packages (``stand_runtime``, ``treeopt``) return data; only the CLI side imports rich.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from stand_runtime.errors import counted

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing them would load torch for every command, --help too
    from stand_runtime import DecodeStats
    from treeopt import DepthProfile


def _table(columns, *, no_wrap: bool = False, label_width: int | None = None, **options) -> Table:
    """A rich Table (``options``: title, caption, min_width, ...; a caption left-justified) whose first
    column is left-justified (at least ``label_width`` wide) and the others right-justified."""
    table = Table(**({"caption_justify": "left"} if "caption" in options else {}), **options)
    for index, column in enumerate(columns):
        table.add_column(column, justify="right" if index else "left", no_wrap=no_wrap,
                         min_width=None if index else label_width)
    return table


def stats_table(stats: DecodeStats, title: str = "decoding") -> Table:
    """One decoding run: tokens, steps, acceptance length, throughput and the time split."""
    table = _table(("metric", "value"), title=title)
    drafted = stats.drafted_per_step
    rows = [
        ("prompt tokens", f"{stats.prompt_tokens}"),
        ("new tokens", f"{stats.new_tokens}"),
        ("target forwards (steps)", f"{stats.target_forwards}"),
        ("acceptance length (tokens/step)", f"{stats.acceptance_length:.2f}"),
        ("drafted nodes per step", f"{sum(drafted) / len(drafted):.1f}" if drafted else "0"),
        ("throughput (tokens/s, prefill excluded)", f"{stats.tokens_per_s:.1f}"),
        ("prefill (s)", f"{stats.prefill_s:.2f}"),
        ("drafting (s)", f"{stats.drafting_s:.2f}"),
        ("target forwards (s)", f"{stats.forward_s:.2f}"),
        ("verification (s)", f"{stats.verification_s:.2f}"),
        ("bookkeeping (s)", f"{stats.bookkeeping_s:.2f}"),
    ]
    memory = stats.store or {}
    if "entries" in memory:  # an n-gram store
        rows.append(("store entries / hit rate", f"{memory['entries']} / {memory['hit_rate']:.2f}"))
    if "filled_rows" in memory:  # Token Recycling's matrix
        rows.append(("matrix rows filled", f"{memory['filled_rows']}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _bar(value: float, scale: float, width: int = 16) -> str:
    if scale <= 0:
        return ""
    filled = value / scale * width
    return "█" * int(filled) + ("▌" if filled - int(filled) >= 0.5 else "")


def profile_table(name: str, profile: DepthProfile) -> Table:
    """A tree's depth profile: nodes and widest fan-out per depth, with bars, and the calibration's
    expected accepted tokens per depth (sum of alpha-hat over the depth's nodes) when it has them."""
    expected = profile.expected_acceptance_length
    title = f"{name}\n{counted(profile.num_nodes, 'node')}, max depth {profile.max_depth}"
    if expected is not None:
        title += f", τ̂ {expected:.2f}"
    caption = "fan-out: most children of one node at the depth above"
    if profile.num_nodes == 0:  # as method.resolve refuses it for decoding, in its words
        caption = "no draft nodes: decoding with this tree would be plain decoding (use method 'ar')"
    elif profile.alpha_per_depth is not None:
        caption += ("; Σα̂: expected accepted tokens at that depth (calibration estimates, so a deeper level can "
                    "exceed a shallower one); τ̂ = 1 + ΣΣα̂, expected tokens per target forward")
    table = Table(title=title, caption=caption, caption_justify="left")
    table.add_column("depth", justify="right")
    table.add_column("nodes", justify="right")
    table.add_column("", justify="left")
    table.add_column("fan-out", justify="right")
    if profile.alpha_per_depth is not None:
        table.add_column("Σα̂", justify="right")
        table.add_column("", justify="left")
    top_nodes = max(profile.nodes_per_depth, default=1)
    top_alpha = max(profile.alpha_per_depth or [0.0]) or 1.0
    for depth, (count, width) in enumerate(zip(profile.nodes_per_depth, profile.width_per_depth), start=1):
        row = [str(depth), str(count), _bar(count, top_nodes, 10), str(width)]
        if profile.alpha_per_depth is not None:
            alpha = profile.alpha_per_depth[depth - 1]
            row += [f"{alpha:.3f}", _bar(alpha, top_alpha, 10)]
        table.add_row(*row)
    return table


def curve_table(curve: list[dict], chosen: int, every: int = 8) -> Table:
    """The --nodes auto curve: expected acceptance length, latency and tokens/s per tree size."""
    table = Table(title=f"tree size vs expected throughput (chosen: {chosen} nodes)")
    for column in ("nodes", "expected τ", "latency (ms)", "expected tokens/s"):
        table.add_column(column, justify="right")
    for row in curve:
        if row["nodes"] % every == 0 or row["nodes"] == chosen or row["nodes"] == 1:
            style = "bold green" if row["nodes"] == chosen else None
            table.add_row(str(row["nodes"]), f"{row['expected_acceptance_length']:.3f}", f"{row['latency_s'] * 1e3:.1f}",
                          f"{row['tokens_per_s']:.2f}", style=style)
    return table


def bench_tables(results, speedups: dict, title: str, intervals: dict | None = None,
                 bounds: dict | None = None) -> list[Table]:
    """The benchmark in narrow tables (each fits 80 columns): speed (τ, tokens/s, the speedup over ar with
    its 95% interval, the latency bound, the time outside the forward), work (tree size, drafted nodes,
    tokens, steps, seconds, τ per trajectory) and, for prompts with reference answers, accuracy."""
    intervals, bounds = intervals or {}, bounds or {}
    label_width = max((len(result.label) for result in results), default=6)  # a label never wraps its "]"
    speed = _table(("method", "τ", "tokens/s", "× ar", "95% interval", *(["bound"] if bounds else []), "host"),
                   no_wrap=True, label_width=label_width, title=title,
                   caption="τ: tokens per target forward · × ar: tokens/s over plain decoding, 95% bootstrap interval "
                   "over prompts · bound: τ·t(1)/t(d+1), the speedup τ gives at d drafted nodes per step (the work "
                   "table's drafted column) with this machine's cached latency profile and no host work (an "
                   "estimate) · host: time outside the forward")
    for result in results:
        ratio, interval = speedups.get(result.label), intervals.get(result.label)
        row = [result.label, f"{result.acceptance_length:.2f}", f"{result.tokens_per_s:.1f}",
               "—" if ratio is None else f"{ratio:.2f}×",
               "—" if interval is None else f"{interval[0]:.2f}–{interval[1]:.2f}"]
        if bounds:
            row.append(f"{bounds[result.label]:.2f}×")
        row.append(f"{100 * result.host_fraction:.1f}%" if result.forward_s else "—")  # vLLM: forwards not timed apart
        speed.add_row(*row)
    graded = any(result.graded for result in results)
    by_trajectory = any(len(result.by_trajectory) > 1 for result in results)
    caption = ("K: static tree nodes, a dynamic tree's node budget (dynamic-auto: its cap) · pld: its chain length · "
               "drafted: nodes drafted per target forward, which differs from K: store misses leave tree nodes out, "
               "STAND's copy path adds copied tokens beyond them, dynamic-auto drafts what pays")
    caption += " · τ by trajectory: τ of the t-th trajectory of every prompt" if by_trajectory else ""
    trajectory = ["τ by trajectory"] if by_trajectory else []
    work = _table(("method", "K", "drafted", "tokens", "steps", "seconds", *trajectory), no_wrap=True,
                  label_width=label_width, title="work per method", caption=caption)
    for result in results:
        row = [result.label, str(result.tree_nodes), f"{result.mean_drafted:.1f}", str(result.tokens), str(result.steps),
               f"{result.decode_s:.1f}"]
        if by_trajectory:
            taus = result.acceptance_by_trajectory()
            row.append(" ".join(f"{t:.2f}" for t in taus) if len(taus) <= 4 else f"{taus[0]:.2f} … {taus[-1]:.2f}")
        work.add_row(*row)
    tables = [speed, work]
    if graded:
        answers = _table(("method", "majority vote", "trajectories right"), title="answers (prompts with a reference "
                         "answer)", caption="majority vote: prompts whose most common extracted answer over the "
                         "trajectories is right")
        for result in results:
            answers.add_row(result.label, f"{result.correct}/{result.graded}",
                            f"{result.trajectories_correct}/{result.trajectories_graded}")
        tables.append(answers)
    return tables


def vllm_bench_table(results, speedups: dict, intervals: dict, title: str) -> Table:
    """``treeopt bench-vllm``: per method τ, throughput and speedup over vLLM plain decoding."""
    table = _table(("method", "tokens", "τ (tokens/forward)", "draft tokens/step", "tokens/s", "vs vLLM plain [95%]"),
                   title=title)
    for result in results:
        ratio, interval = speedups.get(result.label), intervals.get(result.label)
        shown = "-" if ratio is None else f"{ratio:.2f}x" + ("" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]")
        per_step = result.drafted / result.steps if result.steps else 0.0
        table.add_row(result.label, str(result.tokens), f"{result.acceptance_length:.2f}",
                      "-" if result.method == "hf" else f"{per_step:.2f}", f"{result.tokens_per_s:.1f}", shown)
    return table


def search_table(summary: dict, title: str) -> Table:
    """Per method: accuracy (correct / graded), tokens, acceptance length, drafted tokens per row and
    step, tokens/s, speedup over ``ar`` and the ceiling its acceptance allows at the run's batch
    (:mod:`treeopt.evaluate.ceiling`; "-" without a measured acceptance)."""
    table = _table(("method", "accuracy", "tokens", "τ", "drafted/step", "tok/s", "x plain", "ceiling"), title=title,
                   title_justify="left", min_width=len(title))  # the title on one line where it fits
    base = summary.get("ar", {}).get("tokens_per_s")
    for name, row in summary.items():
        accuracy = "-" if row["accuracy"] is None else f"{row['correct']}/{row['graded']}"
        ratio = f"{row['tokens_per_s'] / base:.2f}x" if base else "-"
        limit = f"{row['ceiling']['speedup']:.2f}x" if row.get("ceiling") else "-"
        table.add_row(name, accuracy, f"{row['tokens']}", f"{row['acceptance_length']:.2f}",
                      f"{row.get('drafted_per_row_step', 0.0):.1f}", f"{row['tokens_per_s']:.1f}", ratio, limit)
    return table


def batched_sizing_table(summary: dict) -> Table | None:
    """Per value-sized method and width of its forwards' widest row (drafted nodes): forwards, tokens
    a forward was expected to emit against those it emitted, and predicted against observed tokens/s
    (:class:`treeopt.evaluate.reliability.ForwardLog`); None when no method logged a batched forward."""
    logged = [(name, row["batched_sizing"]) for name, row in summary.items() if row.get("batched_sizing")]
    if not logged:
        return None
    table = _table(("method", "width", "forwards", "tokens pred.", "tokens obs.", "tok/s pred.", "tok/s obs."),
                   title="batched sizing: predicted vs observed, by the widest row's drafted nodes")
    rate = lambda value: "-" if value is None else f"{value:.1f}"  # noqa: E731
    for name, log in logged:
        for cell in log["bins"]:
            width = f"{cell['low']}+" if cell["high"] is None else (
                f"{cell['low']}" if cell["high"] == cell["low"] + 1 else f"{cell['low']}-{cell['high'] - 1}")
            table.add_row(name, width, f"{cell['forwards']}", f"{cell['predicted_tokens']:.2f}",
                          f"{cell['observed_tokens']:.2f}", rate(cell["predicted_tokens_per_s"]),
                          rate(cell["observed_tokens_per_s"]))
    return table


def diagnostics_tables(results, depths: int = 6) -> list[Table]:
    """Why each method's acceptance length is what it is: the acceptance rate per depth
    (:func:`stand_runtime.engine.metrics.acceptance_by_depth`) and, for STAND, the share of step roots
    answered by each store table (n = 3, 2, 1; miss) with Σmin(p, q) and p(argmax q) at those roots."""
    drafted = [(result.label, result.diagnostics()) for result in results if result.method != "ar"]  # ar drafts nothing
    if not drafted:
        return []  # plain decoding alone: no table of empty rows
    reached = max((row["depth"] for _, diag in drafted for row in diag["acceptance_by_depth"] if row["offered"]), default=1)
    depths = min(depths, reached)  # no empty columns for depths no method offered
    rates_table = _table(("method", *(f"α{d}" for d in range(1, depths + 1))),
                         title="acceptance rate per depth (accepted / offered)")
    for label, diag in drafted:
        rates = {row["depth"]: row for row in diag["acceptance_by_depth"]}
        rates_table.add_row(label, *[f"{rates[d]['rate']:.2f}" if d in rates and rates[d]["offered"] else "–"
                                     for d in range(1, depths + 1)])
    tables = [rates_table]
    # roots are recorded where p is (sampling); at temperature 0 none are, and a row of zeros would mislead
    rooted = [(label, diag["root"]) for label, diag in drafted
              if any(row.get("steps", 0) > 0 for n, row in (diag.get("root") or {}).items() if n != "all")]
    if rooted:
        max_n = max((int(n) for _, root in rooted for n in root if n != "all"), default=3)
        roots = _table(("method", *(f"n={n}" if n else "miss" for n in range(max_n, -1, -1)), "Σmin(p,q)", "p(top q)"),
                       title="STAND step roots: store table that answered, and q vs p there",
                       caption="n: context tokens of the matching store table · Σmin(p,q): chance a draft sampled "
                       "from q is accepted · p(top q): the target's probability of q's top token")
        for label, root in rooted:
            shares = [f"{root.get(str(n), {'share': 0.0})['share']:.2f}" for n in range(max_n, -1, -1)]
            roots.add_row(label, *shares, f"{root['all'].get('overlap', 0.0):.3f}", f"{root['all'].get('top1', 0.0):.3f}")
        tables.append(roots)
    return tables


def reliability_tables(results) -> list[Table]:
    """One table per bench result that logged predictions (a value-sized tree): per bin of predicted
    P(path accepted) the bin's range, nodes, mean predicted, observed accepted share and their gap,
    with the overall expected calibration error in the title."""
    return [reliability_table(r.label, r.reliability.summary()) for r in results if r.reliability is not None]


def reliability_table(label: str, summary: dict) -> Table:
    """The table of one :func:`treeopt.evaluate.reliability.reliability` summary."""
    ece = "–" if summary["ece"] is None else f"{summary['ece']:.4f}"
    table = _table(("predicted P bin", "nodes", "mean predicted", "observed", "gap"),
                   title=f"{label}: predicted vs observed acceptance per drafted node (ECE {ece}, "
                   f"{summary['nodes']} nodes)",
                   caption="predicted: P(path accepted) the value rule read from its acceptance map when it sized the "
                   "step · observed: share of those nodes whose path was accepted · gap = observed - predicted")
    for row in summary["bins"]:
        table.add_row(f"[{row['low']:.2g}, {row['high']:.2g})", str(row["nodes"]), f"{row['mean_predicted']:.4f}",
                      f"{row['observed']:.4f}", f"{row['gap']:+.4f}")
    if summary["nodes"]:
        table.add_row("all", str(summary["nodes"]), f"{summary['mean_predicted']:.4f}", f"{summary['observed']:.4f}",
                      f"{summary['observed'] - summary['mean_predicted']:+.4f}", style="bold")
    return table


class ProgressLines:
    """A progress display for a console that is not a terminal: a plain line at most every 10%.

    rich redraws its live bar into files and pipes when colour is forced (``FORCE_COLOR``), which
    floods logs; this prints ``description n/total`` lines instead. Same calls as rich's Progress.
    """

    def __init__(self, console, steps: int = 10) -> None:
        self.console = console
        self.steps = steps
        self.tasks: dict[int, dict] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for task in self.tasks.values():
            if task["printed"] != task["completed"]:
                self._print(task)

    def add_task(self, description: str, total: float | None = None, **fields) -> int:
        task_id = len(self.tasks)
        self.tasks[task_id] = {"description": description, "total": total, "completed": 0, "printed": 0, "fields": fields}
        return task_id

    def update(self, task_id: int, *, total=None, advance: float = 0, description: str | None = None, **fields) -> None:
        task = self.tasks[task_id]
        if total is not None:
            task["total"] = total
        if description is not None:
            task["description"] = description
        task["fields"].update(fields)
        task["completed"] += advance
        total = task["total"]
        if total and task["completed"] - task["printed"] >= total / self.steps:
            self._print(task)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _print(self, task: dict) -> None:
        total = task["total"]
        done = int(task["completed"])
        extra = " ".join(str(v) for v in task["fields"].values() if v)
        where = f"{done}/{int(total)}" if total else f"{done}"
        self.console.print(f"{task['description']} {where} {extra}".rstrip(), highlight=False)
        task["printed"] = task["completed"]


def _columns(field: str | None = None) -> list:
    """A bar, done/total, the task's ``field`` (when given), elapsed and remaining time."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    shown = [] if field is None else [TextColumn(f"{{task.fields[{field}]}}")]
    return [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), *shown, TimeElapsedColumn(),
            TimeRemainingColumn()]


def eta_columns() -> list:
    """Progress columns of a measurement: a bar, done/total, elapsed and remaining time."""
    return _columns()


def search_columns() -> list:
    """Progress columns of ``search``: :func:`eta_columns` with the tokens field (DVTS counts its tokens there)."""
    return _columns("tokens")


def time_left(elapsed_s: float, done: int, total: int) -> str:
    """``"about 3 min left"`` from the rate so far (``""`` before the first unit is done)."""
    if done <= 0 or elapsed_s <= 0:
        return ""
    left_s = elapsed_s / done * max(total - done, 0)
    return f"about {left_s / 60:.0f} min left" if left_s >= 90 else f"about {left_s:.0f} s left"


def calibration_columns() -> list:
    """Progress columns of ``calibrate``: :func:`eta_columns` with a rate field."""
    return _columns("rate")


def progress(console, *columns):
    """A rich live progress bar on a terminal, :class:`ProgressLines` anywhere else."""
    if console.file.isatty():
        from rich.progress import Progress

        return Progress(*columns, console=console)
    return ProgressLines(console)


class TextStream:
    """A streaming callback (``generate(on_step=lambda step: stream(step.tokens))``) that prints decoded text.

    What it prints is always a prefix of the result's ``text``: a partial UTF-8 character and, with stop
    strings, the last ``len(stop) - 1`` characters wait for the next step, and a stop string is never
    printed (:func:`stand_runtime.engine.stopping.text_before_stop`). :meth:`end` prints the rest."""

    def __init__(self, tokenizer, console, stop=()) -> None:
        self._tokenizer = tokenizer
        self._console = console
        self._stop = tuple(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._tokens: list[int] = []
        self._printed = 0

    def _text(self) -> str:
        from stand_runtime.engine.stopping import text_before_stop

        return text_before_stop(self._tokenizer.decode(self._tokens, skip_special_tokens=True), self._stop)

    def __call__(self, tokens: list[int]) -> None:
        self._tokens.extend(int(t) for t in tokens)
        text = self._text().rstrip("\ufffd")  # a partial character waits for its next bytes
        safe = len(text) - self._hold
        if safe > self._printed:
            self._console.out(text[self._printed: safe], end="", highlight=False)
            self._printed = safe

    def end(self) -> None:
        """Print what is left and end the line."""
        self._console.out(self._text()[self._printed:], highlight=False)
        self._printed = 0
        self._tokens = []


def trace_tables(data: dict, title: str) -> list[Table]:
    """The trace bench (:func:`treeopt.evaluate.trace_bench.trace_results_json`) in two narrow tables.

    Acceptance: τ at the first and last trajectory index and pooled, each with its 95% bootstrap
    interval over groups. Work: nodes per step, µs per step drafting and feeding, memory, and τ's
    ratio to the reference (tuned SuffixDecoding) pooled with its paired interval.
    """
    results = data["results"]
    last = len(results[0]["acceptance_by_trajectory"])
    acceptance = _table(("method", "τ t1", *([f"τ t{last}"] if last > 1 else []), "τ pooled"), no_wrap=True,
                        title=title, caption="τ: tokens per step (greedy replay) · [95% bootstrap interval over "
                        "groups]")
    for r in results:
        cells = [(r["acceptance_by_trajectory"][0], r["interval_by_trajectory_95"][0])]
        if last > 1:
            cells.append((r["acceptance_by_trajectory"][-1], r["interval_by_trajectory_95"][-1]))
        cells.append((r["acceptance_pooled"], r["interval_pooled_95"]))
        acceptance.add_row(r["label"], *(f"{v:.2f} [{lo:.2f}–{hi:.2f}]" for v, (lo, hi) in cells))
    reference = next((k for r in results for k in r if k.startswith("ratio_vs_")), None)
    ratio = ["× ref [95%]"] if reference else []
    work = _table(("method", "nodes", "µs draft", "µs feed", "MB", *ratio), no_wrap=True, title="work per method",
                  caption="nodes: drafted per step · µs per step drafting and feeding "
                  "(verification and drafter feeding) · MB: drafter memory per group at its end"
                  + (f" · × ref: pooled τ over {reference.removeprefix('ratio_vs_')}" if reference else ""))
    for r in results:
        row = [r["label"], f"{r['nodes_per_step']:.1f}", f"{r['drafting_us_per_step']:.0f}",
               f"{r['feeding_us_per_step']:.0f}",
               "—" if r["memory_mb_per_group"] is None else f"{r['memory_mb_per_group']:.1f}"]
        if reference:
            ratio = r.get(reference, {}).get("pooled")
            row.append("—" if ratio is None else f"{ratio['ratio']:.2f} [{ratio['interval_95'][0]:.2f}–"
                       f"{ratio['interval_95'][1]:.2f}]")
        work.add_row(*row)
    return [acceptance, work]


def budget_table(block: dict, title: str) -> Table:
    """The trace bench's budget sweep (:func:`treeopt.evaluate.trace_bench.budget_rows`): per method a
    row, per budget K a column of τ pooled and τ per drafted token; the highest τ at each K in bold."""
    table = _table(("method", *(f"K={k}" for k in block["budgets"])), no_wrap=True,
                   label_width=max(len(m) for m in block["methods"]), title=title,
                   caption="K: drafted tokens per step at most · cell: τ pooled (tokens per step, greedy replay) / τ "
                   "per drafted token (tokens / drafted nodes) · bold: the highest τ at that K")
    cells = {(r["label"], r["budget"]): r for r in block["rows"]}
    for label in block["methods"]:
        row = [label]
        for k in block["budgets"]:
            r = cells.get((label, k))
            if r is None:
                row.append("—")
                continue
            per = "—" if r["tau_per_drafted"] is None else f"{r['tau_per_drafted']:.2f}"
            row.append(Text(f"{r['tau']:.2f} / {per}", style="bold" if block["best"][str(k)] == label else ""))
        table.add_row(*row)
    return table


def projection_table(block: dict) -> Table:
    """The trace bench projected onto a latency profile (:func:`treeopt.evaluate.projection.projection_block`)."""
    profile, plain = block["profile"], block["plain"]
    table = _table(("method", "τ", "K", "t(K+1) ms", "host ms", "× plain [95%]", "host 0"), no_wrap=True,
                   title=f"projected speedup over plain decoding, profile {profile['path']} ({profile['format']})",
                   caption=f"× plain: {block['formula']} with τ pooled, K drafted nodes per step, t(n) the profile's "
                   f"forward (t(1) {plain['t1_ms']:.2f} ms), host the µs per step drafting + feeding measured here "
                   f"[95%: τ's interval] · host 0: the bound if host work were free · {plain['note']} · "
                   "*: K + 1 beyond the profile's sizes (extrapolated)")
    for m in block["methods"]:
        low, high = m["speedup_interval_95"]
        table.add_row(m["label"], f"{m['acceptance_length']:.2f}", f"{m['nodes_per_step']:.1f}" + "*" * m["extrapolated"],
                      f"{m['forward_ms']:.2f}", f"{m['host_ms']:.2f}", f"{m['speedup']:.2f}× [{low:.2f}–{high:.2f}]",
                      f"{m['speedup_host_free']:.2f}×")
    return table
