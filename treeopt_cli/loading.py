"""Loading the target model and saying what the machine's latency chose.

Commands call :func:`load_model` through this module (``loading.load_model(...)``), so a test can
replace the loading with a tiny model in one place.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Optional

from .app import console, err_console, print_warning


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
        print_warning(line)


@contextlib.contextmanager
def runtime_warnings():
    """Print each :class:`stand_runtime.errors.StandWarning` raised inside as one ``warning:`` line on stderr
    once the block ends (after any progress bar in it); other warnings pass on."""
    from stand_runtime.errors import StandWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StandWarning)
        try:
            yield
        finally:
            shown = [w for w in caught if issubclass(w.category, StandWarning)]
            others = [w for w in caught if not issubclass(w.category, StandWarning)]
    for w in others:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for w in shown:
        print_warning(str(w.message))


def announce_tree(target, method: str, tree: Optional[str]):
    """Say which tree ``auto`` chose for this machine, or how ``dynamic-auto`` is sized (measuring the latency
    profile once if needed, warning when it looks untrustworthy); the
    :class:`stand_runtime.sizing.tree_choice.TreeChoice` (``dynamic-auto``: an object with the
    ``profile``), or None for a method sized by neither."""
    from types import SimpleNamespace

    from stand_runtime.drafters import COPY_TOKENS, DYNAMIC_METHODS, TREE_METHODS, parse_dynamic
    from stand_runtime.method import DEFAULT_TREES, sized_family
    from stand_runtime.target.latency import profile_name
    from stand_runtime.sizing.tree_choice import machine_tree

    spec = tree or DEFAULT_TREES.get(method)
    dynamic = parse_dynamic(spec) if method in DYNAMIC_METHODS else None
    if dynamic is not None and dynamic.sized:
        profile = cached_profile(target, profile_name(target), "this machine's forward latency to size the drafts "
                                                               "(once per model, cached)")
        largest = dynamic.num_nodes + 1  # tokens of the largest forward: the root and every node
        console.print(f"tree {spec}: each step drafts the best-first nodes and copied tokens that pay for themselves "
                      f"(at most {dynamic.num_nodes}; a forward over one token {profile.at(1) * 1e3:.0f} ms, over "
                      f"{largest} {profile.at(largest) * 1e3:.0f} ms"
                      f"{' extrapolated' if largest > max(profile.sizes) else ''}, corrected as it runs)",
                      style="dim")
        warn_latency(profile)
        return SimpleNamespace(profile=profile)
    family = sized_family(spec) if method in TREE_METHODS else None
    if family is None:
        return None
    with runtime_warnings():
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

    with runtime_warnings():
        return cached_latency(target, model, on_measure=lambda: console.print(f"measuring {what} ...", style="dim"))


def successor_prior(target, tokenizer, methods, sampling, enabled: bool = True, skip: str = "--no-prior skips it"):
    """The target's successor prior for ``sampling`` (:mod:`stand_runtime.drafters.prior`) when one of
    ``methods`` is a STAND method and ``enabled``, else None; a measurement is announced (with ``skip``,
    how to skip it) and shown with the time left."""
    import time

    from stand_runtime.drafters.prior import method_prior
    from stand_runtime.target.model_facts import vocab_size

    from . import render

    shown: list = []  # [bar, task, tokens done, start time] once a measurement starts

    def report(done: int, total: int) -> None:
        if not shown:
            console.print(f"measuring the target's successor prior: {total:,} one-token forwards, once per model, dtype "
                          f"and distribution, then cached ({skip}) ...", style="dim", highlight=False, soft_wrap=True)
            bar = render.progress(console, *render.eta_columns())
            bar.__enter__()
            shown.extend([bar, bar.add_task("successor prior", total=total, left=""), 0, time.monotonic()])
        shown[0].update(shown[1], advance=done - shown[2], left=render.time_left(time.monotonic() - shown[3], done, total))
        shown[2] = done

    with runtime_warnings():
        try:
            for name in methods:
                prior = method_prior(name, target, tokenizer, sampling, vocab_size(target), enabled, report)
                if prior is not None:
                    return prior
            return None
        finally:
            if shown:
                shown[0].__exit__(None, None, None)
