// The top-p nucleus of rows of logits (csrc/nucleus.hpp).
#include "nucleus.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STAND_X86 1
#endif

namespace stand {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// a token near the row's maximum: its raw logit, its probability exp(scale logit - log_total), its id
struct Candidate {
    float logit;
    float p;
    int64_t id;
};

// --- portable reference loops ------------------------------------------------------------------

// the largest of x[from..n), NaN when any is NaN
float max_scalar(const float* x, int64_t from, int64_t n) {
    float m = kNegInf;
    for (int64_t j = from; j < n; ++j) {
        if (std::isnan(x[j])) return x[j];
        m = x[j] > m ? x[j] : m;
    }
    return m;
}

double sum_exp_scalar(const float* x, int64_t n, float m, float scale, float floor) {
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j)
        if (x[j] >= floor) s += std::exp(static_cast<double>(scale) * (static_cast<double>(x[j]) - m));
    return s;
}

// the tokens from..n-1 at or above threshold (p not yet set)
void collect_scalar(const float* x, int64_t from, int64_t n, float threshold, std::vector<Candidate>& out) {
    for (int64_t j = from; j < n; ++j)
        if (x[j] >= threshold) out.push_back({x[j], 0.0f, j});
}

#ifdef STAND_X86
// --- AVX2 loops (chosen at run time) -----------------------------------------------------------

// the largest value, NaN when any is NaN
__attribute__((target("avx2"))) float max_avx2(const float* x, int64_t n) {
    __m256 a = _mm256_set1_ps(kNegInf), b = a, nan = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 u = _mm256_loadu_ps(x + j), v = _mm256_loadu_ps(x + j + 8);
        a = _mm256_max_ps(a, u);
        b = _mm256_max_ps(b, v);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(u, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(a, b));
    float m = max_scalar(lanes, 0, 8);
    float tail = max_scalar(x, j, n);
    return std::isnan(tail) ? tail : std::max(m, tail);
}

// exp(x) for x <= 0 (Cephes' expf: range reduction by ln 2, degree-5 polynomial, ~1 ulp); 0 below -87.
__attribute__((target("avx2"))) inline __m256 exp_nonpositive(__m256 x) {
    const __m256 floor_at = _mm256_set1_ps(-87.0f);
    __m256 zero = _mm256_cmp_ps(x, floor_at, _CMP_LT_OQ);  // also catches -inf
    x = _mm256_max_ps(x, floor_at);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(y, x), x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// sum of exp(scale (x - m)) over the lanes at or above `floor`: the vectors holding one listed first
// (branch-free), then their exponentials
__attribute__((target("avx2"))) double sum_exp_avx2(const float* x, int64_t n, float m, float scale, float floor) {
    static thread_local std::vector<int32_t> listed;
    listed.resize(static_cast<size_t>(n / 8) + 1);
    const __m256 shift = _mm256_set1_ps(m), low = _mm256_set1_ps(floor), times = _mm256_set1_ps(scale);
    int64_t count = 0, j = 0;
    for (; j + 8 <= n; j += 8) {
        listed[count] = static_cast<int32_t>(j);
        count += _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), low, _CMP_GE_OQ)) != 0;
    }
    __m256d sum = _mm256_setzero_pd();
    for (int64_t i = 0; i < count;) {  // float lanes summed into double every 16 vectors (rounding ~1e-7)
        __m256 a = _mm256_setzero_ps();
        for (int64_t end = std::min<int64_t>(count, i + 16); i < end; ++i) {
            __m256 v = _mm256_loadu_ps(x + listed[i]);
            __m256 in = _mm256_cmp_ps(v, low, _CMP_GE_OQ);
            a = _mm256_add_ps(a, _mm256_and_ps(in, exp_nonpositive(_mm256_mul_ps(_mm256_sub_ps(v, shift), times))));
        }
        sum = _mm256_add_pd(sum, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                                               _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))));
    }
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, sum);
    double s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    return s + sum_exp_scalar(x + j, n - j, m, scale, floor);
}

__attribute__((target("avx2"))) void collect_avx2(const float* x, int64_t n, float threshold,
                                                  std::vector<Candidate>& out) {
    const __m256 t = _mm256_set1_ps(threshold);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), t, _CMP_GE_OQ));
        while (bits) {
            int lane = __builtin_ctz(bits);
            out.push_back({x[j + lane], 0.0f, j + lane});
            bits &= bits - 1;
        }
    }
    collect_scalar(x, j, n, threshold, out);
}

bool use_avx2() {
    static const bool yes = __builtin_cpu_supports("avx2");
    return yes;
}
#endif

float row_max(const float* x, int64_t n) {
#ifdef STAND_X86
    if (use_avx2()) return max_avx2(x, n);
#endif
    return max_scalar(x, 0, n);
}

// sum_j exp(scale (x_j - m)) without the terms more than gap = ln(n) + 26 ln 2 below the maximum (in
// scaled units): together they are below n e^-gap = 2^-26 while the sum is >= 1 (the maximum's term),
// under float32's rounding of it
double row_sum_exp(const float* x, int64_t n, float m, float scale) {
    float floor = m - static_cast<float>((std::log(static_cast<double>(n)) + 26.0 * std::log(2.0)) / scale);
#ifdef STAND_X86
    if (use_avx2()) return sum_exp_avx2(x, n, m, scale, floor);
#endif
    return sum_exp_scalar(x, n, m, scale, floor);
}

