"""STAND runtime: model-free speculative decoding with a logit-based n-gram store.

Modules, one concept each (``ls`` shows the architecture):

- ``sampling`` (the target distribution p), ``randomness`` (noise pools), ``gumbel`` (Gumbel-Top-K);
- ``ngram_store`` (the draft distributions q), ``draft`` (a step's token tree), ``drafters/`` (STAND,
  prompt lookup, Token Recycling, and the static-tree walk they share);
- ``tree``, ``tree_io`` and ``families`` (static draft trees, their files and families), ``verify`` (lossless
  verification);
- the Hugging Face engine: ``models`` (loading), ``model_facts`` (EOS, context, attention layout,
  positions), ``prompts``, ``forward`` (prefill and tree forward), ``kv_cache`` (compaction),
  ``stopping``, ``decode_row`` (one sequence's propose/settle steps), ``decode`` (the loop),
  ``batch_kv`` and ``batch_decode`` (batched decoding: rows of different lengths in one forward),
  ``batch_sampling`` (batched plain sampling with recorded p);
- ``feeds`` (what drafters learn from), ``trace_replay`` (greedy replay of recorded traces, no model);
- ``backend`` (the decoding-backend protocol and its Hugging Face implementation);
- ``metrics`` and ``diagnostics`` (statistics), ``files`` (atomic writes), ``errors``, ``checks`` (one check
  per kind of parameter, shared by every entry point), ``limits`` (the documented bounds, importing
  nothing), ``lazy`` (this face imports its names on first use, so
  ``import stand_runtime`` costs no torch);
- ``vllm/`` (STAND as a vLLM proposer, engines, the OpenAI server command).

Everything outside this package (the CLI, ``treeopt``) uses the names exported here, plus the shared
parameter checks and bounds (``checks``, ``limits``) and a few modules named by path where a name is not
exported.
"""


from .errors import StandError
from .lazy import lazy_exports

_EXPORTS = {
    "Completion": ".engine.backend",
    "DecodeRequest": ".engine.backend",
    "DecodingBackend": ".engine.backend",
    "HFBackend": ".engine.backend",
    "RowSpec": ".engine.rows",
    "decode_rows": ".engine.batch_decode",
    "generate_batch": ".engine.batch_decode",
    "RecordedDistributions": ".engine.batch_sampling",
    "check_budget": ".engine.rows",
    "generate": ".engine.decode",
    "DraftQuality": ".drafters.diagnostics",
    "summarise_draft_quality": ".drafters.diagnostics",
    "Draft": ".trees.draft",
    "DraftBuilder": ".trees.draft",
    "AUTO": ".tree_choice",
    "COPY_TOKENS": ".drafters",
    "DEFAULT_TREES": ".method",
    "DYNAMIC": ".drafters",
    "METHODS": ".drafters",
    "STORE_METHODS": ".drafters",
    "STORE_TOP_K": ".drafters",
    "SUFFIX_TUNED": ".drafters",
    "TREE_METHODS": ".drafters",
    "DynamicTree": ".drafters",
    "Memory": ".drafters",
    "RecyclingMatrix": ".drafters",
    "SuffixMemory": ".drafters",
    "SuffixSettings": ".drafters",
    "check_method": ".drafters",
    "draft_tree": ".drafters",
    "Method": ".method",
    "method_tree": ".method",
    "sized_family": ".method",
    "new_memory": ".drafters",
    "store_params": ".drafters",
    "LogitsFeed": ".drafters.feeds",
    "OneHotFeed": ".drafters.feeds",
    "RowsFeed": ".drafters.feeds",
    "TargetFeed": ".drafters.feeds",
    "check_writable": ".files",
    "write_json_atomic": ".files",
    "write_text_atomic": ".files",
    "tree_forward": ".target.forward",
    "choose_children": ".drafters.gumbel",
    "gumbel_top_k": ".drafters.gumbel",
    "new_cache": ".target.kv_cache",
    "LatencyProfile": ".target.latency",
    "cached_latency": ".target.latency",
    "choose_size": ".target.latency",
    "measure_latency": ".target.latency",
    "DecodeStats": ".engine.metrics",
    "GenerationResult": ".engine.metrics",
    "acceptance_by_depth": ".engine.metrics",
    "default_eos_ids": ".target.model_facts",
    "vocab_size": ".target.model_facts",
    "DEFAULT_MODEL": ".target.models",
    "cache_root": ".target.models",
    "load_model": ".target.models",
    "load_tokenizer": ".target.models",
    "NGramStore": ".store.ngram_store",
    "StoreEntry": ".store.ngram_store",
    "StoreStats": ".store.ngram_store",
    "encode_prompt": ".target.prompts",
    "RandomStream": ".randomness",
    "check_seed": ".randomness",
    "SamplingParams": ".target.sampling",
    "TargetRow": ".target.sampling",
    "sample_index": ".target.sampling",
    "target_probs": ".target.sampling",
    "target_row": ".target.sampling",
    "target_rows": ".target.sampling",
    "top_target_probs": ".target.sampling",
    "RecordedTop": ".engine.trace_replay",
    "ReplayResult": ".engine.trace_replay",
    "TraceTarget": ".engine.trace_replay",
    "replay_trace": ".engine.trace_replay",
    "MAX_RANK": ".trees.tree",
    "DraftTree": ".trees.tree",
    "tree_attention_mask": ".trees.tree",
    "tree_position_ids": ".trees.tree",
    "DEFAULT_FAMILY": ".tree_choice",
    "TreeChoice": ".tree_choice",
    "machine_tree": ".tree_choice",
    "TreeFamily": ".trees.families",
    "TreeFile": ".trees.tree_io",
    "bundled_calibrations": ".trees.tree_io",
    "bundled_families": ".trees.families",
    "bundled_trees": ".trees.tree_io",
    "family_to_json": ".trees.families",
    "load_family": ".trees.families",
    "load_tree": ".trees.tree_io",
    "parse_tree": ".trees.tree_io",
    "resolve_tree": ".trees.tree_io",
    "save_tree": ".trees.tree_io",
    "Verification": ".verify",
    "acceptance_chain": ".verify",
    "verify_greedy": ".verify",
    "verify_sampling": ".verify",
}
"""Public name → the module defining it (imported on first use: :mod:`stand_runtime.lazy`)."""

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__version__ = "0.1.0"

