// The top-p nucleus of rows of logits in C++ (stand_runtime/vllm/cpu_sampling.py's top_p_by_probe;
// the reference is stand_runtime.target.sampling.nucleus with a log-sum-exp, docs/design.md §7.5).
#pragma once

#include <cstdint>

namespace stand {

// Per row r of `scale` * `logits` (logits [rows, vocab] float32, row-major; scale > 0, e.g. 1 / temperature:
// the scaled row is not written), with nucleus mass top_p[r] < 1 (rows with top_p[r] >= 1 are skipped:
// wide 0, values 0, log_total 0):
//   log_total[r] = log sum_j exp(scale logits[r, j]);
//   ids[r, :] the most likely tokens, most likely first, values[r, :] their probabilities
//     exp(scale logit - log_total), zero past the nucleus (a token stays when the mass strictly before it is
//     below top_p[r] and its own is positive; the first always stays; ids past it are other tokens);
//   mass[r] the nucleus's total probability;
//   wide[r] = 1 when the row is not finite, or (without `mask`) its nucleus holds more than `width`
//     tokens: the caller sorts that row in full (values, ids, mass then mean nothing).
// With `mask`, every logit of a row that is not wide and not in its nucleus is set to -inf in place
// (a nucleus of any size).
// One pass for the maximum, one for the sum of exponentials (AVX2 where the CPU has it), the tokens
// near the maximum collected and sorted.
void nucleus_rows(float* logits, int64_t rows, int64_t vocab, const float* top_p, int64_t width, bool mask,
                  float scale, float* values, int64_t* ids, uint8_t* wide, float* log_total, float* mass);

}  // namespace stand
