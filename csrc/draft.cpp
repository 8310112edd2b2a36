// best_first_draft (stand_runtime/drafters/best_first.py) and graft_chain (tree_walk.py) over the
// native store: the same heap keys, tie order, Gumbel draws and float operations as the Python.
// Per-node state lives in flat arrays of a DraftScratch reused from call to call.
#include "draft.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

namespace stand {
namespace {

struct Item {
    double key;    // -score
    int64_t tie;   // insertion order breaks score ties
    int32_t node;
    int32_t rank;  // -1: the node's lookup
};

struct Later {
    bool operator()(const Item& a, const Item& b) const {
        return a.key > b.key || (a.key == b.key && a.tie > b.tie);
    }
};

class Builder {
public:
    Builder(DraftOut& out, DraftScratch& s, Token root, int max_n) : out_(out), s_(s), max_n_(max_n) {
        for (auto* v : {&out_.parents, &out_.depths, &out_.slots, &out_.dist_start, &out_.dist_len}) v->clear();
        out_.tokens.clear();
        out_.copied.clear();
        out_.flat_ids.clear();
        out_.flat_q.clear();
        out_.scores.clear();
        s_.path.clear();
        s_.suffixes.clear();
        s_.suffix_len.clear();
        s_.weights.clear();
        s_.prob_start.clear();
        s_.order_start.clear();
        s_.order_len.clear();
        s_.probs.clear();
        s_.orders.clear();
        used_children_ = 0;
        append(root, -1, 0, -1, 1.0);
    }

    size_t size() const { return out_.tokens.size(); }

    int32_t add(int32_t parent, Token token, int64_t slot, double score) {
        int32_t position = static_cast<int32_t>(out_.tokens.size());
        append(token, parent, out_.depths[parent] + 1, slot, score);
        s_.children[parent].push_back(position);
        // the child's suffix: (parent's suffix + token)[-max_n:]
        const Token* base = s_.suffixes.data() + static_cast<size_t>(parent) * max_n_;
        int32_t n = s_.suffix_len[parent];
        Token* mine = s_.suffixes.data() + static_cast<size_t>(position) * max_n_;
        int32_t skip = n + 1 > max_n_ ? 1 : 0;
        std::copy(base + skip, base + n, mine);
        mine[n - skip] = token;
        s_.suffix_len[position] = n - skip + 1;
        return position;
    }

    // DraftBuilder.add_copy: after the drawn children; a token q lacks joins the support at q = 0.
    int32_t add_copy(int32_t parent, Token token) {
        int64_t slot = copy_slot(out_, parent, token);
        int32_t position = add(parent, token, slot, s_.path[parent]);
        out_.copied[position] = 1;
        return position;
    }

    void set_root_suffix(const Token* suffix, size_t n) {
        std::copy(suffix, suffix + n, s_.suffixes.begin());
        s_.suffix_len[0] = static_cast<int32_t>(n);
    }
    const Token* suffix(int32_t node) const { return s_.suffixes.data() + static_cast<size_t>(node) * max_n_; }
    int32_t suffix_len(int32_t node) const { return s_.suffix_len[node]; }
    int64_t depth(int32_t node) const { return out_.depths[node]; }
    Token token(int32_t node) const { return out_.tokens[node]; }
    const std::vector<int32_t>& children(int32_t node) const { return s_.children[node]; }

    // The children lists flattened into the draft (drawing order per node).
    void finish() {
        flatten_children(out_, s_.children);
    }

private:
    void append(Token token, int64_t parent, int64_t depth, int64_t slot, double score) {
        out_.tokens.push_back(token);
        out_.parents.push_back(parent);
        out_.depths.push_back(depth);
        out_.slots.push_back(slot);
        out_.copied.push_back(0);
        out_.dist_start.push_back(-1);
        out_.dist_len.push_back(0);
        out_.scores.push_back(score);  // a drawn node's is replaced by its key (best_first)
        s_.path.push_back(score);
        if (s_.children.size() <= used_children_) s_.children.emplace_back();
        s_.children[used_children_++].clear();
        s_.suffixes.resize(s_.suffixes.size() + max_n_);
        s_.suffix_len.push_back(0);
        s_.weights.push_back(0.0);
        s_.prob_start.push_back(-1);
        s_.order_start.push_back(0);
        s_.order_len.push_back(0);
    }

