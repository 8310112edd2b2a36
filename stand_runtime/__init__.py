"""STAND runtime: model-free speculative decoding with a logit-based n-gram store.

Modules, one concept each (``ls`` shows the architecture):

- ``sampling`` (the target distribution p), ``randomness`` (noise pools), ``gumbel`` (Gumbel-Top-K);
- ``ngram_store`` (the draft distributions q), ``draft`` (a step's token tree), ``drafters/`` (STAND,
  prompt lookup, Token Recycling, and the static-tree walk they share);
- ``tree`` and ``tree_io`` (static draft trees and their files), ``verify`` (lossless verification);
- the Hugging Face engine: ``models`` (loading), ``model_facts`` (EOS, context, attention layout,
  positions), ``prompts``, ``forward`` (prefill and tree forward), ``kv_cache`` (compaction),
  ``stopping``, ``decode_row`` (one sequence's propose/settle steps), ``decode`` (the loop),
  ``batch_kv`` and ``batch_decode`` (batched decoding: rows of different lengths in one forward),
  ``batch_sampling`` (batched plain sampling with recorded p);
- ``feeds`` (what drafters learn from), ``trace_replay`` (greedy replay of recorded traces, no model);
- ``backend`` (the decoding-backend protocol and its Hugging Face implementation);
- ``metrics`` and ``diagnostics`` (statistics), ``files`` (atomic writes), ``errors``.

Everything outside this package (the CLI, ``treeopt``) uses only the names exported here.
"""

from .backend import Completion, DecodeRequest, DecodingBackend, HFBackend
from .batch_decode import RowSpec, decode_rows, generate_batch
from .batch_sampling import RecordedDistributions
from .decode import check_budget, generate
from .diagnostics import DraftQuality, summarise_draft_quality
from .draft import Draft, DraftBuilder
from .drafters import (
    AUTO,
    COPY_TOKENS,
    DEFAULT_TREES,
    DYNAMIC,
    METHODS,
    STORE_METHODS,
    STORE_TOP_K,
    SUFFIX_TUNED,
    TREE_METHODS,
    DynamicTree,
    Memory,
    RecyclingMatrix,
    SuffixMemory,
    SuffixSettings,
    check_method,
    draft_tree,
    make_drafter,
    method_tree,
    sized_family,
    new_memory,
    store_params,
)
from .errors import StandError
from .feeds import LogitsFeed, OneHotFeed, RowsFeed, TargetFeed
from .files import check_writable, write_json_atomic, write_text_atomic
from .forward import tree_forward
from .gumbel import choose_children, gumbel_top_k
from .kv_cache import new_cache
from .latency import LatencyProfile, cached_latency, choose_size, measure_latency
from .metrics import DecodeStats, GenerationResult, acceptance_by_depth
from .model_facts import default_eos_ids, vocab_size
from .models import DEFAULT_MODEL, cache_root, load_model, load_tokenizer
from .ngram_store import NGramStore, StoreEntry, StoreStats
from .prompts import encode_prompt
from .randomness import RandomStream, check_seed
from .sampling import SamplingParams, TargetRow, sample_index, target_probs, target_row, target_rows, top_target_probs
from .trace_replay import RecordedTop, ReplayResult, TraceTarget, replay_trace
from .tree import MAX_RANK, DraftTree, tree_attention_mask, tree_position_ids
from .tree_choice import DEFAULT_FAMILY, TreeChoice, machine_tree
from .tree_io import (
    TreeFamily,
    TreeFile,
    bundled_calibrations,
    bundled_families,
    bundled_trees,
    family_to_json,
    load_family,
    load_tree,
    parse_tree,
    resolve_tree,
    save_tree,
)
from .verify import Verification, acceptance_chain, verify_greedy, verify_sampling

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
    "write_text_atomic", "SUFFIX_TUNED", "SuffixMemory", "SuffixSettings", "make_drafter", "LogitsFeed", "OneHotFeed",
    "RowsFeed", "TargetFeed", "RecordedTop", "ReplayResult", "TraceTarget", "replay_trace", "load_tokenizer",
]
