// stand_runtime._native: the thin Python face of the native store and the native dynamic tree.
// The Python side (stand_runtime/store/native_store.py, stand_runtime/drafters/native_draft.py)
// checks arguments and builds the Python objects the rest of the runtime reads.
#include <algorithm>
#include <cmath>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "draft.hpp"
#include "nucleus.hpp"
#include "static_fill.hpp"
#include "store.hpp"
#include "suffix_index.hpp"

namespace py = pybind11;
using stand::Token;

namespace {

using IntArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using FloatArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// The module checks what its own memory safety rests on (sizes, ranges, shapes), whoever calls it;
// the Python wrappers check the rest (types, values) and give the user's errors.
void require(bool ok, const char* message) {
    if (!ok) throw py::value_error(message);
}

// Set while a draft runs: the Gumbel pool's `more` callback runs Python, which must neither draft
// again (the draft's scratch is shared) nor change a store (a draft holds pointers into its entries).
int drafting = 0;

void require_not_drafting() {
    if (drafting) throw std::runtime_error("_native: a draft's noise callback drafted again or changed a store");
}

struct Drafting {  // held for a draft's whole run
    Drafting() {
        require_not_drafting();
        ++drafting;
    }
    ~Drafting() { --drafting; }
    Drafting(const Drafting&) = delete;
    Drafting& operator=(const Drafting&) = delete;
};

py::tuple entry_tuple(int n, const stand::Entry& e) {
    py::object reserve;
    if (e.reserve_ids.empty()) {
        reserve = py::make_tuple(py::tuple(), py::tuple());
    } else {
        reserve = py::make_tuple(py::cast(e.reserve_ids), py::cast(e.reserve_probs));
    }
    return py::make_tuple(n, py::cast(e.ids), py::cast(e.probs), e.count, reserve);
}

// Gumbel noise from the Python pool: a buffer of the values still unused, and a callback
// more(used, n) that consumes `used` of them and returns a buffer whose first n values are the next
// draws (refilling the pool exactly when RandomStream.gumbel(n) would).
class PoolNoise : public stand::NoiseSource {
public:
    PoolNoise(FloatArray buffer, py::object more) : buffer_(std::move(buffer)), more_(std::move(more)) {}
    const double* take(size_t n, int64_t, const stand::Token*) override {
        if (used_ + n > static_cast<size_t>(buffer_.size())) {
            buffer_ = more_(used_, n).cast<FloatArray>();
            used_ = 0;
            require(static_cast<size_t>(buffer_.size()) >= n, "_native: the Gumbel pool's more(used, n) returned fewer than n values");
        }
        const double* out = buffer_.data() + used_;
        used_ += n;
        return out;
    }
    size_t used() const { return used_; }

private:
    FloatArray buffer_;
    py::object more_;
    size_t used_ = 0;
};

template <typename T>
py::array_t<T> to_array(const std::vector<T>& values) {
    py::array_t<T> out(values.size());
    std::copy(values.begin(), values.end(), out.mutable_data());
    return out;
}

// A PyList of ints from a span (faster than py::cast of a vector).
template <typename T>
py::list int_list(const T* values, size_t n) {
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(n));
    if (list == nullptr) throw py::error_already_set();
    for (size_t i = 0; i < n; ++i) PyList_SET_ITEM(list, i, PyLong_FromLongLong(static_cast<long long>(values[i])));
    return py::reinterpret_steal<py::list>(list);
}

py::tuple draft_objects(const stand::DraftOut& out, size_t used) {
    size_t n = out.tokens.size();
    py::array_t<int64_t> flat_ids = to_array(out.flat_ids);
    py::array_t<double> flat_q = to_array(out.flat_q);
    py::list children(n), draft_ids(n), draft_probs(n), copied;
    py::object none = py::none();
    for (size_t i = 0; i < n; ++i) {
        children[i] = int_list(out.child_flat.data() + out.child_start[i], out.child_count[i]);
        if (out.dist_start[i] < 0) {
            draft_ids[i] = none;
            draft_probs[i] = none;
        } else {
            py::ssize_t start = out.dist_start[i], length = out.dist_len[i];
            draft_ids[i] = py::array_t<int64_t>({length}, {static_cast<py::ssize_t>(sizeof(int64_t))},
                                                flat_ids.data() + start, flat_ids);
            draft_probs[i] = py::array_t<double>({length}, {static_cast<py::ssize_t>(sizeof(double))},
                                                 flat_q.data() + start, flat_q);
        }
        if (out.copied[i]) copied.append(i);
    }
    return py::make_tuple(int_list(out.tokens.data(), n), to_array(out.parents), to_array(out.depths), children,
                          draft_ids, draft_probs, int_list(out.slots.data(), n), copied, used, to_array(out.scores));
}

