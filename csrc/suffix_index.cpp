// SuffixIndex (see suffix_index.hpp): each n-gram's key is read from the sequence at its stored end,
// so a table holds positions only.
#include "suffix_index.hpp"

#include <algorithm>
#include <cstring>

namespace stand {

SuffixIndex::SuffixIndex(int max_ngram) : max_ngram_(max_ngram) { reset(); }

void SuffixIndex::reset() {
    sequence_.clear();
    grams_.assign(static_cast<size_t>(std::max(max_ngram_, 0)), Grams());
    for (Grams& grams : grams_) {
        grams.ends.assign(64, -1);
        grams.hashes.assign(64, 0);
    }
    indexed_ = 0;
}

uint64_t SuffixIndex::hash(const Token* tokens, int n) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
    for (int i = 0; i < n; ++i) {
        h ^= static_cast<uint64_t>(tokens[i]) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

int64_t SuffixIndex::find(const Grams& grams, const Token* tokens, int n, uint64_t h, size_t* at) const {
    size_t mask = grams.ends.size() - 1;
    size_t i = h & mask;
    while (grams.ends[i] >= 0) {
        int64_t end = grams.ends[i];
        if (grams.hashes[i] == h && std::memcmp(sequence_.data() + (end - n + 1), tokens, sizeof(Token) * n) == 0) {
            *at = i;
            return end;
        }
        i = (i + 1) & mask;
    }
    *at = i;
    return -1;
}

void SuffixIndex::grow(Grams& grams) {
    Grams bigger;
    bigger.ends.assign(grams.ends.size() * 2, -1);
    bigger.hashes.assign(grams.ends.size() * 2, 0);
    bigger.size = grams.size;
    size_t mask = bigger.ends.size() - 1;
    for (size_t j = 0; j < grams.ends.size(); ++j) {
        if (grams.ends[j] < 0) continue;
        size_t i = grams.hashes[j] & mask;
        while (bigger.ends[i] >= 0) i = (i + 1) & mask;
        bigger.ends[i] = grams.ends[j];
        bigger.hashes[i] = grams.hashes[j];
    }
    grams = std::move(bigger);
}

void SuffixIndex::index(int64_t end) {
    for (int n = 1; n <= max_ngram_; ++n) {
        if (end - n + 1 < 0) break;
        Grams& grams = grams_[n - 1];
        if ((grams.size + 1) * 2 > grams.ends.size()) grow(grams);
        const Token* tokens = sequence_.data() + (end - n + 1);
        uint64_t h = hash(tokens, n);
        size_t at = 0;
        if (find(grams, tokens, n, h, &at) < 0) ++grams.size;
        grams.ends[at] = end;  // the latest occurrence (ends only grow)
        grams.hashes[at] = h;
    }
}

void SuffixIndex::extend(const Token* tokens, size_t count) {
    sequence_.insert(sequence_.end(), tokens, tokens + count);
    int64_t last = static_cast<int64_t>(sequence_.size()) - 1;
    for (int64_t end = indexed_; end < last; ++end) index(end);
    indexed_ = std::max(indexed_, last);
}

int64_t SuffixIndex::match(int* matched) const {
    int64_t length = static_cast<int64_t>(sequence_.size());
    if (matched != nullptr) *matched = 0;
    for (int64_t n = std::min<int64_t>(max_ngram_, length); n >= 1; --n) {
        const Token* tokens = sequence_.data() + (length - n);
        size_t at = 0;
        int64_t end = find(grams_[n - 1], tokens, static_cast<int>(n), hash(tokens, static_cast<int>(n)), &at);
        if (end >= 0) {
            if (matched != nullptr) *matched = static_cast<int>(n);
            return end;
        }
    }
    return -1;
}

}  // namespace stand
