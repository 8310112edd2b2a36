// best_first_draft (stand_runtime/drafters/best_first.py) and graft_chain (tree_walk.py) over the
// native store: the same heap keys, tie order, Gumbel draws and float operations as the Python.
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

struct Drawn {
    std::vector<double> prob_list;  // the blend's q (scores read it)
    std::vector<int32_t> order;     // drawing order of the support
    double weight = 0.0;
    bool set = false;
};

class Builder {
public:
    Builder(DraftOut& out, Token root, int max_n) : out_(out), max_n_(max_n) {
        out_ = DraftOut();
        append(root, -1, 0, -1);
    }

    size_t size() const { return out_.tokens.size(); }

    int32_t add(int32_t parent, Token token, int64_t slot) {
        int32_t position = static_cast<int32_t>(out_.tokens.size());
        append(token, parent, out_.depths[parent] + 1, slot);
        out_.children[parent].push_back(position);
        // the child's suffix: (parent's suffix + token)[-max_n:]
        const auto& base = suffixes_[parent];
        std::vector<Token> suffix(base.size() + 1 > static_cast<size_t>(max_n_) ? base.begin() + 1 : base.begin(),
                                  base.end());
        suffix.push_back(token);
        suffixes_.back() = std::move(suffix);
        return position;
    }

    void set_distribution(int32_t node, const std::vector<Token>& ids, const std::vector<double>& q) {
        out_.dist_start[node] = static_cast<int64_t>(out_.flat_ids.size());
        out_.dist_len[node] = static_cast<int64_t>(ids.size());
        out_.flat_ids.insert(out_.flat_ids.end(), ids.begin(), ids.end());
        out_.flat_q.insert(out_.flat_q.end(), q.begin(), q.end());
    }

    // DraftBuilder.add_copy: after the drawn children; a token q lacks joins the support at q = 0.
    int32_t add_copy(int32_t parent, Token token) {
        int64_t slot = -1;
        int64_t start = out_.dist_start[parent], length = out_.dist_len[parent];
        if (start >= 0) {
            for (int64_t i = 0; i < length && slot < 0; ++i)
                if (out_.flat_ids[start + i] == token) slot = i;
            if (slot < 0) {
                slot = length;
                int64_t moved = static_cast<int64_t>(out_.flat_ids.size());
                for (int64_t i = 0; i < length; ++i) {
                    out_.flat_ids.push_back(out_.flat_ids[start + i]);
                    out_.flat_q.push_back(out_.flat_q[start + i]);
                }
                out_.flat_ids.push_back(token);
                out_.flat_q.push_back(0.0);
                out_.dist_start[parent] = moved;
                out_.dist_len[parent] = length + 1;
            }
        }
        int32_t position = add(parent, token, slot);
        out_.copied[position] = 1;
        return position;
    }

    const std::vector<Token>& suffix(int32_t node) const { return suffixes_[node]; }
    void set_root_suffix(std::vector<Token> suffix) { suffixes_[0] = std::move(suffix); }
    int64_t depth(int32_t node) const { return out_.depths[node]; }
    Token token(int32_t node) const { return out_.tokens[node]; }
    const std::vector<int32_t>& children(int32_t node) const { return out_.children[node]; }

private:
    void append(Token token, int64_t parent, int64_t depth, int64_t slot) {
        out_.tokens.push_back(token);
        out_.parents.push_back(parent);
        out_.depths.push_back(depth);
        out_.slots.push_back(slot);
        out_.children.emplace_back();
        out_.copied.push_back(0);
        out_.dist_start.push_back(-1);
        out_.dist_len.push_back(0);
        suffixes_.emplace_back();
    }

    DraftOut& out_;
    int max_n_;
    std::vector<std::vector<Token>> suffixes_;
};

