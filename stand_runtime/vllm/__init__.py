"""STAND inside vLLM: a ``custom_class`` speculative proposer (see :mod:`stand_runtime.vllm.proposer`).

Importing this package does not import vLLM; :func:`speculative_config` builds the engine argument::

    from vllm import LLM
    from stand_runtime.vllm import speculative_config
    llm = LLM(model=folder, speculative_config=speculative_config(k=4))

All of vLLM's private runner state the proposer touches is in :mod:`stand_runtime.vllm.runner_access`;
:mod:`stand_runtime.vllm.cpu032` is a separate patch set for vLLM's CPU sampler (a plugin; the proposer imports none of it);
:mod:`stand_runtime.vllm.server` builds the OpenAI server's command (``treeopt serve``).
"""

from ..lazy import lazy_exports

_EXPORTS = {
    "AUTO_K": ".options", "AUTO_MAX_K": ".options", "PROPOSER": ".options", "speculative_config": ".options",
    "DEFAULT_OPTIONS": ".options", "OPTIONS_ENV": ".options",
    "DEFAULT_K": ".engine", "VLLM_METHODS": ".engine", "check_model_folder": ".engine", "check_vllm_dtype": ".engine",
    "default_model_folder": ".engine",
    "load_llm": ".engine", "method_config": ".engine", "shutdown_llm": ".engine",
    "SUPPORTED_VLLM": ".runner_access", "VLLMInternalsChanged": ".runner_access", "check_version": ".runner_access",
    "fix_cpu_sampling": ".cpu032",
    "cached_vllm_latency": ".sizing", "chain_acceptance": ".sizing", "choose_k": ".sizing",
    "latency_option": ".sizing", "measure_vllm_latency": ".sizing", "read_vllm_latency": ".sizing",
}
"""Public name → the module defining it, imported on first use: the engine process, which imports
:mod:`stand_runtime.vllm.proposer`, loads no sizing, latency or model-loading code."""

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
