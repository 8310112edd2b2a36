"""Loading the target model and saying what the machine's latency chose.

Commands call :func:`load_model` through this module (``loading.load_model(...)``), so a test can
replace the loading with a tiny model in one place.
"""

from __future__ import annotations

from typing import Optional

from .app import console, err_console


def load_model(model: str, dtype: str = "float32"):
    """The target and its tokenizer (:func:`stand_runtime.load_model`), with notes on the dtype and
    on a first load, and a spinner while it loads."""
    from stand_runtime import load_model as load
    from stand_runtime.target.models import dtype_note, first_load_note

    for note in (dtype_note(dtype), first_load_note(model)):
        if note:
            err_console.print(f"note: {note}", highlight=False)
    with console.status(f"loading {model} ..."):
        return load(model, dtype=dtype)


def warn_latency(profile, **observed) -> None:
    """Print :func:`stand_runtime.target.latency.latency_warnings` (an untrustworthy or contradicted profile)."""
    from stand_runtime.target.latency import latency_warnings

    for line in latency_warnings(profile, **observed):
        err_console.print(f"warning: {line}", style="yellow", highlight=False)


def announce_tree(target, method: str, tree: Optional[str]):
    """Say which tree ``auto`` chose for this machine (measuring the latency profile once if needed,
    and warning when it looks untrustworthy); returns the :class:`stand_runtime.tree_choice.TreeChoice`, or None
    when the method does not use ``auto``."""
    from stand_runtime.drafters import COPY_TOKENS, TREE_METHODS
    from stand_runtime.method import DEFAULT_TREES, sized_family
    from stand_runtime.tree_choice import machine_tree

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
    warn_latency(choice.profile)
    return choice


def cached_profile(target, model: str, what: str = "this machine's forward latency (once per model, cached)"):
    """The target's latency profile (:func:`stand_runtime.target.latency.cached_latency`), saying so when it is measured."""
    from stand_runtime.target.latency import cached_latency

    return cached_latency(target, model, on_measure=lambda: console.print(f"measuring {what} ..."))
