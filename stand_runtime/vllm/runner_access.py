"""Every access to vLLM's private model-runner state, in one place (vLLM 0.32 and 0.33, V1 model runner).

vLLM's ``custom_class`` proposer sees token arrays only (``propose(sampled_token_ids,
num_tokens_no_spec, token_ids_cpu)``). STAND needs three more things that only the model runner
holds; this module reaches them and nothing else does:

1. which request each batch row is (``runner.input_batch.req_ids``), its prompt and sampling
   parameters (``runner.requests[req_id]``);
2. the target's logits of the step, to feed the n-gram store with p: ``runner._sample`` is wrapped
   so that every call stashes its ``logits`` (:class:`StepLogits`), the draft counts of its
   spec-decode metadata, and the top-p nuclei its sampler cut (:mod:`stand_runtime.vllm.cpu032.nuclei`);
3. the draft distributions q, so that vLLM's rejection sampler verifies stochastic drafts with q
   rather than as deterministic drafts (q = 1): ``runner._draft_probs`` and ``runner._draft_prob_req_ids``,
   which the runner reads in its next ``_sample`` (the path vLLM uses for model drafters).

The runner is found once, from ``propose()``'s call stack; :func:`check_runner` raises one clear
:class:`VLLMInternalsChanged` when vLLM moved an attribute used here.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import torch

from ..checks import env_switch
from ..errors import StandError

LOG = logging.getLogger("vllm.stand_treeopt")
"""This package's lines in vLLM's log: under vLLM's own ``vllm`` logger, so they reach the server's
log with vLLM's (a ``stand_runtime.*`` logger has no handler in vLLM's processes)."""

SUPPORTED_VLLM = ("0.32", "0.33")
"""vLLM release lines (major.minor) the proposer supports, on vLLM's V1 model runner (GPU and CPU
builds), their internals checked against :data:`INTERNALS` when the proposer loads."""

ANY_VERSION_ENV = "STAND_VLLM_ANY_VERSION"
"""Environment variable: ``1`` lets the proposer try a release line outside :data:`SUPPORTED_VLLM`
(with a warning) whose :data:`INTERNALS` still read as expected."""

_RUNNER = "v1/worker/gpu_model_runner.py:GPUModelRunner."
INTERNALS = {
    _RUNNER + "_sample": ["self", "logits", "spec_decode_metadata"],
    _RUNNER + "_get_spec_decode_draft_probs": ["self", "spec_decode_metadata"],
    _RUNNER + "propose_draft_token_ids>propose": ["sampled_token_ids", "self.input_batch.num_tokens_no_spec",
                                                  "self.input_batch.token_ids_cpu", "slot_mappings=slot_mappings"],
    _RUNNER + "load_model>load_model": ["self.model"],
    **{_RUNNER + name: "attribute" for name in ("drafter", "device", "requests", "input_batch", "_draft_probs",
                                                "_draft_prob_req_ids")},
    "v1/worker/cpu_model_runner.py:CPUModelRunner.load_model>load_model": ["self.model"],
    "v1/worker/gpu_input_batch.py:InputBatch.req_ids": ["self"],
    "v1/worker/gpu_input_batch.py:CachedRequestState.prompt_token_ids": "attribute",
    "v1/worker/gpu_input_batch.py:CachedRequestState.sampling_params": "attribute",
    "v1/spec_decode/metadata.py:SpecDecodeMetadata.num_draft_tokens": "attribute",
    "v1/spec_decode/custom_class_proposer.py:create_custom_proposer": ["vllm_config"],
}
"""Every vLLM internal the proposer relies on, ``"file:Class.member"`` (file under the vllm package) →
what it must be: a function's parameter names, ``"attribute"`` (the class declares or assigns it), or for
``member>call`` the arguments of the method's call of ``drafter.<call>`` (in its ``custom_class``
branch where it has one). Read from vLLM's sources by :func:`read_internals`."""

_RUNNER_ATTRIBUTES = ("input_batch", "requests", "_sample", "_draft_probs", "_draft_prob_req_ids")
"""What :func:`check_runner` finds on the running runner object itself."""


class VLLMInternalsChanged(StandError):
    """vLLM's model runner no longer has what the STAND proposer reads (a vLLM version it was not
    written for)."""


def vllm_version() -> str:
    """The installed vLLM version string; raises StandError when vLLM is not installed."""
    try:
        import vllm
    except ImportError as error:
        raise StandError(f"vLLM is not installed ({error}); install the extra: see README 'STAND in vLLM'") from None
    return str(vllm.__version__)


def _drafter_call(method, call: str) -> list[str] | None:
    """The arguments (source text) of ``method``'s call of ``<..drafter..>.<call>(...)``, the one in its
    ``custom_class`` branch where it has one."""
    import ast

    def calls(nodes):
        return [node for tree in nodes for node in ast.walk(tree) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and node.func.attr == call
                and "drafter" in ast.unparse(node.func.value)]

    branch = [calls(node.body) for node in ast.walk(method)
              if isinstance(node, ast.If) and "'custom_class'" in ast.unparse(node.test)]
    found = next((c for c in branch if c), None) or calls([method])
    if not found:
        return None
    return ([ast.unparse(a) for a in found[0].args]
            + [f"{k.arg}={ast.unparse(k.value)}" for k in found[0].keywords])


