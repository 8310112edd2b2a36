"""Verifiers that score candidate reasoning steps for tree search (DVTS).

A verifier scores each candidate continuation of a partial solution; the search keeps the best.

- ``confidence`` (built-in default, runs on this CPU with no extra model): the target's own mean
  token log-probability of the step (natural log, temperature 1, recorded during decoding at no
  extra forward). **A stand-in, not a process reward model**: it prefers steps the target finds
  likely, which is self-consistency, not correctness.
- ``prm:PATH`` : a process reward model from a local folder or the local hub cache, loaded with
  transformers (a hub id downloads unless ``HF_HUB_OFFLINE=1``), in the Qwen2.5-Math-PRM convention
  (Zhang et al., 2025, "The Lessons of Developing Process Reward Models in Mathematical Reasoning"):
  the steps are joined with the separator ``<extra_0>``, and a step's reward is the softmax
  probability of label 1 at its separator. Models with custom code need ``trust_remote_code``.
- any Python callable ``f(problem, steps_so_far, candidate) -> float`` (:class:`CallableVerifier`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from stand_runtime import StandError
from stand_runtime.checks import check_bool, check_real

VERIFIERS = ("confidence", "prm:PATH")
"""Verifier specs the command line takes."""

PRM_SEPARATOR = "<extra_0>"
PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class Candidate:
    """One candidate step: its text, token ids and per token its log-probability under the target
    (natural log), or None."""

    text: str
    tokens: list[int]
    logprobs: list[float] | None = None


class Verifier(Protocol):
    """Scores candidate steps: higher is better."""

    name: str

    def score(self, problem: str, steps: Sequence[str], candidates: Sequence[Candidate]) -> list[float]:
        """One score per candidate, each continuing ``steps`` (the chosen steps so far) of ``problem``."""


class ConfidenceVerifier:
    """The target's mean token log-probability of the step (a stand-in, not a PRM; see the module)."""

    name = "confidence"

    def score(self, problem, steps, candidates) -> list[float]:
        scores = []
        for candidate in candidates:
            if candidate.logprobs is None:
                raise StandError("the confidence verifier needs the candidates' log-probabilities (logprobs=True)")
            scores.append(sum(candidate.logprobs) / len(candidate.logprobs) if candidate.logprobs else -math.inf)
        return scores


class CallableVerifier:
    """Wraps ``f(problem, steps_so_far, candidate_text) -> float``."""

    def __init__(self, function: Callable[[str, list[str], str], float], name: str | None = None) -> None:
        if not callable(function):
            raise StandError(f"a verifier must be callable, got {function!r}")
        self.function = function
        self.name = name or getattr(function, "__name__", "callable")

    def score(self, problem, steps, candidates) -> list[float]:
        return check_scores(self, [self.function(problem, list(steps), c.text) for c in candidates], len(candidates))


def check_scores(verifier: Verifier, scores, candidates: int) -> list[float]:
    """A verifier's scores as floats, one per candidate, each a finite real number or ``-inf`` ("worst",
    e.g. an empty step); NaN (which would win or lose every comparison by accident), ``+inf``, bools and
    text are refused.

    Raises:
        StandError: not a list of ``candidates`` scores, or a score that is not a real number,
            naming the verifier and the candidate.
    """
    name = getattr(verifier, "name", type(verifier).__name__)
    if isinstance(scores, np.ndarray):
        scores = scores.tolist() if scores.ndim == 1 else scores
    if not isinstance(scores, (list, tuple)):
        raise StandError(f"verifier {name} returned {type(scores).__name__} {scores!r:.60}, not a list of "
                         f"{candidates} scores")
    if len(scores) != candidates:
        raise StandError(f"verifier {name} returned {len(scores)} scores for {candidates} candidates")
    out = []
    for i, value in enumerate(scores):
        if isinstance(value, (float, np.floating)) and value == -math.inf:
            out.append(-math.inf)  # the worst score: the one infinity with a meaning
            continue
        try:
            out.append(check_real("score", value))
        except StandError:
            raise StandError(f"verifier {name} scored candidate {i} {value!r:.40}: a score must be a real number "
                             f"(-inf for the worst; not NaN, +inf, a bool, text or an integer too large for a float)"
                             ) from None
    return out


