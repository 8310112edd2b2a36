"""The ``treeopt`` command line: thin Typer commands over the ``treeopt`` and ``stand_runtime`` packages.

Each command parses options into the packages' frozen configs, calls them, and renders results with
rich. Bad input surfaces as a one-line ``error: ...`` and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
from typing import Optional

import typer
from rich.console import Console

from stand_runtime import StandError, __version__

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


if __name__ == "__main__":
    app()