def read_internals(root=None, table: dict = INTERNALS) -> dict[str, list[str] | str | None]:
    """What each internal of ``table`` (keys as in :data:`INTERNALS`) is in the vLLM sources under
    ``root`` (the ``vllm`` package folder; default: the installed one), parsed without importing vLLM:
    parameter names, ``"attribute"``, call arguments, or None where it is missing.

    Raises:
        StandError: vLLM is not installed (``root`` None).
    """
    import ast
    import importlib.util
    from pathlib import Path

    if root is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise StandError("vLLM is not installed; install the extra: see README 'STAND in vLLM'")
        root = list(spec.submodule_search_locations)[0]
    trees, found = {}, {}
    for key in table:
        file, name = key.split(":")
        if file not in trees:
            path = Path(root) / file
            trees[file] = ast.parse(path.read_text()) if path.is_file() else ast.Module(body=[], type_ignores=[])
        *owner, member = name.split(">")[0].split(".")
        scope = trees[file].body
        for part in owner:
            scope = next((n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == part), [])
        function = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == member), None)
        if ">" in name:
            found[key] = None if function is None else _drafter_call(function, name.split(">")[1])
        elif function is not None:
            found[key] = [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]
        elif any(isinstance(n, ast.Attribute) and n.attr == member and isinstance(n.ctx, ast.Store)
                 and ast.unparse(n.value) == "self" for tree in scope for n in ast.walk(tree)) or any(
                isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == member for n in scope):
            found[key] = "attribute"
        else:
            found[key] = None
    return found


def check_version(version: str | None = None, internals: dict | None = None) -> str:
    """Check that vLLM ``version`` (default: the installed one; returned) is a release line of
    :data:`SUPPORTED_VLLM` (or :data:`ANY_VERSION_ENV` is ``1``) and that its ``internals``
    (:func:`read_internals`; default: the installed vLLM's when ``version`` is None) are :data:`INTERNALS`.

    Raises:
        VLLMInternalsChanged: another release line (without the override), or an internal that moved
            (one line naming each).
    """
    installed = version is None
    version = vllm_version() if installed else version
    if ".".join(version.split(".")[:2]) not in SUPPORTED_VLLM:
        if env_switch(ANY_VERSION_ENV) is not True:
            raise VLLMInternalsChanged(
                f"the STAND vLLM proposer reads vLLM's private runner state and supports vLLM "
                f"{', '.join(v + '.x' for v in SUPPORTED_VLLM)}, not {version}: install one of them, or set "
                f"{ANY_VERSION_ENV}=1 to try it (at your own risk)")
        LOG.warning("stand-treeopt: vLLM %s is not a supported release (%s); %s=1 is set: trying it",
                    version, ", ".join(SUPPORTED_VLLM), ANY_VERSION_ENV)
    if internals is None and installed:
        internals = read_internals()
    if internals is not None:
        changed = [f"{key} is {internals.get(key)!r}, expected {expected!r}" for key, expected in INTERNALS.items()
                   if internals.get(key) != expected]
        if changed:
            raise VLLMInternalsChanged(f"vLLM {version}'s internals moved: {'; '.join(changed)}; the STAND proposer "
                                       "cannot run on it (update stand_runtime/vllm/runner_access.py)")
    return version


def check_runner(runner) -> None:
    """Raises VLLMInternalsChanged (naming it) when ``runner`` lacks a private attribute this module uses."""
    missing = [name for name in _RUNNER_ATTRIBUTES if not hasattr(runner, name)]
    batch = getattr(runner, "input_batch", None)
    if batch is not None and not hasattr(batch, "req_ids"):
        missing.append("input_batch.req_ids")
    if missing:
        raise VLLMInternalsChanged(
            f"vLLM {vllm_version()}'s model runner {type(runner).__name__} lacks {', '.join(missing)}: "
            "its internals moved; update stand_runtime/vllm/runner_access.py")


def find_runner(proposer, required: bool = True):
    """The model runner that calls ``proposer`` (the caller up the stack holding it as ``drafter``).

    Args:
        proposer: the proposer object.
        required: raise when no caller is such a runner (else return None).

    Raises:
        VLLMInternalsChanged: ``required`` and no caller holds ``proposer`` as its ``drafter``, or
            the runner lacks an attribute used here.
    """
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and getattr(owner, "drafter", None) is proposer:
            check_runner(owner)
            return owner
        frame = frame.f_back
    if not required:
        return None
    raise VLLMInternalsChanged("the STAND proposer was not called by a vLLM model runner holding it as `drafter`: "
                               "vLLM's internals moved; update stand_runtime/vllm/runner_access.py")


