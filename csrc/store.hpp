// The logit n-gram store in C++ (stand_runtime._native): the same tables, merge, reserve admission,
// eviction order, Witten-Bell blend and 0-gram table as stand_runtime/store/*.py, with the same
// floating-point operations in the same order, so every stored value and every blended q is the
// Python store's, bit for bit (docs/design.md §2.7).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stand {

using Token = int64_t;

// Python's built-in sum() of floats: plain left-to-right addition up to CPython 3.11, Neumaier's
// compensated summation from 3.12 on (the store is told which at construction).
double py_sum(const double* values, size_t n, bool compensated);

// numpy's float64 add.reduce of a contiguous array (pairwise summation, 8 accumulators).
double numpy_sum(const double* values, size_t n);

struct Observation {
    std::vector<Token> ids;
    std::vector<double> probs;
};

// One context's entry: q's ids by decreasing probability, their running averages, the count, and
// the reserve (the next ids by merged value, stand_runtime/store/admission.py).
struct Entry {
    std::vector<Token> ids;
    std::vector<double> probs;
    int64_t count = 0;
    std::vector<Token> reserve_ids;
    std::vector<double> reserve_probs;
};

// One table (contexts of n tokens): an open-addressing hash over the keys and a list in update
// order (least recently updated first), as the Python store's OrderedDict.
class Table {
public:
    explicit Table(int n);
    int n() const { return n_; }
    size_t size() const { return size_; }
    int32_t find(const Token* key) const;                  // slot or -1
    int32_t insert(const Token* key, Entry&& entry);       // appended as the most recent
    void erase(int32_t slot);
    void move_to_end(int32_t slot);
    int32_t oldest() const { return head_; }
    int32_t next(int32_t slot) const { return next_[slot]; }
    Entry& entry(int32_t slot) { return entries_[slot]; }
    const Entry& entry(int32_t slot) const { return entries_[slot]; }
    const Token* key(int32_t slot) const { return keys_.data() + static_cast<size_t>(slot) * n_; }

private:
    uint64_t hash(const Token* key) const;
    bool same_key(const Token* a, const Token* b) const {  // n_ <= 64 tokens: no library call
        for (int i = 0; i < n_; ++i)
            if (a[i] != b[i]) return false;
        return true;
    }
    size_t probe(const Token* key, uint64_t h) const;
    void grow();
    void unlink(int32_t slot);
    void link_last(int32_t slot);

    int n_;
    size_t size_ = 0;
    std::vector<int32_t> index_;   // hash index → slot, -1 empty
    std::vector<uint64_t> hashes_; // per slot
    std::vector<Token> keys_;      // per slot, n tokens
    std::vector<Entry> entries_;
    std::vector<int32_t> prev_, next_, free_;
    int32_t head_ = -1, tail_ = -1;
};

// The 0-gram table: summed p of every observation in first-seen order, and its top ids' q cached
// until the next observation (whatever width a later call asks for, as the Python table).
class Unigram {
public:
    bool empty() const { return tokens_.empty(); }
    void add(const Token* ids, const double* probs, size_t n);
    const std::vector<std::pair<Token, double>>& top(size_t width, bool compensated);

private:
    std::vector<Token> tokens_;
    std::vector<double> mass_;
    std::unordered_map<Token, int32_t> where_;
    std::vector<std::pair<Token, double>> top_;
    bool valid_ = false;
};

// A token -> position index for the blend's insertion-ordered values: open addressing with
// generation stamps, so starting over costs nothing.
class ScratchIndex {
public:
    void reset(size_t expected);
    // the position stored for token, or -1 after storing `position` for it
    int32_t find_or_insert(Token token, int32_t position);

private:
    std::vector<Token> keys_;
    std::vector<int32_t> values_;
    std::vector<uint32_t> stamps_;
    uint32_t generation_ = 0;
};

struct Blended {
    std::vector<Token> ids;
    std::vector<double> probs;  // the blend's q (prob_list of the Python entry)
    int64_t count = 0;
    int matched = 0;
};

struct Stats {
    int64_t lookups = 0, merges = 0, evictions = 0, reserve_ids = 0;
    double dropped_mass = 0.0;
    std::vector<int64_t> hits;  // by n (index n)
};

class Store {
public:
    Store(int top_k, int max_n, int64_t max_entries, int reserve, bool compensated_sum);

    int max_n() const { return max_n_; }
    int64_t max_token_id() const { return max_token_id_; }
    // An observation already checked, sorted and cut to top_k (stand_runtime/store/observation.py).
    void update_clean(const Token* context, size_t length, const Token* ids, const double* probs, size_t k);
    // Check, sort and cut a raw row as observation.py does; false when the row is invalid.
    bool clean_row(const Token* ids, const double* probs, size_t k, Observation& out) const;
    // Longest match (no counting); n = 0 on a miss.
    std::pair<int, const Entry*> match(const Token* context, size_t length) const;
    const Entry* lookup(const Token* context, size_t length);  // counts the lookup and its hit
    bool blend(const Token* context, size_t length, double beta, size_t width, Blended& out);  // counts
    const Table& table(int n) const { return tables_[n - 1]; }
    Stats& stats() { return stats_; }
    const Stats& stats() const { return stats_; }
    bool compensated() const { return compensated_; }
    // A cross-prompt memory (stand_runtime/store/ngram_store.py ``base``): fed with every observation,
    // blended below this store's tables. Not owned; the Python store holds a reference to it.
    void set_base(Store* base) { base_ = base; }

private:
    void merge(Entry& stored, const Token* ids, const double* probs, size_t k);

    int top_k_, max_n_, reserve_;
    int64_t max_entries_;
    bool compensated_;
    int64_t max_token_id_ = -1;
    std::vector<Table> tables_;  // index n - 1
    Unigram unigram_;
    Stats stats_;
    Store* base_ = nullptr;
    Blended floor_;  // the base's blend under this one
    // scratch of merge and blend
    std::vector<std::pair<Token, double>> weighted_;
    std::vector<size_t> order_;
    std::vector<double> masses_;
    std::unordered_map<Token, int32_t> position_;
    ScratchIndex scratch_;
};

}  // namespace stand
