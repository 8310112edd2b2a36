"""The CLI reference page (``docs/cli.md``), made from the Typer app's own help: every command's usage,
arguments and options as ``treeopt COMMAND --help`` prints them, at a fixed width.

``python -m treeopt_cli.reference > docs/cli.md`` rewrites the page; ``tests/test_docs.py`` fails
when the checked-in page differs from what this gives.
"""

from __future__ import annotations

import click
import typer

from .app import app

WIDTH = 100
"""The help's width in characters (the page does not depend on the terminal it was made in)."""


def reference_markdown() -> str:
    """The page: a heading, then per command (in ``treeopt --help``'s order) its help in a code block."""
    group = typer.main.get_command(app)
    parts = ["# CLI reference", "",
             "Every command of `treeopt`, as its `--help` prints it. This page is generated from the Typer app "
             "(`python -m treeopt_cli.reference > docs/cli.md`); `tests/test_docs.py` fails when it is stale.", ""]
    parts += _block("treeopt", group, "treeopt")
    root = click.Context(group, info_name="treeopt")
    for name in group.list_commands(root):
        parts += _block(f"treeopt {name}", group.get_command(root, name), f"treeopt {name}", parent=root)
    return "\n".join(parts).rstrip("\n") + "\n"


def _block(title: str, command: click.Command, info_name: str, parent: click.Context | None = None) -> list[str]:
    ctx = click.Context(command, info_name=info_name.split()[-1], parent=parent, terminal_width=WIDTH,
                        max_content_width=WIDTH)
    text = "\n".join(line.rstrip() for line in command.get_help(ctx).splitlines())
    return [f"## {title}", "", "```text", text, "```", ""]


if __name__ == "__main__":
    import treeopt_cli  # noqa: F401  (registers every command and its placeholders)

    print(reference_markdown(), end="")