// A static tree's CSR children (child_start [nodes + 1], child_list): node 0 the root, every child a
// later node listed once, so that a fill's walk stays inside both arrays.
void check_tree(const IntArray& child_start, const IntArray& child_list) {
    require(child_start.ndim() == 1 && child_list.ndim() == 1 && child_start.size() >= 2,
            "static_fill: child_start must be 1-D of nodes + 1 >= 2 entries, child_list 1-D");
    const int64_t* start = child_start.data();
    py::ssize_t nodes = child_start.size() - 1;
    require(start[0] == 0 && start[nodes] == child_list.size(), "static_fill: child_start must run from 0 to len(child_list)");
    for (py::ssize_t i = 0; i < nodes; ++i) {
        require(start[i] <= start[i + 1], "static_fill: child_start must not decrease");
        for (int64_t j = start[i]; j < start[i + 1]; ++j)
            require(i < child_list.data()[j] && child_list.data()[j] < nodes, "static_fill: a child must be a later node of the tree");
    }
}

// One row's dynamic tree: the store, its context and chain, the tree's settings and the noise: the
// Gumbel pool (buffer, more), a row's position noise (key, base) as two ints, or None (deterministic drafts).
py::tuple draft_row(stand::Store& store, const IntArray& context, const IntArray& chain, const stand::DraftParams& params,
                    const py::object& buffer, const py::object& more) {
    static stand::DraftScratch scratch;  // the GIL is held and Drafting guards it: one draft at a time
    static stand::DraftOut out;
    require(context.ndim() == 1 && context.size() >= 1, "best_first: the context must be 1-D with at least one token");
    require(chain.ndim() == 1, "best_first: the chain must be 1-D");
    require(params.num_nodes >= 0 && params.deepest >= 0 && params.width >= 1,
            "best_first: num_nodes and deepest must be >= 0, width >= 1");
    Drafting guard;
    if (buffer.is_none()) {
        stand::best_first(store, context.data(), context.size(), chain.data(), chain.size(), params, nullptr, out,
                          scratch);
        return draft_objects(out, 0);
    }
    if (py::isinstance<py::int_>(buffer)) {  // a row's position noise: (key, base)
        stand::PositionNoise noise(buffer.cast<uint64_t>(), more.cast<int64_t>());
        stand::best_first(store, context.data(), context.size(), chain.data(), chain.size(), params, &noise, out, scratch);
        return draft_objects(out, 0);
    }
    PoolNoise noise(buffer.cast<FloatArray>(), more);
    stand::best_first(store, context.data(), context.size(), chain.data(), chain.size(), params, &noise, out, scratch);
    return draft_objects(out, noise.used());
}

// Rows first.. of one sequence into the store; the first row that fails the checks (-1: none).
py::ssize_t update_rows(stand::Store& s, const IntArray& tokens, const IntArray& positions, const IntArray& ids,
                        const FloatArray& probs, py::ssize_t first) {
    require_not_drafting();
    require(tokens.ndim() == 1 && positions.ndim() == 1, "update_rows: tokens and positions must be 1-D");
    require(ids.ndim() == 2 && probs.ndim() == 2 && ids.shape(0) == probs.shape(0) && ids.shape(1) == probs.shape(1),
            "update_rows: ids and probs must be 2-D of one shape");
    py::ssize_t rows = positions.size(), k = ids.shape(1);
    require(ids.shape(0) >= rows, "update_rows: ids and probs need a row per position");
    require(0 <= first && first <= rows, "update_rows: first must be in 0 .. len(positions)");
    for (py::ssize_t r = first; r < rows; ++r)
        require(-1 <= positions.data()[r] && positions.data()[r] < tokens.size(), "update_rows: a position is outside -1 .. len(tokens) - 1");
    const Token* seq = tokens.data();
    static stand::Observation clean;
    int max_n = s.max_n();
    for (py::ssize_t r = first; r < rows; ++r) {
        if (!s.clean_row(ids.data() + r * k, probs.data() + r * k, k, clean)) return r;
        int64_t pos = positions.data()[r];
        int64_t start = std::max<int64_t>(0, pos + 1 - max_n);
        s.update_clean(seq + start, static_cast<size_t>(pos + 1 - start), clean.ids.data(), clean.probs.data(),
                       clean.ids.size());
    }
    return -1;
}

