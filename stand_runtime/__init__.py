"""STAND runtime: model-free speculative decoding with a logit-based n-gram store.

Parts (one module each): ``sampling`` (the target distribution p), ``randomness`` (noise pools),
``ngram_store`` (draft distributions q), ``drafting`` (Gumbel-Top-K into a static tree), ``tree``
and ``tree_io`` (static draft trees and their files), ``verify`` (lossless verification).
"""

from .drafting import Draft, draft_tree, gumbel_top_k
from .errors import StandError
from .ngram_store import NGramStore, StoreEntry, StoreStats
from .randomness import RandomStream
from .sampling import SamplingParams, sample_index, target_probs
from .tree import DraftTree, tree_attention_mask, tree_position_ids
from .tree_io import TreeFile, bundled_trees, load_tree, parse_tree, save_tree
from .verify import Verification, verify_greedy, verify_sampling

__version__ = "0.1.0"

__all__ = [
    "Draft",
    "DraftTree",
    "NGramStore",
    "RandomStream",
    "SamplingParams",
    "StandError",
    "StoreEntry",
    "StoreStats",
    "TreeFile",
    "Verification",
    "__version__",
    "bundled_trees",
    "draft_tree",
    "gumbel_top_k",
    "load_tree",
    "parse_tree",
    "sample_index",
    "save_tree",
    "target_probs",
    "tree_attention_mask",
    "tree_position_ids",
    "verify_greedy",
    "verify_sampling",
]

from .decode import METHODS, generate  # noqa: E402
from .metrics import DecodeStats, GenerationResult  # noqa: E402
from .models import DEFAULT_MODEL, load_model  # noqa: E402

__all__ += ["DEFAULT_MODEL", "DecodeStats", "GenerationResult", "METHODS", "generate", "load_model"]
