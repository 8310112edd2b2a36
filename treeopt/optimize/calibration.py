"""The calibration file: per-node acceptance estimates of a candidate tree (docs/trees.md §8.3).

JSON (``format: stand-calibration``, version 1): the candidate's rank paths, alpha-hat per node, the
step count, per prompt its own sums (so an interrupted run resumes and errors can be clustered by
prompt), and metadata (settings, model, timings, version). Written atomically after every prompt.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stand_runtime import DraftTree, StandError
from stand_runtime.formats import CALIBRATION_FORMAT, FILE_KINDS, file_kind
from stand_runtime.files import write_text_atomic
from stand_runtime.trees.tree_io import bundled_calibrations

CALIBRATION_VERSION = 1


@dataclass
class Calibration:
    """Per-node acceptance estimates for a candidate tree.

    Attributes:
        alpha_sum: ``[N + 1]`` float64 summed per-step acceptance (index 0, the root, unused).
        steps: the denominator: decoding steps (direct) or their importance-weighted estimate (replay).
        per_prompt: per finished prompt its id, steps, tokens and own ``alpha_sum`` (resume, clustered errors).
        metadata: settings, model, timings, version.
    """

    candidate: DraftTree
    alpha_sum: np.ndarray
    steps: float = 0
    per_prompt: list[dict] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)

    @property
    def alpha(self) -> np.ndarray:
        """``[N]`` alpha-hat per candidate draft node, breadth-first order."""
        return self.alpha_sum[1:] / self.steps if self.steps > 0 else np.zeros(self.candidate.num_nodes)

    def alpha_stderr(self, groups: np.ndarray | None = None) -> np.ndarray:
        """Standard error of alpha-hat, clustered by prompt (a prompt's steps are not independent): the
        ratio-estimator (delta-method) variance of ``sum alpha_sum / sum steps`` over prompts.

        Returns ``[N]`` per node, or with ``groups`` (``[N]`` int group of each node, e.g. its depth)
        ``[max(groups) + 1]`` for the sum of alpha-hat over each group; ``inf`` with fewer than 2 prompts.

        Raises:
            StandError: ``groups`` that are not ``[N]`` integers >= 0.
        """
        nodes = self.candidate.num_nodes
        sums = np.zeros((len(self.per_prompt), nodes))
        for row, prompt in enumerate(self.per_prompt):
            sums[row] = prompt["alpha_sum"][1:]
        if groups is not None:
            groups = np.asarray(groups)
            if groups.shape != (nodes,) or groups.dtype.kind not in "iu" or (groups < 0).any():
                raise StandError(f"groups must be {nodes} integers >= 0 (one per node), got shape {list(groups.shape)}")
            members = np.zeros((nodes, int(groups.max()) + 1))
            members[np.arange(nodes), groups] = 1.0
            sums = sums @ members
        if len(self.per_prompt) < 2:
            return np.full(sums.shape[1], np.inf)
        steps = np.array([p["steps"] for p in self.per_prompt], dtype=float)[:, None]
        ratio = sums.sum(0) / steps.sum()
        residual = sums - ratio * steps
        clusters = len(self.per_prompt)
        variance = clusters / (clusters - 1) * (residual**2).sum(0) / steps.sum() ** 2
        return np.sqrt(variance)

    @property
    def expected_acceptance_length(self) -> float:
        """1 + sum of alpha-hat over the whole candidate."""
        return 1.0 + float(self.alpha.sum())

    def add_prompt(self, prompt_id: str, alpha_sum: np.ndarray, steps: float, tokens: int, text: str | None = None) -> None:
        """Count one prompt's replay or decode; ``text``: the prompt, kept as a digest (a resumed run
        notices a dataset edited since)."""
        self.alpha_sum += alpha_sum
        self.steps += steps
        entry = {"id": prompt_id, "steps": steps, "tokens": tokens, "alpha_sum": alpha_sum.tolist()}
        if text is not None:
            entry["digest"] = prompt_digest(text)
        self.per_prompt.append(entry)

    def to_json(self) -> dict:
        return {
            "format": CALIBRATION_FORMAT,
            "version": CALIBRATION_VERSION,
            "candidate": [list(p) for p in self.candidate.paths],
            "alpha": [round(float(a), 8) for a in self.alpha],
            "steps": step_count(self.steps),
            "per_prompt": [{**p, "steps": step_count(p["steps"]), "alpha_sum": [round(a, 8) for a in p["alpha_sum"]]} for p in self.per_prompt],
            "metadata": self.metadata,
        }

    def save(self, path: str | Path) -> Path:
        """Write the calibration file atomically."""
        return write_text_atomic(path, json.dumps(self.to_json()) + "\n")


def resolve_calibration(spec: str | Path) -> Path:
    """The file of a calibration: ``spec`` itself, or the shipped calibration of that name when no
    such file exists (see :func:`stand_runtime.trees.tree_io.bundled_calibrations`)."""
    path = Path(spec)
    if not path.exists():
        return bundled_calibrations().get(str(spec), path)
    return path


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file, or a shipped one by name (:func:`resolve_calibration`).

    Raises:
        StandError: missing, not JSON, wrong format or version, or inconsistent contents (one line).
    """
    path = resolve_calibration(path)
    if path.is_dir():
        raise StandError(f"{path} is a folder, not a calibration file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        shipped = ", ".join(sorted(bundled_calibrations())) or "none"
        raise StandError(f"calibration file not found: {path} (shipped calibrations: {shipped})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise StandError(f"corrupt calibration file {path}: {str(error) or 'nested too deeply'}") from None
    wanted = "give the file `treeopt calibrate --out` wrote (or the shipped one, stand-smollm2-humaneval)"
    kind = file_kind(data)
    if kind not in (None, CALIBRATION_FORMAT):
        raise StandError(f"{path} is {FILE_KINDS[kind]}, not a calibration: {wanted}")
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise StandError(f"corrupt calibration file {path}: not a {CALIBRATION_FORMAT} file")
    if data.get("version") != CALIBRATION_VERSION:
        raise StandError(f"calibration file {path}: version {data.get('version')} is not supported")
    try:
        candidate = DraftTree.from_paths(data["candidate"])
        if [list(p) for p in candidate.paths] != data["candidate"]:
            raise StandError("candidate paths are not in breadth-first order")
        per_prompt = list(data["per_prompt"])
        alpha_sum = _prompt_sums(per_prompt, candidate.num_nodes + 1)
        if not _is_number(data["steps"]):
            raise StandError(f"steps {data['steps']!r} is not a finite number")
        steps = float(data["steps"])
        if abs(steps - sum(float(p["steps"]) for p in per_prompt)) > 1e-6 * max(1.0, steps):
            raise StandError("steps do not add up over prompts")
        stored = data.get("alpha")
        recomputed = alpha_sum[1:] / steps if steps > 0 else np.zeros(candidate.num_nodes)
        if stored is not None and (not isinstance(stored, list) or len(stored) != candidate.num_nodes
                                   or not np.allclose(np.asarray(stored, dtype=float), recomputed, atol=1e-6)):
            raise StandError("alpha does not match the per-prompt sums (the file was edited)")
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise StandError("metadata is not an object")
        for key in ("settings", "timings"):
            if not isinstance(metadata.get(key, {}), dict):
                raise StandError(f"metadata.{key} is not an object")
        for key, seconds in metadata.get("timings", {}).items():
            if not _is_number(seconds) or seconds < 0:
                raise StandError(f"metadata.timings.{key} is {seconds!r} (seconds, a finite number >= 0)")
    except StandError as error:
        raise StandError(f"corrupt calibration file {path}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StandError(f"corrupt calibration file {path}: bad or missing field ({error})") from None
    return Calibration(candidate, alpha_sum, steps, per_prompt, dict(metadata))


def prompt_digest(text: str) -> str:
    """A prompt's text as 16 hex digits of its SHA-256 (a calibration's per-prompt ``digest``)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def unfinished(calibration: Calibration) -> str | None:
    """What an interrupted run left out of ``calibration`` ("5 of 12 prompts"), or None when it holds every
    prompt (or trace group) it set out to calibrate, or does not say how many."""
    meta = calibration.metadata
    total, unit = (meta.get("groups_total"), "trace groups") if meta.get("source") == "traces" else (meta.get("samples"), "prompts")
    done = len(calibration.per_prompt)
    if isinstance(total, int) and not isinstance(total, bool) and done < total:
        return f"{done} of {total} {unit}"
    return None


def step_count(value: float) -> int | float:
    """A step count as JSON writes it: an integer where it is one (a resumed run writes what an
    uninterrupted one writes), else rounded to 6 decimals."""
    value = float(value)
    return int(value) if value.is_integer() else round(value, 6)


def _is_number(value) -> bool:
    """A JSON number that is finite as a float (an integer too large for one is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _prompt_sums(per_prompt: list, nodes: int) -> np.ndarray:
    """``[nodes]`` the sum of the prompts' ``alpha_sum`` rows, each prompt checked (a unique string id,
    finite counts >= 0 of the right length, steps >= 0); StandError names the first bad entry."""
    alpha_sum = np.zeros(nodes)
    seen = set()
    for entry in per_prompt:
        label = entry.get("id") if isinstance(entry, dict) else entry
        if not isinstance(entry, dict) or not isinstance(entry.get("alpha_sum"), list):
            raise StandError(f"prompt {label!r} has no alpha_sum list")
        if not isinstance(label, str):
            raise StandError(f"prompt id {label!r} is not a string")
        if label in seen:
            raise StandError(f"prompt {label!r} appears twice")
        seen.add(label)
        if not all(_is_number(a) and a >= 0 for a in entry["alpha_sum"]):
            raise StandError(f"prompt {label!r} has alpha_sum values that are not finite numbers >= 0")
        if not _is_number(entry.get("steps")) or entry["steps"] < 0:
            raise StandError(f"prompt {label!r} has steps {entry.get('steps')!r} (a finite number >= 0 expected)")
        tokens = entry.get("tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise StandError(f"prompt {label!r} has tokens {tokens!r} (an integer >= 0 expected)")
        row = np.asarray(entry["alpha_sum"], dtype=float)
        if row.shape != alpha_sum.shape:
            raise StandError(f"prompt {label!r} has {row.shape[0]} values for {alpha_sum.shape[0]} nodes")
        with np.errstate(over="ignore"):  # an overflowing total is refused where the sums are checked
            alpha_sum += row
    return alpha_sum
