// fill_tree, graft_chain and Extension.grow (stand_runtime/drafters/tree_walk.py) with STAND's
// proposal (stand.store_proposer, gumbel.choose_children) over the native store: the same walk, the
// same lookups (counted in the store's statistics), the same Gumbel draws (one block of |support|
// values per hit, as RandomStream.gumbel(len(log_q))), the same drawing orders and float operations.
#include "static_fill.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

namespace stand {
namespace {

// A node's proposal: the entry's support, q (prob_list renormalised by numpy's sum, as StoreEntry.q)
// and the slots of the children drawn, in drawing order.
struct Proposal {
    const Entry* entry = nullptr;
    std::vector<double> q;
    std::vector<int32_t> slots;
    std::vector<double> keys;  // scratch: log q + g
};

class FillBuilder {
public:
    FillBuilder(DraftOut& out, std::vector<int64_t>& nodes, const Token* context, size_t length, int max_n,
                size_t capacity)
        : out_(out), nodes_(nodes), max_n_(static_cast<size_t>(max_n)) {
        out_ = DraftOut();
        nodes_.clear();
        reserve(capacity);
        append(context[length - 1], -1, 0, -1, 0, 1.0);
        size_t from = length > max_n_ ? length - max_n_ : 0;
        suffix_len_[0] = length - from;
        std::copy(context + from, context + length, suffixes_.begin());
    }

    size_t size() const { return out_.tokens.size(); }
    int64_t depth(int32_t node) const { return out_.depths[node]; }
    int64_t static_node(int32_t node) const { return nodes_[node]; }
    double score(int32_t node) const { return scores_[node]; }
    bool childless(int32_t node) const { return children_[node].empty(); }
    const Token* suffix(int32_t node) const { return suffixes_.data() + static_cast<size_t>(node) * max_n_; }
    size_t suffix_len(int32_t node) const { return suffix_len_[node]; }

    // _add_children: q recorded at the parent, then its children in drawing order (at most `width`).
    void add_children(int32_t parent, const Proposal& p, const int64_t* static_children, size_t width) {
        set_distribution(parent, p.entry->ids, p.q);
        size_t n = std::min(width, p.slots.size());
        for (size_t rank = 0; rank < n; ++rank) {
            int32_t slot = p.slots[rank];
            add(parent, p.entry->ids[slot], slot, static_children == nullptr ? -1 : static_children[rank],
                scores_[parent] * p.q[slot]);
        }
    }

    // DraftBuilder.add_copy: after the drawn children; a token q lacks joins the support at q = 0.
    // Its path probability is its parent's (graft_chain).
    int32_t add_copy(int32_t parent, Token token) {
        int64_t slot = copy_slot(out_, parent, token);
        int32_t position = add(parent, token, slot, -1, scores_[parent]);
        out_.copied[position] = 1;
        return position;
    }

    int32_t child_with(int32_t node, Token token) const {
        for (int32_t kid : children_[node])
            if (out_.tokens[kid] == token) return kid;
        return -1;
    }

    // The children lists flattened into the draft (DraftOut's child_start / child_count / child_flat).
    void finish() {
        flatten_children(out_, children_);
    }

private:
    void reserve(size_t n) {  // the nodes a fill can reach: no reallocation while it grows
        for (auto* v : {&out_.parents, &out_.depths, &out_.slots, &out_.dist_start, &out_.dist_len}) v->reserve(n);
        out_.tokens.reserve(n);
        children_.reserve(n);
        out_.copied.reserve(n);
        nodes_.reserve(n);
        scores_.reserve(n);
        suffix_len_.reserve(n);
        suffixes_.reserve(n * max_n_);
    }

    void set_distribution(int32_t node, const std::vector<Token>& ids, const std::vector<double>& q) {
        out_.dist_start[node] = static_cast<int64_t>(out_.flat_ids.size());
        out_.dist_len[node] = static_cast<int64_t>(ids.size());
        out_.flat_ids.insert(out_.flat_ids.end(), ids.begin(), ids.end());
        out_.flat_q.insert(out_.flat_q.end(), q.begin(), q.end());
    }

    int32_t add(int32_t parent, Token token, int64_t slot, int64_t static_node, double score) {
        int32_t position = static_cast<int32_t>(out_.tokens.size());
        append(token, parent, out_.depths[parent] + 1, slot, static_node, score);
        children_[parent].push_back(position);
        // the child's suffix: (parent's suffix + token)[-max_n:]
        size_t base = suffix_len_[parent];
        size_t keep = base + 1 > max_n_ ? base - 1 : base;
        const Token* from = suffix(parent) + (base - keep);
        Token* to = suffixes_.data() + static_cast<size_t>(position) * max_n_;
        std::copy(from, from + keep, to);
        to[keep] = token;
        suffix_len_[position] = keep + 1;
        return position;
    }

    void append(Token token, int64_t parent, int64_t depth, int64_t slot, int64_t static_node, double score) {
        out_.tokens.push_back(token);
        out_.parents.push_back(parent);
        out_.depths.push_back(depth);
        out_.slots.push_back(slot);
        children_.emplace_back();
        out_.copied.push_back(0);
        out_.dist_start.push_back(-1);
        out_.dist_len.push_back(0);
        nodes_.push_back(static_node);
        scores_.push_back(score);
        suffix_len_.push_back(0);
        suffixes_.resize(suffixes_.size() + max_n_);
    }