    DraftOut& out_;
    DraftScratch& s_;
    int max_n_;
    size_t used_children_ = 0;
};

// choose_children over the whole support: Gumbel-Top-|support| (np.argsort(-(log q + g), stable)),
// or q's order for deterministic drafts; appended to scratch.orders.
void drawing_order(const double* q, const Token* ids, size_t m, int64_t depth, NoiseSource* noise, DraftScratch& s) {
    size_t at = s.orders.size();
    s.orders.resize(at + m);
    int32_t* order = s.orders.data() + at;
    std::iota(order, order + m, 0);
    if (noise == nullptr) return;
    const double* gumbel = noise->take(m, depth, ids);
    if (m == 1) return;
    s.keys.resize(m);
    double* keys = s.keys.data();
    for (size_t i = 0; i < m; ++i) keys[i] = std::log(q[i]) + gumbel[i];
    std::stable_sort(order, order + m, [keys](int32_t a, int32_t b) { return keys[a] > keys[b]; });
}

// The child of `node` holding `token` (children hold distinct tokens), or -1 (tree_walk.child_holding).
int32_t child_holding(Builder& builder, int32_t node, Token token) {
    for (int32_t kid : builder.children(node))
        if (builder.token(kid) == token) return kid;
    return -1;
}

void graft(Builder& builder, const Token* chain, size_t chain_len, int deepest) {
    int32_t node = 0;
    for (size_t i = 0; i < chain_len; ++i) {
        if (builder.depth(node) >= deepest) break;
        int32_t match = child_holding(builder, node, chain[i]);
        node = match >= 0 ? match : builder.add_copy(node, chain[i]);
    }
}

}  // namespace

namespace {
inline uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
}  // namespace

const double* PositionNoise::take(size_t n, int64_t depth, const Token* ids) {
    uint64_t position = mix64(key_ ^ mix64(static_cast<uint64_t>(base_ + depth)));
    values_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        uint64_t bits = mix64(position ^ (static_cast<uint64_t>(ids[i]) * 0x9E3779B97F4A7C15ULL)) >> 11;
        double u = (static_cast<double>(bits) + 0.5) * 0x1p-53;
        values_[i] = -std::log(-std::log(u));
    }
    return values_.data();
}

int64_t copy_slot(DraftOut& out, int32_t parent, Token token) {
    int64_t start = out.dist_start[parent], length = out.dist_len[parent];
    if (start < 0) return -1;
    for (int64_t i = 0; i < length; ++i)
        if (out.flat_ids[start + i] == token) return i;
    int64_t moved = static_cast<int64_t>(out.flat_ids.size());
    for (int64_t i = 0; i < length; ++i) {
        out.flat_ids.push_back(out.flat_ids[start + i]);
        out.flat_q.push_back(out.flat_q[start + i]);
    }
    out.flat_ids.push_back(token);
    out.flat_q.push_back(0.0);
    out.dist_start[parent] = moved;
    out.dist_len[parent] = length + 1;
    return length;
}

void flatten_children(DraftOut& out, const std::vector<std::vector<int32_t>>& children) {
    size_t n = out.tokens.size();
    out.child_start.resize(n);
    out.child_count.resize(n);
    out.child_flat.clear();
    for (size_t i = 0; i < n; ++i) {
        out.child_start[i] = static_cast<int32_t>(out.child_flat.size());
        out.child_count[i] = static_cast<int32_t>(children[i].size());
        out.child_flat.insert(out.child_flat.end(), children[i].begin(), children[i].end());
    }
}

