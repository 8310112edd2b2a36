"""The ``treeopt`` command line: thin Typer commands over the ``treeopt`` and ``stand_runtime`` packages.

Each command parses options into the packages' frozen configs, calls them, and renders results with
rich. Bad input surfaces as a one-line ``error: ...`` and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from stand_runtime import StandError, __version__
from treeopt import render

app = typer.Typer(
    name="treeopt",
    help="STAND: model-free speculative decoding with a logit n-gram store, and draft-tree optimization.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def one_line_errors(command):
    """Print StandError (and other expected input errors) as ``error: ...`` and exit 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except StandError as error:
            err_console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
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
    method: str = typer.Option("stand", help="stand | stand-det | ar"),
    temperature: float = typer.Option(0.6, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(0.95, help="Nucleus mass."),
    top_k: int = typer.Option(0, help="Top-k (0 = off)."),
    max_new_tokens: int = typer.Option(256, help="Tokens to generate at most."),
    seed: Optional[int] = typer.Option(None, help="Seed for every random draw."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the statistics to this JSON file."),
) -> None:
    """Decode one prompt, streaming the text, then show the decoding statistics."""
    from stand_runtime import generate as run_generate
    from stand_runtime import load_model

    with console.status(f"loading {model} ..."):
        target, tokenizer = load_model(model)
    streamer = _TextStreamer(tokenizer)
    result = run_generate(
        target, tokenizer, prompt, method=method, tree=tree, temperature=temperature, top_p=top_p, top_k=top_k,
        max_new_tokens=max_new_tokens, seed=seed, on_tokens=streamer,
    )
    streamer.finish()
    console.print(render.stats_table(result.stats, title=f"{method} on {model}"))
    if json_out is not None:
        write_json(json_out, {"method": method, "model": model, "tree": tree, "text": result.text, "stats": result.stats.as_dict()})
        console.print(f"statistics written to {json_out}")


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
