"""The toolkit's documented bounds and its decoding methods' names, in one module that imports nothing
(so the CLI can hand them to its option parser and help texts without loading numpy or torch, and every
check reads the same number).
"""

METHODS = ("stand", "stand-det", "pld", "recycle", "suffix", "ar")
"""Decoding methods: STAND with stochastic (Gumbel-Top-K) drafts, STAND with deterministic top-m
drafts (the paper's ablation), prompt lookup decoding, Token Recycling, SuffixDecoding, and plain
decoding (exported as :data:`stand_runtime.drafters.METHODS`, where each method's options are checked)."""

SEED_LIMIT = 2**64
"""Seeds are ints in [0, 2**64), the range of a ``torch.Generator`` seed."""

MAX_ROWS = 1024
"""Rows (sequences) decoded together in one batch at most (``generate_batch``'s prompts x n,
``decode_rows``' rows): each row holds its own KV cache, so the limit bounds memory before any work."""

MAX_SAMPLES = 65536
"""Samples of one request at most (``DecodeRequest.n``, a search's ``n``; decoded ``max_batch`` rows at a time)."""

MAX_COPY_TOKENS = 64
"""Longest copy path STAND grafts onto a draft (tokens)."""

MAX_CHAIN_TOKENS = 128
"""Draft tokens per request and step at most for STAND in vLLM (chain length K)."""

MAX_PROMPT_STORES = 1_000_000
"""Prompt stores STAND's vLLM proposer keeps at most (``max_prompts``)."""

MIN_TEMPERATURE = 1e-6
"""Smallest positive sampling temperature: below it logits / temperature overflow float32."""

MAX_TEMPERATURE = 1e6
"""Largest sampling temperature: p is then uniform over the kept tokens to float32 precision for any
logits a model gives; far above it 1 / temperature rounds to 0 in float32."""

DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
"""The target's weight dtypes, by every spelling the toolkit accepts → the name results record."""

MAX_VOCAB = 1 << 22
"""Vocabulary size at most (4,194,304 tokens; the largest real vocabularies hold ~260k): a drafter
memory sized by the vocabulary (Token Recycling's matrix) is refused beyond it, not allocated."""

MIN_PRIOR_BASE = 1e-3
MAX_PRIOR_DECAY = 16.0
"""The candidate tree's rank-product prior ``base / (rank + 1) ** decay`` takes base in [1e-3, 1) and
decay in (0, 16]: beyond them a path's value leaves float range (11 ** 1025 overflows; a base of 1e-300
makes every path past depth 1 worth 0, so the tree's shape came from ties, not the prior)."""