// SuffixIndex.continuation over a Python list (the committed tokens): the Python index starts over
// unless the list extends the last one (`sequence[:len(last)] == last`). That check is made item by
// item on the objects: an item that is the object seen last time (a reference is kept) is the same
// int; any other is compared by value. Only the new items are converted.
class ListSuffixIndex {
public:
    // `longest`: a match of max_ngram tokens is extended backward by comparison up to this many tokens.
    ListSuffixIndex(int max_ngram, int longest) : core_(checked(max_ngram)), longest_(std::max(max_ngram, longest)) {}
    ~ListSuffixIndex() { release(); }
    ListSuffixIndex(const ListSuffixIndex&) = delete;
    ListSuffixIndex& operator=(const ListSuffixIndex&) = delete;

    int matched() const { return matched_; }

    py::list continuation(py::list sequence, int64_t limit) {
        PyObject* list = sequence.ptr();
        size_t length = static_cast<size_t>(PyList_GET_SIZE(list));
        size_t known = items_.size();
        bool extends = length >= known;
        for (size_t i = 0; i < known && extends; ++i) {
            PyObject* item = PyList_GET_ITEM(list, i);
            extends = item == items_[i] || token(item) == core_.sequence()[i];
        }
        size_t from = extends ? known : 0;
        std::vector<Token> fresh(length - from);
        for (size_t i = from; i < length; ++i) fresh[i - from] = token(PyList_GET_ITEM(list, i));
        if (!extends) {
            release();
            core_.reset();
        }
        for (size_t i = from; i < length; ++i) {
            PyObject* item = PyList_GET_ITEM(list, i);
            Py_INCREF(item);
            items_.push_back(item);
        }
        core_.extend(fresh.data(), fresh.size());
        py::list out;
        matched_ = 0;
        if (limit <= 0) return out;
        int64_t end = core_.match(&matched_);
        if (end < 0) return out;
        const std::vector<Token>& tokens = core_.sequence();
        int64_t last = static_cast<int64_t>(length) - 1;
        if (matched_ == core_.max_ngram()) {
            while (matched_ < longest_ && end - matched_ >= 0 && tokens[end - matched_] == tokens[last - matched_]) ++matched_;
        }
        size_t stop = std::min(length, static_cast<size_t>(end + 1 + std::min<int64_t>(limit, static_cast<int64_t>(length))));
        for (size_t i = static_cast<size_t>(end) + 1; i < stop; ++i) out.append(py::reinterpret_borrow<py::object>(items_[i]));
        return out;
    }

private:
    static int checked(int max_ngram) {
        require(1 <= max_ngram && max_ngram <= 4096, "SuffixIndex: max_ngram must be in 1 .. 4096");
        return max_ngram;
    }
    static Token token(PyObject* item) {
        long long value = PyLong_AsLongLong(item);
        if (value == -1 && PyErr_Occurred()) throw py::error_already_set();
        return static_cast<Token>(value);
    }
    void release() {
        for (PyObject* item : items_) Py_DECREF(item);
        items_.clear();
    }

