// Float32 products of a few input rows with a weight: out [M, N] = x [M, K] @ weight [N, K].T (+ bias).
//
// Decoding multiplies one to a few rows per step by every weight, so the product is bound by how
// fast the weight streams from memory. MKL's sgemm reaches a third to a half of this machine's
// bandwidth at these shapes; this kernel reads each weight row once for up to 8 input rows.
// Every (row, output) sum runs in the same order whatever M is and however the rows are grouped
// (one 8-lane accumulator over K, then its lanes, then the tail), and never depends on memory
// alignment, so a row's result is the same alone or in a batch.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "decoder_layers.h"  // hsum
#include "few_rows.h"

#ifdef MF_STEP_AVX2
#define MF_AVX2 1
#endif

namespace {

#ifdef MF_AVX2
using mfsdk::step::hsum;
#endif

// out[r * N] = sum_k x[r * K + k] * w[k] for R (1 to 3) input rows. Four 8-lane accumulators per row
// keep four FMA chains in flight (one chain made a single row latency-bound: 16 against 21 GB/s);
// three rows take 12 of AVX2's 16 registers, and each weight vector loaded serves all three.
template <int R>
inline void rows_dot(const float* w, const float* x, int64_t K, float* out, int64_t N) {
  int64_t k = 0;
  float total[R];
#ifdef MF_AVX2
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int a = 0; a < 4; ++a) acc[r][a] = _mm256_setzero_ps();
  for (; k + 32 <= K; k += 32)
    for (int a = 0; a < 4; ++a) {
      const __m256 wv = _mm256_loadu_ps(w + k + 8 * a);
      for (int r = 0; r < R; ++r) acc[r][a] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * K + k + 8 * a), acc[r][a]);
    }
  for (; k + 8 <= K; k += 8) {
    const __m256 wv = _mm256_loadu_ps(w + k);
    for (int r = 0; r < R; ++r) acc[r][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * K + k), acc[r][0]);
  }
  for (int r = 0; r < R; ++r)
    total[r] = hsum(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3])));
#else
  for (int r = 0; r < R; ++r) total[r] = 0.f;
#endif
  for (; k < K; ++k)
    for (int r = 0; r < R; ++r) total[r] += x[r * K + k] * w[k];
  for (int r = 0; r < R; ++r) out[r * N] = total[r];
}

at::Tensor few_rows_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "few_rows_linear: x [M, K], weight [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.is_contiguous() &&
                  weight.is_contiguous(),
              "few_rows_linear: contiguous float32 inputs");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  TORCH_CHECK(bias.numel() == 0 || (bias.numel() == N && bias.scalar_type() == at::kFloat && bias.is_contiguous()),
              "few_rows_linear: bias must be empty or float32 [N]");
  at::Tensor out = at::empty({M, N}, x.options());
  const mfsdk::FewRowsWeight w{weight.data_ptr<float>(), bias.numel() ? bias.data_ptr<float>() : nullptr, N,
                               out.data_ptr<float>()};
  mfsdk::few_rows_products(x.data_ptr<float>(), M, K, &w, 1);
  return out;
}

}  // namespace

void mfsdk::few_rows_products(const float* xp, int64_t M, int64_t K, const FewRowsWeight* ws, int64_t count) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += ws[i].N;
  // each task gets about 2^18 multiply-adds: small layers run on the calling thread
  const int64_t grain = std::max<int64_t>(16, (int64_t{1} << 18) / std::max<int64_t>(1, K * M));
  // More than two rows: each pair of input rows goes over a block of weight rows (64 KB, in L2) while the
  // pair stays in L1, instead of every pair for each weight row, which re-read all the rows (36 KB for 16
  // rows of 576, 96 KB of 1536: more than L1) once per weight row. At 9-16 rows this made SmolLM2's
  // products 10-25% faster, on par with MKL's sgemm for its layers and 25% faster for its head. The sums
  // themselves are the same.
  const int64_t block = M <= 2 ? 1 : std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, K));
  // rows three at a time, the rest in pairs (four left: two pairs), never a single row after others
  const int64_t triples_end = M % 3 == 1 && M >= 4 ? M - 4 : M - M % 3;
  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t first = 0, i = 0;  // weight i holds the group's rows [first, first + N_i)
    for (; first + ws[i].N <= begin; ++i) first += ws[i].N;
    for (int64_t row = begin; row < end;) {
      while (row >= first + ws[i].N) first += ws[i++].N;
      const int64_t n0 = row - first, N = ws[i].N, count = std::min({block, N - n0, end - row});
      float* op = ws[i].out;
      int64_t m = 0;
      for (; m < triples_end; m += 3)
        for (int64_t n = n0; n < n0 + count; ++n) rows_dot<3>(ws[i].w + n * K, xp + m * K, K, op + m * N + n, N);
      for (; m + 2 <= M; m += 2)
        for (int64_t n = n0; n < n0 + count; ++n) rows_dot<2>(ws[i].w + n * K, xp + m * K, K, op + m * N + n, N);
      if (m < M)
        for (int64_t n = n0; n < n0 + count; ++n) rows_dot<1>(ws[i].w + n * K, xp + m * K, K, op + m * N + n, N);
      if (ws[i].bias != nullptr)
        for (int64_t n = n0; n < n0 + count; ++n)
          for (int64_t r = 0; r < M; ++r) op[r * N + n] += ws[i].bias[n];
      row += count;
    }
  });
}


TORCH_LIBRARY_FRAGMENT(mfsdk, m) { m.def("few_rows_linear(Tensor x, Tensor weight, Tensor bias) -> Tensor"); }

TORCH_LIBRARY_IMPL(mfsdk, CPU, m) { m.impl("few_rows_linear", &few_rows_linear); }
