// STAND's static draft tree filled in C++: stand_runtime/drafters/tree_walk.py's fill_tree with
// STAND's proposal (stand.store_proposer: longest-match lookup, Gumbel-Top-K or q's top-m), the copy
// chain grafted (graft_chain) and the extension (Extension.grow), over the native store
// (docs/design.md §3.8).
#pragma once

#include <cstdint>
#include <vector>

#include "draft.hpp"
#include "store.hpp"

namespace stand {

// The static tree's structure: node v's children (in rank order) are
// child_list[child_start[v] .. child_start[v + 1]); nodes in breadth-first order, root 0.
struct StaticTree {
    const int64_t* child_start = nullptr;  // [nodes + 1]
    const int64_t* child_list = nullptr;
    int64_t nodes = 0;
};

struct FillParams {
    int64_t deepest = 0;        // static nodes no deeper than this: min(step limit, tree depth)
    int64_t chain_deepest = 0;  // copied and extension nodes no deeper than this
    bool extend = false;        // Extension on
    int64_t budget = 0;         // Extension.budget: drafted nodes, copied ones not counted
    double min_score = 0.1;     // Extension.min_score: smallest path probability worth a node
};

// Fills `out` (and `nodes`: the static node each draft node fills, -1 for copied and extension
// nodes) as fill_tree does. noise == nullptr: deterministic drafts (q's top-m).
void static_fill(Store& store, const Token* context, size_t length, const StaticTree& tree, const Token* chain,
                 size_t chain_len, const FillParams& params, NoiseSource* noise, DraftOut& out,
                 std::vector<int64_t>& nodes);

}  // namespace stand
