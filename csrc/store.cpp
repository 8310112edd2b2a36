// The n-gram store (see store.hpp): each function names the Python code it mirrors.
#include "store.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace stand {

double py_sum(const double* values, size_t n, bool compensated) {
    double total = 0.0;
    if (!compensated) {
        for (size_t i = 0; i < n; ++i) total += values[i];
        return total;
    }
    double c = 0.0;  // CPython >= 3.12: Neumaier's improved Kahan-Babuska summation
    for (size_t i = 0; i < n; ++i) {
        double x = values[i];
        double t = total + x;
        if (std::fabs(total) >= std::fabs(x)) {
            c += (total - t) + x;
        } else {
            c += (x - t) + total;
        }
        total = t;
    }
    if (c != 0.0 && std::isfinite(c)) total += c;
    return total;
}

double numpy_sum(const double* a, size_t n) {
    if (n < 8) {
        double res = 0.0;
        for (size_t i = 0; i < n; ++i) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        size_t i = 8;
        for (; i < n - (n % 8); i += 8) {
            for (int j = 0; j < 8; ++j) r[j] += a[i + j];
        }
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
}

// ---------------------------------------------------------------------------------------------
// Table: open addressing with linear probing and backward-shift deletion; a doubly linked list in
// update order (the OrderedDict's order: insertion appends, a merge moves to the end, eviction pops
// the front).

Table::Table(int n) : n_(n), index_(16, -1) {}

uint64_t Table::hash(const Token* key) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n_);
    for (int i = 0; i < n_; ++i) {
        h ^= static_cast<uint64_t>(key[i]) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

size_t Table::probe(const Token* key, uint64_t h) const {
    size_t mask = index_.size() - 1;
    size_t i = h & mask;
    while (true) {
        int32_t slot = index_[i];
        if (slot < 0) return i;
        if (hashes_[slot] == h && same_key(this->key(slot), key)) return i;
        i = (i + 1) & mask;
    }
}

int32_t Table::find(const Token* key) const { return index_[probe(key, hash(key))]; }

void Table::grow() {
    std::vector<int32_t> index(index_.size() * 2, -1);
    size_t mask = index.size() - 1;
    for (int32_t slot = head_; slot >= 0; slot = next_[slot]) {
        size_t i = hashes_[slot] & mask;
        while (index[i] >= 0) i = (i + 1) & mask;
        index[i] = slot;
    }
    index_.swap(index);
}

int32_t Table::insert(const Token* key, Entry&& entry) {
    if ((size_ + 1) * 2 > index_.size()) grow();
    int32_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
        entries_[slot] = std::move(entry);
    } else {
        slot = static_cast<int32_t>(entries_.size());
        entries_.push_back(std::move(entry));
        hashes_.push_back(0);
        prev_.push_back(-1);
        next_.push_back(-1);
        keys_.resize(keys_.size() + n_);
    }
    std::memcpy(keys_.data() + static_cast<size_t>(slot) * n_, key, sizeof(Token) * n_);
    uint64_t h = hash(key);
    hashes_[slot] = h;
    index_[probe(key, h)] = slot;
    ++size_;
    link_last(slot);
    return slot;
}

void Table::erase(int32_t slot) {
    size_t mask = index_.size() - 1;
    size_t i = probe(key(slot), hashes_[slot]);
    size_t j = i;
    while (true) {
        j = (j + 1) & mask;
        int32_t other = index_[j];
        if (other < 0) break;
        size_t home = hashes_[other] & mask;
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            index_[i] = other;
            i = j;
        }
    }
    index_[i] = -1;
    unlink(slot);
    entries_[slot] = Entry();
    free_.push_back(slot);
    --size_;
}

void Table::unlink(int32_t slot) {
    int32_t p = prev_[slot], q = next_[slot];
    (p >= 0 ? next_[p] : head_) = q;
    (q >= 0 ? prev_[q] : tail_) = p;
    prev_[slot] = next_[slot] = -1;
}

void Table::link_last(int32_t slot) {
    prev_[slot] = tail_;
    next_[slot] = -1;
    (tail_ >= 0 ? next_[tail_] : head_) = slot;
    tail_ = slot;
}

void Table::move_to_end(int32_t slot) {
    if (slot == tail_) return;
    unlink(slot);
    link_last(slot);
}

// ---------------------------------------------------------------------------------------------
// Unigram (store/blend.py UnigramTable)