void best_first(Store& store, const Token* context, size_t length, const Token* chain, size_t chain_len,
                const DraftParams& params, NoiseSource* noise, DraftOut& out, DraftScratch& s) {
    // the chain's tokens taken; the first `on` of them are drawn nodes already (root down to `at`)
    size_t budget = static_cast<size_t>(params.num_nodes), taken = 0, on = 0;
    int32_t at = 0;
    size_t copyable = std::min(chain_len, static_cast<size_t>(std::max(params.deepest, 0)));
    int max_n = store.max_n();
    Builder builder(out, s, context[length - 1], max_n);
    size_t from = length > static_cast<size_t>(max_n) ? length - max_n : 0;
    builder.set_root_suffix(context + from, length - from);
    std::priority_queue<Item, std::vector<Item>, Later> heap;
    heap.push({-1.0, 0, 0, -1});
    int64_t tie = 0;
    Blended& blended = s.blended;
    auto offer = [&](int32_t node, int32_t rank) {
        ++tie;  // the score reads q at this *rank* of q's order, never the token drawn there
        heap.push({-s.path[node] * s.weights[node] * s.probs[s.prob_start[node] + rank], tie, node, rank});
    };
    while (builder.size() - 1 + (taken - on) < budget && (!heap.empty() || taken < copyable)) {
        if (taken < copyable && (heap.empty() || std::pow(params.copy_rate, static_cast<double>(taken + 1)) > -heap.top().key)) {
            if (on == taken) {  // the chain's next token scores above every drawn candidate (ties: the drawn one)
                int32_t kid = child_holding(builder, at, chain[taken]);
                if (kid >= 0) { at = kid; ++on; }
            }
            ++taken;
            continue;
        }
        Item item = heap.top();
        heap.pop();
        int32_t node = item.node;
        if (item.rank < 0) {
            if (store.blend(builder.suffix(node), builder.suffix_len(node), params.beta, params.width, blended)) {
                double c = static_cast<double>(blended.count);
                s.weights[node] = params.confidence != 0.0 ? c / (c + params.confidence) : 1.0;
                size_t m = blended.probs.size();
                // StoreEntry.q: prob_list renormalised by numpy's sum
                double total = numpy_sum(blended.probs.data(), m);
                out.dist_start[node] = static_cast<int64_t>(out.flat_ids.size());
                out.dist_len[node] = static_cast<int64_t>(m);
                out.flat_ids.insert(out.flat_ids.end(), blended.ids.begin(), blended.ids.end());
                size_t q_at = out.flat_q.size();
                for (size_t i = 0; i < m; ++i) out.flat_q.push_back(blended.probs[i] / total);
                s.prob_start[node] = static_cast<int64_t>(s.probs.size());
                s.probs.insert(s.probs.end(), blended.probs.begin(), blended.probs.end());
                s.order_start[node] = static_cast<int64_t>(s.orders.size());
                s.order_len[node] = static_cast<int32_t>(m);
                drawing_order(out.flat_q.data() + q_at, out.flat_ids.data() + out.dist_start[node], m,
                              builder.depth(node), noise, s);
                if (m > 0) offer(node, 0);
            }
            continue;
        }
        int32_t slot = s.orders[s.order_start[node] + item.rank];
        Token token = out.flat_ids[out.dist_start[node] + slot];
        double score = s.path[node] * s.weights[node] * s.probs[s.prob_start[node] + slot];
        int32_t child = builder.add(node, token, slot, score);
        if (node == at && on < taken && token == chain[on]) { at = child; ++on; }  // a drawn node holds it
        out.scores[child] = -item.key;  // the draft's score: the key it was offered with (q at its rank)
        if (item.rank + 1 < s.order_len[node]) offer(node, item.rank + 1);
        if (builder.depth(child) < params.deepest) {
            ++tie;
            heap.push({-s.path[child], tie, child, -1});
        }
    }
    graft(builder, chain, taken, params.deepest);
    builder.finish();
}

}  // namespace stand