    stand::SuffixIndex core_;
    int longest_;
    std::vector<PyObject*> items_;  // the last sequence's items (references held)
    int matched_ = 0;               // the length of the suffix the last continuation matched (0: none)
};

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "STAND's native drafting core: the n-gram store and the dynamic draft tree (docs/design.md §2.7, §3.7)";
    py::class_<stand::Store>(m, "Store")
        .def(py::init([](int top_k, int max_n, int64_t max_entries, int reserve, bool compensated_sum) {
            require(top_k >= 1 && max_n >= 1 && max_n <= 4096 && max_entries >= 1 && reserve >= 0,
                    "Store: top_k >= 1, max_n in 1 .. 4096, max_entries >= 1 and reserve >= 0");
            return new stand::Store(top_k, max_n, max_entries, reserve, compensated_sum);
        }))
        .def_property_readonly("max_token_id", &stand::Store::max_token_id)
        .def("set_base", [](stand::Store& s, stand::Store& base) { s.set_base(&base); }, py::keep_alive<1, 2>())
        .def("update", [](stand::Store& s, const std::vector<Token>& context, const std::vector<Token>& ids,
                          const std::vector<double>& probs) {
            require_not_drafting();
            require(ids.size() == probs.size(), "update: ids and probs must have one length");
            s.update_clean(context.data(), context.size(), ids.data(), probs.data(), ids.size());
        })
        .def("update_rows", [](stand::Store& s, IntArray tokens, IntArray positions, IntArray ids, FloatArray probs,
                               py::ssize_t first) -> py::ssize_t {
            // rows first.. of one sequence; returns the first row that fails the checks (-1: none)
            return update_rows(s, tokens, positions, ids, probs, first);
        })
        .def("match", [](const stand::Store& s, const std::vector<Token>& context) -> py::object {
            auto found = s.match(context.data(), context.size());
            if (!found.first) return py::none();
            return entry_tuple(found.first, *found.second);
        })
        .def("lookup", [](stand::Store& s, const std::vector<Token>& context) -> py::object {
            ++s.stats().lookups;
            auto found = s.match(context.data(), context.size());
            if (!found.first) return py::none();
            ++s.stats().hits[found.first];
            return entry_tuple(found.first, *found.second);
        })
        .def("blend", [](stand::Store& s, const std::vector<Token>& context, double beta, size_t width) -> py::object {
            require(width >= 1 && beta >= 0.0 && std::isfinite(beta), "blend: width must be >= 1 and beta finite, >= 0");
            stand::Blended out;
            if (!s.blend(context.data(), context.size(), beta, width, out)) return py::none();
            return py::make_tuple(py::cast(out.ids), py::cast(out.probs), out.count, out.matched);
        })
        .def("stats", [](const stand::Store& s) {
            std::vector<int64_t> entries(s.max_n() + 1, 0);
            for (int n = 1; n <= s.max_n(); ++n) entries[n] = static_cast<int64_t>(s.table(n).size());
            const stand::Stats& st = s.stats();
            return py::make_tuple(entries, st.lookups, st.hits, st.merges, st.dropped_mass, st.evictions, st.reserve_ids);
        })
        .def("entries", [](const stand::Store& s, int n) {
            // (key, ids, probs, count, reserve) of the n-token table, least recently updated first
            require(1 <= n && n <= s.max_n(), "entries: n must be in 1 .. max_n");
            py::list out;
            const stand::Table& table = s.table(n);
            for (int32_t slot = table.oldest(); slot >= 0; slot = table.next(slot)) {
                py::tuple key(n);
                for (int i = 0; i < n; ++i) key[i] = table.key(slot)[i];
                py::tuple e = entry_tuple(n, table.entry(slot));
                out.append(py::make_tuple(key, e[1], e[2], e[3], e[4]));
            }
            return out;
        });
    m.def("best_first", [](stand::Store& store, IntArray context, IntArray chain, int num_nodes, double confidence,
                           double beta, int deepest, size_t width, double copy_rate, py::object buffer, py::object more) {
        stand::DraftParams params{num_nodes, confidence, beta, deepest, width, copy_rate};
        return draft_row(store, context, chain, params, buffer, more);
    });
    m.def("best_first_rows", [](py::list rows) {
        // per row (store, context, chain, num_nodes, confidence, beta, deepest, width, copy_rate, buffer, more):
        // best_first's tuple per row, the rows drafted in order
        py::list drafts(rows.size());
        for (size_t r = 0; r < rows.size(); ++r) {
            py::tuple row = rows[r].cast<py::tuple>();
            stand::DraftParams params{row[3].cast<int>(), row[4].cast<double>(), row[5].cast<double>(),
                                      row[6].cast<int>(), row[7].cast<size_t>(), row[8].cast<double>()};
            drafts[r] = draft_row(row[0].cast<stand::Store&>(), row[1].cast<IntArray>(), row[2].cast<IntArray>(), params,
                                  row[9], row[10]);
        }
        return drafts;
    });
    m.def("update_rows_many", [](py::list rows) -> py::tuple {
        // per row (store, tokens, positions, ids, probs, first), in order, as update_rows; stops at the
        // first row with a row that fails the checks: (that row, its failing row), or (len(rows), -1)
        for (size_t r = 0; r < rows.size(); ++r) {
            py::tuple row = rows[r].cast<py::tuple>();
            py::ssize_t bad = update_rows(row[0].cast<stand::Store&>(), row[1].cast<IntArray>(), row[2].cast<IntArray>(),
                                          row[3].cast<IntArray>(), row[4].cast<FloatArray>(), row[5].cast<py::ssize_t>());
            if (bad >= 0) return py::make_tuple(r, bad);
        }
        return py::make_tuple(rows.size(), -1);
    });

    m.def("static_fill", [](stand::Store& store, IntArray context, IntArray child_start, IntArray child_list,
                            IntArray chain, int64_t deepest, int64_t chain_deepest, bool extend, int64_t budget,
                            double min_score, py::object buffer, py::object more) {
        // the static tree's fill (csrc/static_fill.hpp): the dynamic tree's tuple, then the static nodes
        require(context.ndim() == 1 && context.size() >= 1 && chain.ndim() == 1,
                "static_fill: the context must be 1-D with at least one token, the chain 1-D");
        check_tree(child_start, child_list);
        require(deepest >= 0 && chain_deepest >= 0 && budget >= 0, "static_fill: deepest, chain_deepest and budget must be >= 0");
        Drafting guard;
        stand::StaticTree tree{child_start.data(), child_list.data(), static_cast<int64_t>(child_start.size()) - 1};
        stand::FillParams params{deepest, chain_deepest, extend, budget, min_score};
        stand::DraftOut out;
        std::vector<int64_t> nodes;
        size_t used = 0;
        if (buffer.is_none()) {
            stand::static_fill(store, context.data(), context.size(), tree, chain.data(), chain.size(), params, nullptr,
                               out, nodes);
        } else if (py::isinstance<py::int_>(buffer)) {  // a row's position noise: (key, base)
            stand::PositionNoise noise(buffer.cast<uint64_t>(), more.cast<int64_t>());
            stand::static_fill(store, context.data(), context.size(), tree, chain.data(), chain.size(), params, &noise,
                               out, nodes);
        } else {
            PoolNoise noise(buffer.cast<FloatArray>(), more);
            stand::static_fill(store, context.data(), context.size(), tree, chain.data(), chain.size(), params, &noise,
                               out, nodes);
            used = noise.used();
        }
        return py::make_tuple(draft_objects(out, used), to_array(nodes));
    });

    m.def(
        "nucleus_rows",
        [](py::array_t<float, py::array::c_style> logits, py::array_t<float, py::array::c_style> top_p, int64_t width,
           bool mask, float scale) {
            // csrc/nucleus.hpp: (values [rows, width] float32, ids [rows, width] int64, wide [rows] bool,
            // log_total [rows] float32, mass [rows] float32); logits [rows, vocab] masked in place with `mask`
            if (logits.ndim() != 2 || top_p.ndim() != 1 || top_p.shape(0) != logits.shape(0) || width < 1 ||
                !(scale > 0.0f) || !std::isfinite(scale))
                throw py::value_error("nucleus_rows: logits must be [rows, vocab], top_p [rows], width >= 1, scale > 0");
            py::ssize_t rows = logits.shape(0), vocab = logits.shape(1);
            py::array_t<float> values({rows, static_cast<py::ssize_t>(width)});
            py::array_t<int64_t> ids({rows, static_cast<py::ssize_t>(width)});
            py::array_t<bool> wide(rows);
            py::array_t<float> log_total(rows), mass(rows);
            float* x = logits.mutable_data();
            const float* p = top_p.data();
            float* v = values.mutable_data();
            int64_t* id = ids.mutable_data();
            uint8_t* w = reinterpret_cast<uint8_t*>(wide.mutable_data());
            float* z = log_total.mutable_data();
            float* total = mass.mutable_data();
            {
                py::gil_scoped_release release;
                stand::nucleus_rows(x, rows, vocab, p, width, mask, scale, v, id, w, z, total);
            }
            return py::make_tuple(values, ids, wide, log_total, mass);
        },
        py::arg("logits").noconvert(), py::arg("top_p").noconvert(), py::arg("width"), py::arg("mask"),
        py::arg("scale") = 1.0f);

    py::class_<ListSuffixIndex>(m, "SuffixIndex")
        .def(py::init<int, int>(), py::arg("max_ngram"), py::arg("longest"))
        .def("continuation", &ListSuffixIndex::continuation)
        .def_property_readonly("matched", &ListSuffixIndex::matched);
}