    std::vector<std::vector<int32_t>> children_;  // per node, in drawing order (flattened by finish)
    DraftOut& out_;
    std::vector<int64_t>& nodes_;
    size_t max_n_;
    std::vector<double> scores_;  // probability of each node's path under q (the extension's priority)
    std::vector<size_t> suffix_len_;
    std::vector<Token> suffixes_;  // per node, max_n slots: the last max_n tokens before its children
};

// store_proposer's propose(context, m): a longest-match lookup, then choose_children with
// min(m, |support|) children: Gumbel-Top-K over the whole support's fresh noise (np.argmax for one
// child, else np.argsort(-(log q + g), stable)), or q's top-m.
bool propose(Store& store, const FillBuilder& builder, int32_t node, size_t m, NoiseSource* noise, Proposal& p) {
    p.entry = store.lookup(builder.suffix(node), builder.suffix_len(node));
    if (p.entry == nullptr) return false;
    const std::vector<double>& probs = p.entry->probs;
    size_t k = probs.size();
    double total = numpy_sum(probs.data(), k);
    p.q.resize(k);
    for (size_t i = 0; i < k; ++i) p.q[i] = probs[i] / total;
    size_t take = std::min(m, k);
    p.slots.resize(k);
    std::iota(p.slots.begin(), p.slots.end(), 0);
    if (noise != nullptr) {
        const double* gumbel = noise->take(k, builder.depth(node), p.entry->ids.data());
        std::vector<double>& keys = p.keys;
        keys.resize(k);
        for (size_t i = 0; i < k; ++i) keys[i] = std::log(p.q[i]) + gumbel[i];
        if (take == 1) {
            p.slots[0] = static_cast<int32_t>(std::max_element(keys.begin(), keys.end()) - keys.begin());
        } else {
            std::stable_sort(p.slots.begin(), p.slots.end(), [&](int32_t a, int32_t b) { return keys[a] > keys[b]; });
        }
    }
    p.slots.resize(take);
    return true;
}

// graft_chain: follow the chain down the drafted children equal to its tokens; from the first node
// whose children lack the next token, the rest hangs there as copied nodes. Returns nodes added.
int64_t graft(FillBuilder& builder, const Token* chain, size_t chain_len, int64_t deepest) {
    int32_t node = 0;
    int64_t added = 0;
    for (size_t i = 0; i < chain_len; ++i) {
        if (builder.depth(node) >= deepest) break;
        int32_t match = builder.child_with(node, chain[i]);
        if (match >= 0) {
            node = match;
            continue;
        }
        node = builder.add_copy(node, chain[i]);
        ++added;
    }
    return added;
}

struct Leaf {
    double key;  // -score
    int32_t node;
};

struct LeafAfter {  // heapq's order of (-score, node): the smallest first
    bool operator()(const Leaf& a, const Leaf& b) const {
        return a.key > b.key || (a.key == b.key && a.node > b.node);
    }
};

// Extension.grow: the childless, not-missed leaf with the most probable path gets one child, while
// that probability is at least min_score and the drafted nodes (copied ones aside) are under budget.
void grow(Store& store, FillBuilder& builder, const std::vector<uint8_t>& missed, const FillParams& params,
          int64_t grafted, NoiseSource* noise) {
    std::priority_queue<Leaf, std::vector<Leaf>, LeafAfter> frontier;
    for (size_t v = 0; v < builder.size(); ++v) {
        int32_t node = static_cast<int32_t>(v);
        if (builder.childless(node) && !missed[v] && builder.depth(node) < params.chain_deepest)
            frontier.push({-builder.score(node), node});
    }
    Proposal proposal;
    while (!frontier.empty() && static_cast<int64_t>(builder.size()) - 1 - grafted < params.budget) {
        Leaf leaf = frontier.top();
        frontier.pop();
        if (-leaf.key < params.min_score) break;
        if (!propose(store, builder, leaf.node, 1, noise, proposal)) continue;
        builder.add_children(leaf.node, proposal, nullptr, 1);
        int32_t child = static_cast<int32_t>(builder.size()) - 1;
        if (builder.depth(child) < params.chain_deepest) frontier.push({-builder.score(child), child});
    }
}

}  // namespace

void static_fill(Store& store, const Token* context, size_t length, const StaticTree& tree, const Token* chain,
                 size_t chain_len, const FillParams& params, NoiseSource* noise, DraftOut& out,
                 std::vector<int64_t>& nodes) {
    size_t capacity = static_cast<size_t>(tree.nodes) + chain_len + 1 +
                      (params.extend ? static_cast<size_t>(std::max<int64_t>(params.budget, 0)) : 0);
    FillBuilder builder(out, nodes, context, length, store.max_n(), capacity);
    std::vector<uint8_t> missed;
    Proposal proposal;
    for (size_t position = 0; position < builder.size(); ++position) {
        int32_t node = static_cast<int32_t>(position);
        int64_t v = builder.static_node(node);
        const int64_t* kids = tree.child_list + tree.child_start[v];
        size_t width = static_cast<size_t>(tree.child_start[v + 1] - tree.child_start[v]);
        missed.push_back(0);
        if (width == 0 || builder.depth(node) >= params.deepest) continue;
        if (propose(store, builder, node, width, noise, proposal)) {
            builder.add_children(node, proposal, kids, width);
        } else {
            missed.back() = 1;
        }
    }
    int64_t grafted = graft(builder, chain, chain_len, params.chain_deepest);
    if (params.extend) {
        missed.resize(builder.size(), 0);
        grow(store, builder, missed, params, grafted, noise);
    }
    builder.finish();
}

}  // namespace stand
