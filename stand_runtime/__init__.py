"""STAND runtime: model-free speculative decoding with a logit-based n-gram store.

This face exports what a user imports (imported on first use, so ``import stand_runtime`` costs no
torch): decoding (:func:`generate`, :func:`generate_batch`, :func:`decode_rows`, :class:`RowSpec`,
:class:`Method`, :class:`SamplingParams`, results and statistics), the backend seam (:class:`HFBackend`,
:class:`DecodeRequest`, :class:`Completion`), drafter memories, draft trees and tree files, model
loading, latency profiles, lossless verification and trace replay. Everything else is imported from
its module; the parts, in import order (docs/architecture.md §1.1-1.2):

- foundation: ``errors``, ``limits``, ``formats``, ``checks``, ``files``, ``randomness``, ``lazy``;
- ``trees/`` (static trees, a step's draft, tree files and families), ``target/`` (the target model, p,
  forwards, KV caches, latency), ``store/`` (the logit n-gram store), ``verify`` (lossless verification),
  ``verify_batch`` (it for a batch of rows, in tensors);
- ``sizing/`` (how much a step drafts: the value rule, latency model, batch allocation, the ``auto``
  tree, the sizing session), ``drafters/`` (STAND and the baselines), ``method`` (the method as one value);
- ``engine/`` (the one engine loop, generate / generate_batch / decode_rows, the backend seam, trace
  replay), ``vllm/`` (STAND as a vLLM proposer, the OpenAI server command).
"""


from .errors import StandError
from .lazy import lazy_exports

_EXPORTS = {
    "SamplingParams": ".target.sampling",
    "Method": ".method",
    "SizingSession": ".sizing.session",
    "generate": ".engine.decode",
    "generate_batch": ".engine.decode",
    "decode_rows": ".engine.decode",
    "RowSpec": ".engine.row",
    "GenerationResult": ".engine.metrics",
    "DecodeStats": ".engine.metrics",
    "HFBackend": ".engine.backend",
    "DecodeRequest": ".engine.backend",
    "Completion": ".engine.backend",
    "DecodingBackend": ".engine.backend",
    "RecordedDistributions": ".engine.batch_sampling",
    "NGramStore": ".store.ngram_store",
    "RecyclingMatrix": ".drafters",
    "SuffixMemory": ".drafters",
    "SuffixSettings": ".drafters",
    "DraftTree": ".trees.tree",
    "DynamicTree": ".drafters",
    "TreeFile": ".trees.tree_io",
    "load_tree": ".trees.tree_io",
    "save_tree": ".trees.tree_io",
    "bundled_trees": ".trees.tree_io",
    "load_model": ".target.models",
    "load_tokenizer": ".target.models",
    "DEFAULT_MODEL": ".target.models",
    "METHODS": ".drafters",
    "measure_latency": ".target.latency",
    "LatencyProfile": ".target.latency",
    "replay_trace": ".engine.trace_replay",
    "verify_greedy": ".verify",
    "verify_invariant": ".verify",
    "verify_sampling": ".verify",
    "Verification": ".verify",
}
"""Public name → the module defining it (imported on first use: :mod:`stand_runtime.lazy`)."""

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__version__ = "0.1.0"

__all__ = [
    "Completion",
    "DEFAULT_MODEL",
    "DecodeRequest",
    "DecodeStats",
    "DecodingBackend",
    "DraftTree",
    "DynamicTree",
    "GenerationResult",
    "HFBackend",
    "LatencyProfile",
    "METHODS",
    "Method",
    "NGramStore",
    "RecordedDistributions",
    "RecyclingMatrix",
    "RowSpec",
    "SamplingParams",
    "SizingSession",
    "StandError",
    "SuffixMemory",
    "SuffixSettings",
    "TreeFile",
    "Verification",
    "__version__",
    "bundled_trees",
    "decode_rows",
    "generate",
    "generate_batch",
    "load_model",
    "load_tokenizer",
    "load_tree",
    "measure_latency",
    "replay_trace",
    "save_tree",
    "verify_greedy",
    "verify_invariant",
    "verify_sampling",
]
