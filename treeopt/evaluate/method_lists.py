"""Method lists as the benches and the search take them (``"ar,pld,stand"``): one parser for all.

Every bench (``bench``, ``bench-traces``, ``bench-vllm``) and ``search`` splits its
``--methods`` here, so an empty list, an empty name, an unknown or repeated method, and a method
whose optional package is missing are refused the same way everywhere, before any model loads.
"""

from __future__ import annotations

from typing import Sequence

from stand_runtime import StandError
from stand_runtime.drafters import check_method_available


def split_methods(text, valid: Sequence[str], *, requires: dict[str, str] | None = None,
                  option: str = "--methods", context: str = "") -> list[str]:
    """The method names of a comma-separated list (``"ar, stand"``), in order, each one of ``valid``.

    ``requires``: name → the engine method whose optional package it needs (a trace-bench
    ``suffix-tuned`` → ``suffix``; others are checked as themselves); ``option`` and ``context`` name
    the option and where the list applies, for messages.

    Raises:
        StandError: not text, an empty list or name, an unknown name (listing the valid ones), a repeated
            name, or a method whose optional package is not installed.
    """
    if not isinstance(text, str):
        raise StandError(f"{option} must be a comma-separated list of methods, got {text!r}")
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise StandError(f"{option} is empty: name at least one method ({', '.join(valid)})")
    if not all(names):
        raise StandError(f"an empty method name in {option} {text!r}")
    for name in names:
        if name not in valid:
            where = f" {context}" if context else ""
            raise StandError(f"unknown method {name!r}{where} (valid: {', '.join(valid)})")
    if len(set(names)) < len(names):
        raise StandError(f"a method is listed twice in {option} {text!r}")
    for name in names:
        check_method_available((requires or {}).get(name, name))
    return names