void Unigram::add(const Token* ids, const double* probs, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        auto found = where_.find(ids[i]);
        if (found == where_.end()) {
            where_.emplace(ids[i], static_cast<int32_t>(tokens_.size()));
            tokens_.push_back(ids[i]);
            mass_.push_back(0.0 + probs[i]);
        } else {
            mass_[found->second] = mass_[found->second] + probs[i];
        }
    }
    valid_ = false;
}

const std::vector<std::pair<Token, double>>& Unigram::top(size_t width, bool compensated) {
    if (valid_) return top_;
    // sorted(mass.items(), key=-mass)[:width]: ties keep first-seen order, so a scan in that order
    // admits an id only when it beats the current width-th strictly
    std::vector<size_t> best;
    best.reserve(width + 1);
    for (size_t i = 0; i < tokens_.size() && width > 0; ++i) {
        double m = mass_[i];
        if (best.size() == width && !(m > mass_[best.back()])) continue;
        auto at = std::upper_bound(best.begin(), best.end(), m, [&](double value, size_t j) { return value > mass_[j]; });
        best.insert(at, i);
        if (best.size() > width) best.pop_back();
    }
    std::vector<double> masses(best.size());
    for (size_t i = 0; i < best.size(); ++i) masses[i] = mass_[best[i]];
    double total = py_sum(masses.data(), masses.size(), compensated);
    top_.clear();
    for (size_t i = 0; i < best.size(); ++i) top_.emplace_back(tokens_[best[i]], masses[i] / total);
    valid_ = true;
    return top_;
}

// ---------------------------------------------------------------------------------------------
// ScratchIndex

void ScratchIndex::reset(size_t expected) {
    size_t capacity = 64;
    while (capacity < expected * 2) capacity <<= 1;
    if (capacity > keys_.size()) {
        keys_.assign(capacity, 0);
        values_.assign(capacity, 0);
        stamps_.assign(capacity, 0);
        generation_ = 0;
    }
    if (++generation_ == 0) {
        std::fill(stamps_.begin(), stamps_.end(), 0);
        generation_ = 1;
    }
}

int32_t ScratchIndex::find_or_insert(Token token, int32_t position) {
    size_t mask = keys_.size() - 1;
    uint64_t h = static_cast<uint64_t>(token) * 0x9E3779B97F4A7C15ull;
    size_t i = (h ^ (h >> 29)) & mask;
    while (stamps_[i] == generation_) {
        if (keys_[i] == token) return values_[i];
        i = (i + 1) & mask;
    }
    stamps_[i] = generation_;
    keys_[i] = token;
    values_[i] = position;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Store (store/ngram_store.py, admission.py, observation.py, blend.py blend_tables)

Store::Store(int top_k, int max_n, int64_t max_entries, int reserve, bool compensated_sum)
    : top_k_(top_k), max_n_(max_n), reserve_(reserve), max_entries_(max_entries), compensated_(compensated_sum) {
    for (int n = 1; n <= max_n; ++n) tables_.emplace_back(n);
    stats_.hits.assign(max_n + 1, 0);
}

bool Store::clean_row(const Token* ids, const double* probs, size_t k, Observation& out) const {
    out.ids.clear();
    out.probs.clear();
    for (size_t i = 0; i < k; ++i) {
        double p = probs[i];
        if (!(0.0 <= p && p <= 1.0 + 1e-6)) return false;
    }
    for (size_t i = 0; i < k; ++i) {
        if (probs[i] > 0) {
            out.ids.push_back(ids[i]);
            out.probs.push_back(probs[i]);
        }
    }
    size_t m = out.ids.size();
    for (size_t i = 0; i < m; ++i) {
        if (out.ids[i] < 0) return false;
    }
    if (m <= 32) {
        for (size_t i = 0; i < m; ++i)
            for (size_t j = i + 1; j < m; ++j)
                if (out.ids[i] == out.ids[j]) return false;
    } else {
        std::vector<Token> sorted(out.ids);
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return false;
    }
    bool unsorted = false;
    for (size_t i = 1; i < m; ++i) unsorted = unsorted || out.probs[i] > out.probs[i - 1];
    if (unsorted) {
        std::vector<size_t> order(m);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out.probs[a] > out.probs[b]; });
        Observation sorted;
        for (size_t i : order) {
            sorted.ids.push_back(out.ids[i]);
            sorted.probs.push_back(out.probs[i]);
        }
        out = std::move(sorted);
    }
    if (out.ids.size() > static_cast<size_t>(top_k_)) {
        out.ids.resize(top_k_);
        out.probs.resize(top_k_);
    }
    return true;
}