// choose_children over the whole support: Gumbel-Top-|support| (np.argsort(-(log q + g), stable)),
// or q's order for deterministic drafts.
std::vector<int32_t> drawing_order(const std::vector<double>& q, NoiseSource* noise) {
    size_t m = q.size();
    std::vector<int32_t> order(m);
    std::iota(order.begin(), order.end(), 0);
    if (noise == nullptr) return order;
    const double* gumbel = noise->take(m);
    if (m == 1) return order;
    std::vector<double> keys(m);
    for (size_t i = 0; i < m; ++i) keys[i] = std::log(q[i]) + gumbel[i];
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return keys[a] > keys[b]; });
    return order;
}

// StoreEntry.q: prob_list renormalised by numpy's sum.
std::vector<double> renormalised(const std::vector<double>& probs) {
    double total = numpy_sum(probs.data(), probs.size());
    std::vector<double> q(probs.size());
    for (size_t i = 0; i < probs.size(); ++i) q[i] = probs[i] / total;
    return q;
}

void graft(Builder& builder, const Token* chain, size_t chain_len, int deepest) {
    int32_t node = 0;
    for (size_t i = 0; i < chain_len; ++i) {
        if (builder.depth(node) >= deepest) break;
        int32_t match = -1;
        for (int32_t kid : builder.children(node))
            if (builder.token(kid) == chain[i]) { match = kid; break; }
        node = match >= 0 ? match : builder.add_copy(node, chain[i]);
    }
}

}  // namespace

void best_first(Store& store, const Token* context, size_t length, const Token* chain, size_t chain_len,
                const DraftParams& params, NoiseSource* noise, DraftOut& out) {
    chain_len = std::min(chain_len, static_cast<size_t>(params.num_nodes));
    size_t budget = static_cast<size_t>(params.num_nodes) - chain_len;
    int max_n = store.max_n();
    Builder builder(out, context[length - 1], max_n);
    size_t from = length > static_cast<size_t>(max_n) ? length - max_n : 0;
    builder.set_root_suffix(std::vector<Token>(context + from, context + length));
    std::vector<double> scores{1.0};
    std::vector<Drawn> drawn(1);
    std::priority_queue<Item, std::vector<Item>, Later> heap;
    heap.push({-1.0, 0, 0, -1});
    int64_t tie = 0;
    Blended blended;
    auto offer = [&](int32_t node, int32_t rank) {
        const Drawn& d = drawn[node];
        ++tie;  // the score reads q at this *rank* of q's order, never the token drawn there
        heap.push({-scores[node] * d.weight * d.prob_list[rank], tie, node, rank});
    };
    while (!heap.empty() && builder.size() - 1 < budget) {
        Item item = heap.top();
        heap.pop();
        int32_t node = item.node;
        if (item.rank < 0) {
            const auto& suffix = builder.suffix(node);
            if (store.blend(suffix.data(), suffix.size(), params.beta, params.width, blended)) {
                Drawn& d = drawn[node];
                double c = static_cast<double>(blended.count);
                d.weight = params.confidence != 0.0 ? c / (c + params.confidence) : 1.0;
                std::vector<double> q = renormalised(blended.probs);
                d.order = drawing_order(q, noise);
                d.prob_list = blended.probs;
                d.set = true;
                builder.set_distribution(node, blended.ids, q);
                if (!d.order.empty()) offer(node, 0);
            }
            continue;
        }
        const Drawn& d = drawn[node];
        int32_t slot = d.order[item.rank];
        Token token = out.flat_ids[out.dist_start[node] + slot];
        int32_t child = builder.add(node, token, slot);
        drawn.emplace_back();
        scores.push_back(scores[node] * drawn[node].weight * drawn[node].prob_list[slot]);
        if (static_cast<size_t>(item.rank) + 1 < drawn[node].order.size()) offer(node, item.rank + 1);
        if (builder.depth(child) < params.deepest) {
            ++tie;
            heap.push({-scores[child], tie, child, -1});
        }
    }
    graft(builder, chain, chain_len, params.deepest);
}

}  // namespace stand