__all__ = [
    "AUTO", "DEFAULT_FAMILY", "LatencyProfile", "TargetRow", "TreeChoice", "TreeFamily", "bundled_calibrations",
    "bundled_families", "cached_latency", "choose_size", "family_to_json", "load_family", "machine_tree",
    "measure_latency", "target_row", "target_rows", "top_target_probs",
    "COPY_TOKENS", "Completion", "DEFAULT_MODEL", "DEFAULT_TREES", "DYNAMIC", "DynamicTree", "DecodeRequest", "DecodeStats", "DecodingBackend", "Draft",
    "DraftBuilder", "DraftQuality", "DraftTree", "GenerationResult", "HFBackend", "MAX_RANK", "METHODS", "Memory",
    "NGramStore", "RandomStream", "RecordedDistributions", "RecyclingMatrix", "STORE_METHODS", "STORE_TOP_K",
    "SamplingParams", "StandError", "StoreEntry", "StoreStats", "TREE_METHODS", "TreeFile", "Verification",
    "RowSpec", "decode_rows", "generate_batch", "__version__", "acceptance_by_depth", "acceptance_chain", "bundled_trees", "cache_root", "check_budget", "check_method",
    "check_seed", "check_writable", "choose_children", "default_eos_ids", "draft_tree", "encode_prompt", "generate",
    "gumbel_top_k", "load_model", "load_tree", "method_tree", "new_cache", "new_memory", "parse_tree", "resolve_tree", "sized_family",
    "sample_index", "save_tree", "store_params", "summarise_draft_quality", "target_probs", "tree_attention_mask",
    "tree_forward", "tree_position_ids", "verify_greedy", "verify_sampling", "vocab_size", "write_json_atomic",
    "write_text_atomic", "SUFFIX_TUNED", "SuffixMemory", "SuffixSettings", "Method", "LogitsFeed", "OneHotFeed",
    "RowsFeed", "TargetFeed", "RecordedTop", "ReplayResult", "TraceTarget", "replay_trace", "load_tokenizer",
]