void Store::update_clean(const Token* context, size_t length, const Token* ids, const double* probs, size_t k) {
    if (k == 0) return;
    if (length > static_cast<size_t>(max_n_)) {
        context += length - max_n_;
        length = max_n_;
    }
    max_token_id_ = std::max<int64_t>(max_token_id_, *std::max_element(ids, ids + k));
    unigram_.add(ids, probs, k);
    for (size_t n = length; n >= 1; --n) {
        const Token* key = context + (length - n);
        Table& table = tables_[n - 1];
        int32_t slot = table.find(key);
        if (slot < 0) {
            Entry entry;
            entry.ids.assign(ids, ids + k);
            entry.probs.assign(probs, probs + k);
            entry.count = 1;
            table.insert(key, std::move(entry));
            if (static_cast<int64_t>(table.size()) > max_entries_) {
                int32_t oldest = table.oldest();
                stats_.reserve_ids -= static_cast<int64_t>(table.entry(oldest).reserve_ids.size());
                table.erase(oldest);
                ++stats_.evictions;
            }
        } else {
            merge(table.entry(slot), ids, probs, k);
            table.move_to_end(slot);
        }
    }
    if (base_ != nullptr) base_->update_clean(context, length, ids, probs, k);
}

void Store::merge(Entry& stored, const Token* ids, const double* probs, size_t k) {
    double count = static_cast<double>(stored.count);
    weighted_.clear();
    for (size_t i = 0; i < stored.ids.size(); ++i) weighted_.emplace_back(stored.ids[i], stored.probs[i] * count);
    for (size_t i = 0; i < stored.reserve_ids.size(); ++i)
        weighted_.emplace_back(stored.reserve_ids[i], stored.reserve_probs[i] * count);
    bool mapped = weighted_.size() > 64;
    if (mapped) {
        position_.clear();
        for (size_t i = 0; i < weighted_.size(); ++i) position_[weighted_[i].first] = static_cast<int32_t>(i);
    }
    for (size_t i = 0; i < k; ++i) {
        int64_t at = -1;
        if (mapped) {
            auto found = position_.find(ids[i]);
            if (found != position_.end()) at = found->second;
        } else {
            for (size_t j = 0; j < weighted_.size(); ++j)
                if (weighted_[j].first == ids[i]) { at = static_cast<int64_t>(j); break; }
        }
        if (at >= 0) {
            weighted_[at].second = weighted_[at].second + probs[i];
        } else {
            if (mapped) position_[ids[i]] = static_cast<int32_t>(weighted_.size());
            weighted_.emplace_back(ids[i], 0.0 + probs[i]);
        }
    }
    size_t total = weighted_.size();
    order_.resize(total);
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return weighted_[a].second > weighted_[b].second; });
    double scale = 1.0 / static_cast<double>(stored.count + 1);
    size_t top_k = static_cast<size_t>(top_k_);
    double dropped = 0.0;
    size_t old_reserve = stored.reserve_ids.size();
    stored.reserve_ids.clear();
    stored.reserve_probs.clear();
    if (total > top_k) {
        std::vector<double> cut;
        for (size_t i = top_k; i < total; ++i) cut.push_back(weighted_[order_[i]].second);
        dropped = py_sum(cut.data(), cut.size(), compensated_) * scale;
        for (size_t i = top_k; i < std::min(total, top_k + reserve_); ++i) {
            stored.reserve_ids.push_back(weighted_[order_[i]].first);
            stored.reserve_probs.push_back(weighted_[order_[i]].second * scale);
        }
    }
    size_t kept = std::min(total, top_k);
    stored.ids.resize(kept);
    stored.probs.resize(kept);
    for (size_t i = 0; i < kept; ++i) {
        stored.ids[i] = weighted_[order_[i]].first;
        stored.probs[i] = weighted_[order_[i]].second * scale;
    }
    stored.count += 1;
    ++stats_.merges;
    stats_.dropped_mass += dropped;
    stats_.reserve_ids += static_cast<int64_t>(stored.reserve_ids.size()) - static_cast<int64_t>(old_reserve);
}

