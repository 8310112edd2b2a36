// The copy path's index in C++: stand_runtime/drafters/suffix_index.py's SuffixIndex (prompt lookup's
// latest earlier occurrence of the sequence's longest suffix, Saxena, 2023; docs/design.md §3.5, §3.8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "store.hpp"

namespace stand {

// Every n-gram (n <= max_ngram) of a growing sequence, indexed by the end of its latest occurrence.
// The n-gram that ends at the sequence's last token is left out, as in the Python index, so the
// suffix never matches itself.
class SuffixIndex {
public:
    explicit SuffixIndex(int max_ngram);
    int max_ngram() const { return max_ngram_; }
    const std::vector<Token>& sequence() const { return sequence_; }
    void reset();                                   // a new sequence: start over
    void extend(const Token* tokens, size_t count);  // append, then index up to the new last token
    // The end of the latest earlier occurrence of the longest suffix that occurred before; -1: none.
    // `length`, when given, gets that suffix's length (0: none).
    int64_t match(int* length = nullptr) const;

private:
    struct Grams {  // n-grams of one n by the end of their latest occurrence (open addressing)
        std::vector<int64_t> ends;  // -1 empty
        std::vector<uint64_t> hashes;
        size_t size = 0;
    };
    uint64_t hash(const Token* tokens, int n) const;
    int64_t find(const Grams& grams, const Token* tokens, int n, uint64_t h, size_t* at) const;
    void index(int64_t end);  // every n-gram ending at `end`
    void grow(Grams& grams);

    int max_ngram_;
    std::vector<Token> sequence_;
    std::vector<Grams> grams_;  // index n - 1
    int64_t indexed_ = 0;       // n-grams ending before this position are indexed
};

}  // namespace stand
