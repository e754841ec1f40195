// The SDK's float32 few-row product (few_rows.cpp) as the decoder step (decoder_step.cpp) calls it.
#pragma once

#include <cstdint>

namespace mfsdk {

// One weight of a group of products of the same input rows: out [M, N] = x [M, K] @ w [N, K].T (+ bias).
struct FewRowsWeight {
  const float* w;
  const float* bias;  // null: none
  int64_t N;
  float* out;
};

// Every weight of ``ws`` (all K wide) times the M rows of x, in one parallel region split over the
// weights' rows together; each (row, output) sum in the order few_rows_linear uses.
void few_rows_products(const float* x, int64_t M, int64_t K, const FewRowsWeight* ws, int64_t count);

}  // namespace mfsdk