class PRMVerifier:
    """A process reward model in the Qwen2.5-Math-PRM convention (module docstring) from ``path``, a model
    folder or a hub id, on ``device`` (default: CUDA when available, else CPU).

    Raises:
        StandError: the model or its tokenizer cannot be loaded, or the tokenizer lacks the separator.
    """

    def __init__(self, path: str, *, trust_remote_code: bool = False, device: str | None = None) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from stand_runtime.target.models import hub_offline

        local = hub_offline()
        if _looks_like_path(path) and not os.path.isdir(os.path.expanduser(path)):
            raise StandError(f"no process reward model folder {path} (prm:PATH takes a model folder or a hub id "
                             f"that transformers can load)")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local,
                                                           trust_remote_code=trust_remote_code)
            self.model = AutoModel.from_pretrained(path, local_files_only=local, trust_remote_code=trust_remote_code,
                                                   dtype=torch.float32).eval()
        except (OSError, ValueError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise StandError(f"cannot load the process reward model {path!r}: {first}") from None
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        ids = self.tokenizer.encode(PRM_SEPARATOR, add_special_tokens=False)
        if len(ids) != 1:
            raise StandError(f"the reward model's tokenizer has no single {PRM_SEPARATOR} token")
        self.separator = ids[0]
        self.name = f"prm:{path}"

    def score(self, problem, steps, candidates) -> list[float]:
        import torch

        scores = []
        for candidate in candidates:
            text = self._conversation(problem, [*steps, candidate.text])
            ids = torch.tensor([self.tokenizer.encode(text, add_special_tokens=False)], device=self.device)
            with torch.inference_mode():
                out = self.model(input_ids=ids)
            logits = out[0] if isinstance(out, tuple) else getattr(out, "logits", out[0])
            rewards = torch.softmax(logits[0].float(), dim=-1)[:, 1][ids[0] == self.separator]
            if rewards.numel() == 0:
                raise StandError("the reward model's input lost its step separators (check its tokenizer)")
            scores.append(float(rewards[-1]))
        return scores

    def _conversation(self, problem: str, steps: list[str]) -> str:
        answer = "".join(step.strip() + PRM_SEPARATOR for step in steps)
        messages = [{"role": "system", "content": PRM_SYSTEM}, {"role": "user", "content": problem},
                    {"role": "assistant", "content": answer}]
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        return f"{PRM_SYSTEM}\n{problem}\n{answer}"


def _looks_like_path(spec: str) -> bool:
    """True for a file-system path (absolute, ``./``, ``~``, or more than one ``/``) rather than a hub
    id (``org/name``)."""
    return os.path.isabs(spec) or spec.startswith((".", "~")) or spec.count("/") > 1 or os.sep != "/" and os.sep in spec


def make_verifier(spec: str | Callable | Verifier, *, trust_remote_code: bool = False) -> Verifier:
    """A verifier from a spec: ``"confidence"``, ``"prm:PATH"``, a callable, or a verifier object.

    Raises:
        StandError: an unknown spec (naming the valid ones), or a reward model that does not load.
    """
    trust_remote_code = check_bool("trust_remote_code", trust_remote_code)
    if isinstance(spec, type):
        raise StandError(f"a verifier must be an instance or a function, not the class {spec.__name__}: "
                         f"pass {spec.__name__}(...)")
    if hasattr(spec, "score") and hasattr(spec, "name"):
        return spec
    if callable(spec):
        return CallableVerifier(spec)
    if spec == "confidence":
        return ConfidenceVerifier()
    if isinstance(spec, str) and spec.startswith("prm:") and spec[4:].strip():
        return PRMVerifier(spec[4:].strip(), trust_remote_code=trust_remote_code)
    raise StandError(f"unknown verifier {spec!r} (valid: {', '.join(VERIFIERS)}, or a Python callable)")