void row_collect(const float* x, int64_t n, float threshold, std::vector<Candidate>& out) {
#ifdef STAND_X86
    if (use_avx2()) return collect_avx2(x, n, threshold, out);
#endif
    collect_scalar(x, 0, n, threshold, out);
}

// most likely first; the lower id first on ties
bool before_in_order(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The nucleus among `found` (every token of mass above theirs is in `found`, and they hold mass
// >= top_p, or they are the whole row): arranges `found` so that its first n entries are the nucleus
// and returns n. A token stays when the mass strictly before it, most likely first, is below top_p and
// its own mass is positive. Quickselect halves the undecided range by mass (std::nth_element), so a
// nucleus of thousands of tokens costs linear time; the last <= 64 undecided are sorted and scanned
// with the mass before them summed in float32 as torch's cumsum.
int64_t select_nucleus(std::vector<Candidate>& found, float top_p) {
    int64_t lo = 0, hi = static_cast<int64_t>(found.size());
    double above = 0.0;  // the mass of found[0, lo), all in the nucleus
    while (hi - lo > 64) {
        int64_t mid = lo + (hi - lo) / 2;
        std::nth_element(found.begin() + lo, found.begin() + mid, found.begin() + hi, before_in_order);
        double upper = 0.0;
        for (int64_t i = lo; i < mid; ++i) upper += found[i].p;
        if (above + upper >= top_p) {
            hi = mid;  // the token at mid (and every one after it) has mass >= top_p before it
        } else {
            above += upper;
            lo = mid;
        }
    }
    std::sort(found.begin() + lo, found.begin() + hi, before_in_order);
    float before = static_cast<float>(above);
    int64_t n = lo;
    while (n < hi && before < top_p && found[n].p > 0.0f) before += found[n++].p;
    return n;
}

// One row: returns whether it is wide (not finite, or without `mask` a nucleus of more than `width`
// tokens); otherwise values/ids hold the nucleus's first `width` tokens (zero past it), *mass its
// total and, with `mask`, every other logit of the row is -inf. The tokens within a gap of the
// maximum are collected, the gap doubling from 4 until they hold mass top_p.
bool one_row(float* x, int64_t vocab, float top_p, int64_t width, bool mask, float scale, float* values,
             int64_t* ids, float* log_total, float* mass, std::vector<Candidate>& found) {
    float m = row_max(x, vocab);  // the scaled row's maximum is at the same token (scale > 0)
    if (!std::isfinite(m)) return true;
    double total = row_sum_exp(x, vocab, m, scale);
    if (!std::isfinite(total) || !(total >= 1.0)) return true;
    double log_total_over = std::log(total);  // log_total = scale m + this
    *log_total = static_cast<float>(static_cast<double>(scale) * m + log_total_over);
    for (float gap = 4.0f;; gap *= 2.0f) {
        found.clear();
        bool all = gap > 64.0f;  // past e^-64 of the maximum: every token
        row_collect(x, vocab, all ? kNegInf : m - gap / scale, found);
        double held = 0.0;
        for (Candidate& c : found) {
            double exponent = static_cast<double>(scale) * (static_cast<double>(c.logit) - m) - log_total_over;
            c.p = static_cast<float>(std::exp(exponent));
            held += c.p;
        }
        if (all || held >= top_p) break;
    }
    int64_t n = select_nucleus(found, top_p);
    if (n == 0 || (!mask && n > width)) return true;
    int64_t shown = std::min(n, width);
    std::partial_sort(found.begin(), found.begin() + shown, found.begin() + n, before_in_order);
    double kept = 0.0;
    for (int64_t i = 0; i < n; ++i) kept += found[i].p;
    *mass = static_cast<float>(kept);
    for (int64_t i = 0; i < width; ++i) {
        const Candidate& c = found[std::min<int64_t>(i, static_cast<int64_t>(found.size()) - 1)];
        ids[i] = c.id;
        values[i] = i < shown ? c.p : 0.0f;
    }
    if (mask) {
        std::fill(x, x + vocab, kNegInf);
        for (int64_t i = 0; i < n; ++i) x[found[i].id] = found[i].logit;
    }
    return false;
}

}  // namespace

void nucleus_rows(float* logits, int64_t rows, int64_t vocab, const float* top_p, int64_t width, bool mask,
                  float scale, float* values, int64_t* ids, uint8_t* wide, float* log_total, float* mass) {
    std::vector<Candidate> found;
    found.reserve(256);
    for (int64_t r = 0; r < rows; ++r) {
        float* v = values + r * width;
        int64_t* id = ids + r * width;
        std::fill(v, v + width, 0.0f);
        std::fill(id, id + width, int64_t{0});
        wide[r] = 0;
        log_total[r] = 0.0f;
        mass[r] = 0.0f;
        if (!(top_p[r] < 1.0f)) continue;
        wide[r] = one_row(logits + r * vocab, vocab, top_p[r], width, mask, scale, v, id, log_total + r, mass + r,
                          found) ? 1 : 0;
    }
}

}  // namespace stand