@dataclass
class StepLogits:
    """The target's logits of one engine step, as the sampler received them.

    Attributes:
        logits: ``[rows, vocab]`` float32 raw logits (before temperature): vLLM's own tensor where its
            rejection sampler left it unchanged, else a copy; valid until the next forward.
        num_draft_tokens: per request in batch order, the draft tokens verified this step (0 = the
            request had one row); ``None`` when the step verified no drafts (one row per request).
        nuclei: per row, the top-k of p that the sampler's top-p cut found (None when the sampler's
            cuts did not match the rows, or the CPU patch set that records them is not installed:
            :mod:`stand_runtime.vllm.cpu032.nuclei`).
    """

    logits: torch.Tensor
    num_draft_tokens: list[int] | None
    nuclei: object | None = None

    def row_offsets(self, num_reqs: int) -> list[int] | None:
        """Index of each request's first row (``num_reqs + 1`` offsets), or None when the rows do not
        match the batch (then the step is not used)."""
        counts = [1] * num_reqs if self.num_draft_tokens is None else [n + 1 for n in self.num_draft_tokens]
        if len(counts) != num_reqs:
            return None
        offsets = [0]
        for count in counts:
            offsets.append(offsets[-1] + count)
        return offsets if offsets[-1] == self.logits.shape[0] else None


@dataclass
class BatchRow:
    """One running request as the proposer sees it.

    Attributes:
        req_id: vLLM's request id (a sample of an ``n > 1`` request has its own).
        prompt: the prompt's token ids.
        temperature, top_p, top_k: its sampling parameters (temperature 0 = greedy; top_k 0 = off).
        seed: its per-request seed, or None.
    """

    req_id: str
    prompt: list[int]
    temperature: float
    top_p: float
    top_k: int
    seed: int | None


def _nucleus_recorder():
    """The CPU patch set's nucleus recorder (:mod:`stand_runtime.vllm.cpu032.nuclei`) where that patch
    set is installed in this process (found in ``sys.modules``, never imported from here), else None."""
    patch = sys.modules.get("stand_runtime.vllm.cpu032")
    return sys.modules.get("stand_runtime.vllm.cpu032.nuclei") if getattr(patch, "INSTALLED", False) else None


class RunnerAccess:
    """The private state of one vLLM model runner that the STAND proposer reads and writes.

    Args:
        runner: vLLM's (CPU or GPU) model runner, e.g. from :func:`find_runner`.
        nucleus_k: tokens a row to keep of each top-p nucleus the sampler cuts (``StepLogits.nuclei``;
            0: keep none).

    Raises:
        VLLMInternalsChanged: the runner lacks an attribute used here.
    """

    def __init__(self, runner, nucleus_k: int = 0) -> None:
        check_runner(runner)
        self.runner = runner
        self._step: StepLogits | None = None
        original = runner._sample

        def sample_and_record(logits, spec_decode_metadata, *args, **kwargs):
            if logits is None:
                return original(logits, spec_decode_metadata, *args, **kwargs)
            counts = None if spec_decode_metadata is None else list(spec_decode_metadata.num_draft_tokens)
            # vLLM's rejection sampler reads rows of `logits` by index (copies) and leaves it as it is, and
            # the proposer reads it before the next forward: no copy then;
            # vLLM's plain sampler scales it in place, and bfloat16 logits are read as float32
            kept = spec_decode_metadata is not None and logits.dtype == torch.float32
            copy = logits.detach() if kept else logits.detach().to(torch.float32, copy=True)
            recorder = _nucleus_recorder() if nucleus_k else None
            if recorder is None:
                self._step = StepLogits(copy, counts)
                return original(logits, spec_decode_metadata, *args, **kwargs)
            with recorder.recording(nucleus_k) as calls:
                sampled = original(logits, spec_decode_metadata, *args, **kwargs)
            self._step = StepLogits(copy, counts, recorder.step_nuclei(calls, copy.shape[0], spec_decode_metadata))
            return sampled

        runner._sample = sample_and_record

    @property
    def device(self) -> torch.device:
        """The device of the runner's model and logits (CPU where unset)."""
        return torch.device(getattr(self.runner, "device", None) or "cpu")

    def take_step(self) -> StepLogits | None:
        """The logits the sampler saw since the last call (None if it was not called)."""
        step, self._step = self._step, None
        return step

    def batch(self) -> list[BatchRow]:
        """The running requests, in batch order (the order of ``propose()``'s rows)."""
        rows = []
        for req_id in self.runner.input_batch.req_ids:
            state = self.runner.requests[req_id]
            params = state.sampling_params
            rows.append(BatchRow(req_id, list(state.prompt_token_ids or ()),
                                 float(params.temperature) if params is not None else 0.0,
                                 float(params.top_p) if params is not None else 1.0,
                                 max(0, int(params.top_k or 0)) if params is not None else 0,
                                 params.seed if params is not None else None))
        return rows

    def set_draft_probs(self, probs: torch.Tensor, req_ids: list[str]) -> None:
        """Hand the next verification its draft distributions.

        Args:
            probs: ``[len(req_ids), K, vocab]`` float32 on the logits' device: q of request
                ``req_ids[r]``'s j-th draft token at ``[r, j]`` (rows without drafts are ignored).
            req_ids: the requests in row order.
        """
        self.runner._draft_probs = probs
        self.runner._draft_prob_req_ids = list(req_ids)
