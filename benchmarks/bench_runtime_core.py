"""Micro-benchmark of the runtime core's hot path on the CPU: store updates and tree drafting.

Prints microseconds per n-gram store update (one observed position: 3 tables merged) and per
drafting of the bundled 80-node heuristic tree (stochastic Gumbel-Top-K and deterministic), on a
store filled from a synthetic token stream with a realistic vocabulary (49,152) and top-10
distributions. Target: <= 2 ms per 80-node draft. Run: ``python benchmarks/bench_runtime_core.py``.
"""

from __future__ import annotations

import time

import numpy as np

from stand_runtime import NGramStore, load_tree
from stand_runtime.drafters import draft_tree
from stand_runtime.randomness import RandomStream

VOCAB = 49_152
STREAM = 20_000


def synthetic_stream(rng: np.random.Generator) -> tuple[list[int], np.ndarray, np.ndarray]:
    """A token stream from a sparse Markov chain (each token has <= 4 likely successors) with top-10 p."""
    successors = rng.integers(0, 2_000, size=(2_000, 4))
    tokens = [0]
    for _ in range(STREAM - 1):
        tokens.append(int(successors[tokens[-1] % 2_000, min(rng.geometric(0.5) - 1, 3)]))
    ids = np.concatenate([successors[np.array(tokens) % 2_000], rng.integers(0, VOCAB, size=(STREAM, 6))], axis=1)
    probs = rng.dirichlet(np.linspace(3, 0.2, 10), size=STREAM)
    return tokens, ids, probs


def main() -> None:
    rng = np.random.default_rng(0)
    tokens, ids, probs = synthetic_stream(rng)
    store = NGramStore()
    start = time.perf_counter()
    for pos in range(STREAM):
        store.update(tokens[max(0, pos - 2) : pos + 1], ids[pos], probs[pos])
    update_us = (time.perf_counter() - start) / STREAM * 1e6
    tree = load_tree("heuristic-80").tree
    stream = RandomStream.seeded(0)
    contexts = [tokens[pos - 3 : pos + 1] for pos in rng.integers(3, STREAM, size=2_000)]
    for label, randomness in (("stochastic", stream), ("deterministic", None)):
        nodes = 0
        start = time.perf_counter()
        for context in contexts:
            nodes += draft_tree(tree, store, context, randomness).num_nodes
        draft_us = (time.perf_counter() - start) / len(contexts) * 1e6
        print(f"draft {tree.num_nodes}-node tree ({label}): {draft_us:8.1f} us/draft, {nodes / len(contexts):.1f} nodes drafted on average")
    stats = store.stats()
    print(f"store update: {update_us:8.1f} us/position ({stats.entries} entries, ~{stats.approx_bytes / 2**20:.1f} MiB, {stats.merges} merges)")


if __name__ == "__main__":
    main()
