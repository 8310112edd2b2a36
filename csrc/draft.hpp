// STAND's dynamic draft tree in C++: stand_runtime/drafters/best_first.py's best_first_draft over the
// native store, with the copy chain grafted as tree_walk.graft_chain does (docs/design.md §3.8).
#pragma once

#include <cstdint>
#include <vector>

#include "store.hpp"

namespace stand {

// The Gumbel noise of a node's n children candidates: the support ids (q's order) of a node at
// `depth` (root 0). A stream's pool hands fresh values out in order, as RandomStream.gumbel(n) would
// (ids and depth unused); a row's position noise computes G[base + depth, ids[i]] (PositionNoise).
class NoiseSource {
public:
    virtual ~NoiseSource() = default;
    virtual const double* take(size_t n, int64_t depth, const Token* ids) = 0;
};

// stand_runtime.randomness.PositionNoise.gumbel: G[t, v] = -log(-log(u)), u the top 53 bits of
// mix(mix(key ^ mix(t)) ^ v * golden) plus one half, over 2^53 (SplitMix64's finaliser mix).
class PositionNoise : public NoiseSource {
public:
    PositionNoise(uint64_t key, int64_t base) : key_(key), base_(base) {}
    const double* take(size_t n, int64_t depth, const Token* ids) override;

private:
    uint64_t key_;
    int64_t base_;
    std::vector<double> values_;
};

struct DraftParams {
    int num_nodes = 80;
    double confidence = 1.0;
    double beta = 1.0;
    int deepest = 64;
    size_t width = 16;
    double copy_rate = 0.8;  // the chain's j-th token scores copy_rate ** j (best_first_draft)
};

struct DraftOut {
    std::vector<Token> tokens;
    std::vector<int64_t> parents, depths, slots;
    std::vector<int32_t> child_start, child_count;  // per node: its children are child_flat[start .. +count)
    std::vector<int32_t> child_flat;
    std::vector<uint8_t> copied;
    std::vector<int64_t> dist_start, dist_len;  // per node: its q in flat_ids / flat_q; -1 without one
    std::vector<Token> flat_ids;
    std::vector<double> flat_q;
    std::vector<double> scores;  // per node the key it was offered with (q at its rank; root 1; a copied
                                 // node its parent's path score)
};

// Scratch a draft reuses from call to call (no allocation once warm).
struct DraftScratch {
    std::vector<Token> suffixes;          // per node, max_n slots
    std::vector<int32_t> suffix_len;
    std::vector<double> weights;          // per node: its confidence (once looked up)
    std::vector<int64_t> prob_start;      // per node: the blend's q (prob_list) in probs; -1 none
    std::vector<int64_t> order_start;     // per node: drawing order in orders
    std::vector<int32_t> order_len;
    std::vector<double> probs;
    std::vector<int32_t> orders;
    std::vector<double> keys;
    std::vector<double> path;             // per node: its path score (w·q of the drawn tokens)
    std::vector<std::vector<int32_t>> children;
    Blended blended;
};

// The slot of a copied child's token in its parent's q (DraftBuilder.add_copy): its index there, or, for a
// token q lacks, the support copied to the end of the flat arrays with the token appended at q = 0.
// -1 when the parent has no q. Shared by the dynamic tree and the static fill.
int64_t copy_slot(DraftOut& out, int32_t parent, Token token);

// The per-node children lists (drawing order) flattened into out's child_start / child_count / child_flat.
void flatten_children(DraftOut& out, const std::vector<std::vector<int32_t>>& children);

// noise == nullptr: deterministic drafts (q's order).
void best_first(Store& store, const Token* context, size_t length, const Token* chain, size_t chain_len,
                const DraftParams& params, NoiseSource* noise, DraftOut& out, DraftScratch& scratch);

}  // namespace stand