std::pair<int, const Entry*> Store::match(const Token* context, size_t length) const {
    if (length > static_cast<size_t>(max_n_)) {
        context += length - max_n_;
        length = max_n_;
    }
    for (size_t n = length; n >= 1; --n) {
        const Table& table = tables_[n - 1];
        int32_t slot = table.find(context + (length - n));
        if (slot >= 0) return {static_cast<int>(n), &table.entry(slot)};
    }
    return {0, nullptr};
}

const Entry* Store::lookup(const Token* context, size_t length) {
    ++stats_.lookups;
    auto found = match(context, length);
    if (found.first) ++stats_.hits[found.first];
    return found.second;
}

bool Store::blend(const Token* context, size_t length, double beta, size_t width, Blended& out) {
    // the floor: the base's blend for the same context (a cross-prompt memory), else the 0-gram table
    bool floored = base_ != nullptr && base_->blend(context, length, beta, width, floor_);
    if (!floored && unigram_.empty()) return false;
    if (length > static_cast<size_t>(max_n_)) {
        context += length - max_n_;
        length = max_n_;
    }
    // raw: an insertion-ordered map token -> value (blended value = scale * raw)
    if (floored) {
        weighted_.clear();
        for (size_t i = 0; i < floor_.ids.size(); ++i) weighted_.emplace_back(floor_.ids[i], floor_.probs[i]);
    } else {
        const auto& top = unigram_.top(width, compensated_);
        weighted_.assign(top.begin(), top.end());
    }
    size_t bound = weighted_.size() + length * static_cast<size_t>(top_k_);  // distinct tokens at most
    scratch_.reset(bound);
    for (size_t i = 0; i < weighted_.size(); ++i) scratch_.find_or_insert(weighted_[i].first, static_cast<int32_t>(i));
    double scale = 1.0;
    int64_t count = floored ? floor_.count : 0;
    int matched = 0;
    for (size_t n = 1; n <= length; ++n) {
        const Table& table = tables_[n - 1];
        int32_t slot = table.find(context + (length - n));
        if (slot < 0) break;  // a longer context is stored only where its suffixes are
        const Entry& entry = table.entry(slot);
        double c = static_cast<double>(entry.count);
        double weight = c / (c + beta * static_cast<double>(entry.ids.size()));
        if (weight >= 1.0) {
            weighted_.clear();
            scratch_.reset(bound);
            scale = 1.0;
        } else {
            scale *= 1.0 - weight;
        }
        double add = weight / (scale * py_sum(entry.probs.data(), entry.probs.size(), compensated_));
        for (size_t i = 0; i < entry.ids.size(); ++i) {
            int32_t at = scratch_.find_or_insert(entry.ids[i], static_cast<int32_t>(weighted_.size()));
            if (at < 0) {
                weighted_.emplace_back(entry.ids[i], 0.0 + entry.probs[i] * add);
            } else {
                double& value = weighted_[at].second;
                value = value + entry.probs[i] * add;
            }
        }
        count = entry.count;
        matched = static_cast<int>(n);
    }
    // the `width` largest positive values, ties in insertion order (sorted(key=-value) then cut): a
    // scan in insertion order admits a value only when it beats the current width-th strictly
    order_.clear();
    for (size_t i = 0; i < weighted_.size() && width > 0; ++i) {
        double value = weighted_[i].second;
        if (!(value > 0)) continue;
        if (order_.size() == width && !(value > weighted_[order_.back()].second)) continue;
        size_t at = order_.size();
        while (at > 0 && value > weighted_[order_[at - 1]].second) --at;
        order_.insert(order_.begin() + at, i);
        if (order_.size() > width) order_.pop_back();
    }
    size_t keep = order_.size();
    masses_.resize(keep);
    for (size_t i = 0; i < keep; ++i) masses_[i] = weighted_[order_[i]].second;
    double total = py_sum(masses_.data(), keep, compensated_);
    out.ids.resize(keep);
    out.probs.resize(keep);
    for (size_t i = 0; i < keep; ++i) {
        out.ids[i] = weighted_[order_[i]].first;
        out.probs[i] = masses_[i] / total;
    }
    out.count = count;
    out.matched = matched;
    ++stats_.lookups;
    if (matched) ++stats_.hits[matched];
    return true;
}

}  // namespace stand
