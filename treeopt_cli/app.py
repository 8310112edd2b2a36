"""The Typer application, its consoles, and the console script's error handling.

Every command module registers itself on :data:`app`; :mod:`treeopt_cli` imports them all (in the
order ``treeopt --help`` lists them) and then gives every option its placeholder and range.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from stand_runtime import StandError, __version__
from stand_runtime.errors import StandWarning

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


def print_error(message: str) -> None:
    """``error: message`` on stderr, one line."""
    err_console.print(Text("error: ", style="bold red") + Text(message), highlight=False, soft_wrap=True)


def print_warning(message: str) -> None:
    """``warning: message`` on stderr, one line."""
    err_console.print(f"warning: {message}", style="yellow", highlight=False, soft_wrap=True)


def one_line_errors(command):
    """Print StandError as ``error: ...`` on stderr and exit 2; an interrupt (Ctrl-C) as one line, exit 130
    (every file is written atomically: what was written before is complete)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():  # restores Python's own display afterwards
                warnings.showwarning = functools.partial(_show_warning, warnings.showwarning)
                return command(*args, **kwargs)
        except StandError as error:
            print_error(str(error))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted (files already written are complete)", highlight=False)
            raise typer.Exit(130) from None
        except EOFError as error:  # click would report it as "aborted" (its reading of a closed stdin)
            print_error(f"unexpected end of input ({type(error).__name__}: {error})")
            raise typer.Exit(2) from None

    return wrapper


def _show_warning(shown, message, category, filename, lineno, file=None, line=None) -> None:
    """A :class:`stand_runtime.errors.StandWarning` as one ``warning:`` line; others as ``shown`` shows them."""
    if issubclass(category, StandWarning):
        print_warning(str(message))
    else:
        shown(message, category, filename, lineno, file, line)


def run() -> None:
    """The console script: usage errors (a bad option value, a missing argument, an unknown command) are
    one ``error: ...`` line with exit code 2, like every other bad input."""
    try:
        result = app(standalone_mode=False)
    except Exception as error:  # click's classes, whichever copy of click typer uses: matched by name
        kinds = {cls.__name__ for cls in type(error).__mro__}
        if "UsageError" in kinds:
            print_error(" ".join(error.format_message().split()))
            sys.exit(2)
        if "Exit" in kinds:
            sys.exit(error.exit_code)
        if "Abort" in kinds:
            err_console.print("aborted")
            sys.exit(130)
        raise
    sys.exit(result if isinstance(result, int) else 0)


def _version(value: bool) -> None:
    if value:
        console.print(f"treeopt {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """STAND toolkit: calibrate, export and inspect draft trees; decode with them."""
    from stand_runtime.checks import check_env_switches  # here: the CLI starts without numpy

    try:  # a bad on/off variable is refused on every command, also one that never reads it
        check_env_switches()
    except StandError as error:
        print_error(str(error))
        raise typer.Exit(2) from None
