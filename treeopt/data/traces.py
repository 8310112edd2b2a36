"""Recorded reasoning traces: loading a JSONL file of traces grouped by problem.

Each line is a JSON object with the trace's text (``--text-field``), the problem it answers
(``--prompt-field``) and a group key (``--group-field``): the traces of one group are the
trajectories 1..N of one problem, replayed in file order sharing one drafter memory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from stand_runtime import StandError
from stand_runtime.checks import check_int

from .datasets import jsonl_records


@dataclass
class TraceGroup:
    """The traces of one problem: the group key (``name``), the problem text (from its first trace), the
    traces' texts in file order, and their token ids once tokenized (:func:`tokenize_groups`)."""

    name: str
    prompt: str
    traces: list[str]
    prompt_ids: list[int] = field(default_factory=list)
    trace_ids: list[list[int]] = field(default_factory=list)


def load_traces(path: str | Path, *, group_field: str = "sample_group", text_field: str = "trace",
                prompt_field: str = "problem", min_group_size: int = 1) -> tuple[list[TraceGroup], int]:
    """The groups of a traces JSONL file (the module docstring's fields), in order of first appearance;
    ``(groups, skipped)``: those with at least ``min_group_size`` traces, and how many smaller ones were left out.

    Raises:
        StandError: a missing or unreadable file, an empty file, a line that is not a JSON object, a
            missing or non-text field (naming the line), or no group left.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise StandError(f"the traces file must be a path, got {type(path).__name__} {path!r}")
    path = Path(path)
    if path.is_dir():
        raise StandError(f"{path} is a folder, not a traces file (a JSONL file)")
    if not path.exists():
        raise StandError(f"no traces file {path}")
    min_group_size = check_int("min_group_size", min_group_size, 1)
    groups: dict[str, TraceGroup] = {}
    kinds: dict[str, type] = {}
    for number, record in jsonl_records(path, "traces file"):
        values = {}
        for name in (group_field, text_field, prompt_field):
            if name not in record:
                raise StandError(f"{path}:{number}: no field {name!r} (fields: {', '.join(sorted(record))})")
            if name != group_field and not isinstance(record[name], str):
                raise StandError(f"{path}:{number}: field {name!r} is not text")
            values[name] = record[name]
        value = values[group_field]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise StandError(f"{path}:{number}: group key {group_field!r} must be text or an integer, got "
                             f"{json.dumps(value)[:40]}")
        key = str(value)
        if key in kinds and kinds[key] is not type(value):
            raise StandError(f"{path}:{number}: group key {json.dumps(value)} and an earlier {key!r} of another type "
                             f"would name one group: write every key of a group the same way")
        kinds[key] = type(value)
        if key not in groups:
            groups[key] = TraceGroup(key, values[prompt_field], [])
        elif groups[key].prompt != values[prompt_field]:
            raise StandError(f"{path}:{number}: group {key!r} has another {prompt_field!r} than its first trace: the "
                             f"traces of one group answer one problem")
        groups[key].traces.append(values[text_field])
    if not groups:
        raise StandError(f"traces file {path} holds no traces")
    kept = [g for g in groups.values() if len(g.traces) >= min_group_size]
    if not kept:
        raise StandError(f"no group of {path} has {min_group_size} or more traces (largest: "
                         f"{max(len(g.traces) for g in groups.values())})")
    return kept, len(groups) - len(kept)


def tokenize_groups(groups: list[TraceGroup], tokenizer, max_tokens: int) -> None:
    """Tokenize every group's prompt and traces in place (no special tokens; traces cut to ``max_tokens``,
    empty ones dropped); StandError for a group whose prompt or every trace tokenizes to nothing."""
    max_tokens = check_int("max_tokens", max_tokens, 1)
    if not callable(tokenizer):
        raise StandError(f"tokenize_groups needs a tokenizer (callable on text), got {tokenizer!r}")
    if isinstance(groups, (str, bytes)) or not isinstance(groups, (list, tuple)):
        raise StandError(f"groups must be a list of TraceGroup (load_traces), got {type(groups).__name__}")
    for group in groups:
        if not isinstance(group, TraceGroup):
            raise StandError(f"groups must be TraceGroup objects (load_traces), got {type(group).__name__}")
        group.prompt_ids = list(tokenizer(group.prompt, add_special_tokens=False)["input_ids"])
        group.trace_ids = [ids for ids in (first_tokens(tokenizer, text, max_tokens) for text in group.traces) if ids]
        if not group.prompt_ids or not group.trace_ids:
            raise StandError(f"trace group {group.name!r} has an empty prompt or only empty traces")


_TOKEN_MARGIN = 16
"""Tokens past ``max_tokens`` a cut text must give before its first ``max_tokens`` are trusted (a cut
changes only the tokens at the cut)."""


def first_tokens(tokenizer, text: str, max_tokens: int) -> list[int]:
    """The first ``max_tokens`` token ids of ``text``, as tokenizing the whole text gives them, without
    tokenizing a 100k-character trace whole: a prefix, doubled until it yields ``max_tokens`` plus a
    margin (or is the whole text), whatever the characters per token."""
    length = max_tokens * 8
    while True:
        ids = list(tokenizer(text[:length], add_special_tokens=False)["input_ids"])
        if length >= len(text) or len(ids) >= max_tokens + _TOKEN_MARGIN:
            return ids[:max_tokens]
        length *= 2
