// Float32 products of a few input rows with a weight: out [M, N] = x [M, K] @ weight [N, K].T (+ bias).
//
// Decoding multiplies one to a few rows per step by every weight, so the product is bound by how
// fast the weight streams from memory, and from a few rows on by the multiply-adds. MKL's sgemm reaches
// a third to a half of this machine's bandwidth at these shapes.
//
// Order of the sums, which never depends on memory alignment or the thread count: from two rows on, each
// (row, output) sum is one 8-lane accumulator over K (8 values at a time), then its lanes, then the tail in
// order, whatever M is and however the rows are grouped, so a row's result is the same in every batch of
// two or more rows. Where the 16-lane tiles are on (a CPU with AVX-512, use_wide_products), batches of
// wide_from_rows rows or more (the SDK's WIDE_FROM_ROWS: 8 on Intel CPUs, 48 elsewhere) sum each output in their
// order instead (one 16-lane accumulator, the tail
// masked into the same lanes, then the lanes), the same in every such batch. A single row keeps four
// accumulators over 32 values at a time (then the 8-value tail into the first, the four added pairwise, the
// lanes, the tail): one accumulator makes its chain of dependent adds the limit instead of memory (28 against
// 23 ms for SmolLM2's products, one thread).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

#include "decoder_layers.h"  // hsum
#include "few_rows.h"

#ifdef MF_STEP_AVX2
#define MF_AVX2 1
#endif

namespace {

#ifdef MF_AVX2
using mfsdk::step::hsum;
#endif

// out[r * N + c] = sum_k x[r * K + k] * w[c * K + k] for R input rows and C weight rows, each sum in the
// order above. R x C accumulators, each weight vector loaded once for the R rows and each input vector
// once for the C weights: at 4 x 3 that is 7 loads for 12 multiply-adds (the kernel this replaced loaded
// 16 for 12, and reached half the multiply-add rate). ``next``: C weight rows that come later, pulled
// into L2 while these compute, this call taking the cache lines whose index modulo ``parts`` is
// ``part`` (the calls of one tile over several row groups share them out): the hardware prefetcher alone
// follows C interleaved rows poorly (SmolLM2's products at 16 rows: 95 against 62 ms, one thread).
template <int R, int C>
inline void tile(const float* w, const float* x, int64_t K, float* out, int64_t N, const float* next, int part,
                 int parts) {
  float total[R][C];
  int64_t k = 0;
#ifdef MF_AVX2
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  auto eight = [&](int64_t at) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(w + c * K + at);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * K + at);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  };
  int turn = 0;  // (k / 16) % parts, counted: a division every 16 values made 16-row products ~15% slower
  for (; k + 16 <= K; k += 16) {
    if (next != nullptr) {
      if (turn == part)
        for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(next + c * K + k), _MM_HINT_T1);
      if (++turn == parts) turn = 0;
    }
    eight(k);
    eight(k + 8);
  }
  for (; k + 8 <= K; k += 8) eight(k);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) total[r][c] = hsum(acc[r][c]);
#else
  (void)next, (void)part, (void)parts;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) total[r][c] = 0.f;
#endif
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float t = total[r][c];
      for (int64_t kk = k; kk < K; ++kk) t += x[r * K + kk] * w[c * K + kk];
      out[r * N + c] = t;
    }
}

// out[0] = x . w for one row (the single-row order above): four 8-lane accumulators keep four FMA chains in flight.
inline void one_row_dot(const float* w, const float* x, int64_t K, float* out) {
  int64_t k = 0;
  float total = 0.f;
#ifdef MF_AVX2
  __m256 acc[4];
  for (int a = 0; a < 4; ++a) acc[a] = _mm256_setzero_ps();
  for (; k + 32 <= K; k += 32)
    for (int a = 0; a < 4; ++a)
      acc[a] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8 * a), _mm256_loadu_ps(x + k + 8 * a), acc[a]);
  for (; k + 8 <= K; k += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), acc[0]);
  total = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
  for (; k < K; ++k) total += x[k] * w[k];
  *out = total;
}

// tile<rows, C> for 1 to 4 rows
template <int C>
inline void rows_tile(int64_t rows, const float* w, const float* x, int64_t K, float* out, int64_t N,
                      const float* next, int part, int parts) {
  switch (rows) {
    case 4: tile<4, C>(w, x, K, out, N, next, part, parts); break;
    case 3: tile<3, C>(w, x, K, out, N, next, part, parts); break;
    case 2: tile<2, C>(w, x, K, out, N, next, part, parts); break;
    default: tile<1, C>(w, x, K, out, N, next, part, parts); break;
  }
}

constexpr int64_t kTileRows = 4, kTileWeights = 3;
constexpr int64_t kAhead = 6;  // tiles between the one computing and the one being pulled into L2

// The cache lines of weight rows [from, to) (contiguous), shared out in order over ``calls`` tile calls: take() gives
// the next call its share, to pull into L2 while it computes.
class Upcoming {
 public:
  Upcoming(const float* w, int64_t K, int64_t from, int64_t to, int64_t calls)
      : at_(reinterpret_cast<const char*>(w + from * K)),
        left_(from < to ? (to - from) * K * 4 / 64 : 0),
        share_((left_ + calls - 1) / std::max<int64_t>(calls, 1)) {}

  // where the next call's lines start, and how many
  std::pair<const char*, int64_t> take() {
    const int64_t lines = std::min(share_, left_);
    const char* start = at_;
    at_ += 64 * lines;
    left_ -= lines;
    return {start, lines};
  }

 private:
  const char* at_;
  int64_t left_, share_;
};

// ``lines`` cache lines (64 bytes each) from ``at`` into L2.
inline void prefetch_lines(const char* at, int64_t lines) {
#ifdef MF_AVX2
  for (int64_t line = 0; line < lines; ++line) _mm_prefetch(at + 64 * line, _MM_HINT_T1);
#else
  (void)at, (void)lines;
#endif
}

// out[:, n0:n1] of one weight (rows n0 to n1) for all M rows. One row: each weight row in turn, read
// sequentially. More: tiles of three weight rows, each through every group of four input rows while it
// sits in L1, the tile kAhead tiles later pulled into L2 meanwhile, a share of it per group; past 16 rows (the rows
// no longer fit in L1 beside the tile) a block of weight rows sits in L2 and each group goes over it while the next
// block comes in, a share of its lines before each tile of every group (when only the first group pulled the next
// tiles in, a few tiles ahead, it waited on memory while the others computed from L2: SmolLM2's products with the
// 8-lane tiles, one Emerald Rapids core, 32 rows 116 -> 106 ms, 64 rows 205 -> 189; fewer rows keep their scheme).
void weight_rows(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* out, int64_t n0,
                 int64_t n1) {
  if (M == 1) {
    for (int64_t n = n0; n < n1; ++n) one_row_dot(w + n * K, x, K, out + n);
    return;
  }
  const int64_t groups = (M + kTileRows - 1) / kTileRows;
  if (M <= 16) {
    for (int64_t n = n0; n < n1; n += kTileWeights) {
      const int64_t end = std::min(n1, n + kTileWeights), ahead = n + kAhead * kTileWeights;
      const float* next = ahead + kTileWeights <= n1 ? w + ahead * K : nullptr;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t m = g * kTileRows, rows = std::min(kTileRows, M - m);
        if (end - n == kTileWeights)
          rows_tile<kTileWeights>(rows, w + n * K, x + m * K, K, out + m * N + n, N, next, static_cast<int>(g),
                                  static_cast<int>(groups));
        else
          for (int64_t r = n; r < end; ++r) rows_tile<1>(rows, w + r * K, x + m * K, K, out + m * N + r, N, nullptr, 0, 1);
      }
    }
    return;
  }
  const int64_t block = std::max<int64_t>(kTileWeights, (int64_t{1} << 17) / (4 * K) / kTileWeights * kTileWeights);
  for (int64_t b = n0; b < n1; b += block) {
    const int64_t b_end = std::min(n1, b + block);
    Upcoming upcoming(w, K, b_end, std::min(n1, b_end + block), groups * ((b_end - b + kTileWeights - 1) / kTileWeights));
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t m = g * kTileRows, rows = std::min(kTileRows, M - m);
      int64_t n = b;
      for (; n + kTileWeights <= b_end; n += kTileWeights) {
        const float* next = b == n0 && g == 0 && n + (kAhead + 1) * kTileWeights <= b_end  // the first block's
                                ? w + (n + kAhead * kTileWeights) * K  // tiles come kAhead ahead
                                : nullptr;
        const auto [ahead, lines] = upcoming.take();
        prefetch_lines(ahead, lines);
        rows_tile<kTileWeights>(rows, w + n * K, x + m * K, K, out + m * N + n, N, next, 0, 1);
      }
      for (; n < b_end; ++n) {
        const auto [ahead, lines] = upcoming.take();
        prefetch_lines(ahead, lines);
        rows_tile<1>(rows, w + n * K, x + m * K, K, out + m * N + n, N, nullptr, 0, 1);
      }
    }
  }
}

#ifdef MF_AVX2
#define MF_AVX512 __attribute__((target("avx512f")))

// The tile above with 16-lane accumulators: out[r * N + c] = sum_k x[r * K + k] * w[c * K + k], each sum one
// accumulator over K (16 values at a time, the tail through a masked load into the same lanes), then its lanes.
// One step of 16 values at ``at`` (``lanes``: which of them). GCC keeps the R x C accumulators in registers
// only with the small loops unrolled (without, it stored them to the stack every step: 2.4x slower).
#define MF_UNROLL _Pragma("GCC unroll 8")
#define MF_SIXTEEN(at, lanes)                                                                   \
  {                                                                                             \
    __m512 wv[C];                                                                               \
    MF_UNROLL for (int c = 0; c < C; ++c) wv[c] = _mm512_maskz_loadu_ps(lanes, w + c * K + (at)); \
    MF_UNROLL for (int r = 0; r < R; ++r) {                                                     \
      const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + r * K + (at));                         \
      MF_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);  \
    }                                                                                           \
  }

// sums[a] = the sum of accumulator a's 16 lanes for Count (up to 16) accumulators, added in pairs of lanes
// (i, i + 8), then (i, i + 4), (i, i + 2), (i, i + 1) as _mm512_reduce_add_ps does, but in four rounds of shuffles
// and adds for all of them at once (a reduction each took a tenth of the 16-lane product's time). A missing
// partner in a round is the vector itself: its lanes end up unused.
template <int Count>
MF_AVX512 __attribute__((always_inline)) inline void sum_lanes16(const __m512* a, float* sums) {
  constexpr int S = (Count + 1) / 2, T = (S + 1) / 2, U = (T + 1) / 2;
  __m512 s[S], t[T], u[U];
  _Pragma("GCC unroll 8") for (int i = 0; i < S; ++i) {  // s[i]: lanes 0-7 accumulator 2i's (i, i + 8) sums, 8-15 2i + 1's
    const __m512 p = a[2 * i], q = 2 * i + 1 < Count ? a[2 * i + 1] : p;
    s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(p, q, 0x44), _mm512_shuffle_f32x4(p, q, 0xEE));
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < T; ++i) {  // t[i]: 128-bit block k accumulator 4i + k's (i, i + 4) sums
    const __m512 p = s[2 * i], q = 2 * i + 1 < S ? s[2 * i + 1] : p;
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(p, q, 0x88), _mm512_shuffle_f32x4(p, q, 0xDD));
  }
  _Pragma("GCC unroll 2") for (int i = 0; i < U; ++i) {  // u[i]: block k accumulator 8i + k's, 8i + 4 + k's (i, i + 2) sums
    const __m512 p = t[2 * i], q = 2 * i + 1 < T ? t[2 * i + 1] : p;
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(p, q, 0x44), _mm512_shuffle_ps(p, q, 0xEE));
  }
  const __m512 p = u[0], q = U > 1 ? u[U - 1] : p;
  alignas(64) float lanes[16];  // lane 4k + j: accumulator 4j + k's sum
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_shuffle_ps(p, q, 0x88), _mm512_shuffle_ps(p, q, 0xDD)));
  _Pragma("GCC unroll 16") for (int i = 0; i < Count; ++i) sums[i] = lanes[4 * (i % 4) + i / 4];
}

// ``ahead``: ``lines`` cache lines (64 bytes each) from there into L2, one per step of 16 values and the rest after
// them (all at the start, or two per step, SmolLM2's products at 16 and 32 rows took 4-10% longer).
template <int R, int C>
MF_AVX512 inline void tile16(const float* w, const float* x, int64_t K, float* out, int64_t N, const char* ahead,
                             int64_t lines) {
  __m512 acc[R][C];
  MF_UNROLL for (int r = 0; r < R; ++r) MF_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t k = 0, line = 0;
  for (; k + 16 <= K; k += 16) {
    if (line < lines) _mm_prefetch(ahead + 64 * line++, _MM_HINT_T1);
    MF_SIXTEEN(k, 0xFFFF)
  }
  for (; line < lines; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T1);
  if (k < K) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (K - k)) - 1);
    MF_SIXTEEN(k, tail)
  }
  __m512 flat[R * C];  // (copied: taking acc's address kept it in memory throughout)
  MF_UNROLL for (int r = 0; r < R; ++r) MF_UNROLL for (int c = 0; c < C; ++c) flat[r * C + c] = acc[r][c];
  float sums[R * C];
  sum_lanes16<(R * C < 16 ? R * C : 16)>(flat, sums);
  if constexpr (R * C > 16) sum_lanes16<R * C - 16>(flat + 16, sums + 16);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r * N + c] = sums[r * C + c];
}
#undef MF_SIXTEEN
#undef MF_UNROLL

template <int C>
MF_AVX512 inline void rows_tile16(int64_t rows, const float* w, const float* x, int64_t K, float* out, int64_t N,
                                  const char* ahead, int64_t lines) {
  switch (rows) {
    case 4: tile16<4, C>(w, x, K, out, N, ahead, lines); break;
    case 3: tile16<3, C>(w, x, K, out, N, ahead, lines); break;
    case 2: tile16<2, C>(w, x, K, out, N, ahead, lines); break;
    default: tile16<1, C>(w, x, K, out, N, ahead, lines); break;
  }
}

constexpr int64_t kWideWeights = 6;

// weight_rows for many rows with the 16-lane tiles: a block of weight rows (256 KB, a quarter of the smallest L2 of
// the CPUs with AVX-512 in use) sits in L2 while every group of four input rows goes over it, six weight rows at a
// time. Each block reads every input row once more: 128 KB blocks (42 rows of 768, 21 of 1,536) made that the limit
// at 2,048 rows and at an inner size of 1,536 (SmolLM2's products at 512 rows, one Emerald Rapids core: down
// projection 86 -> 112-116 GFLOP/s, 2,048 rows 113-121 -> 116-134).
// The next block streams into L2 while this one computes, its cache lines shared out evenly over every tile of every
// group, so memory and multiply-adds overlap; when only the first group pulled the block in (a few tiles ahead),
// that group waited on memory while the others computed from L2, and the weights' stream added to the time instead
// (SmolLM2's forward of 64 tokens, one Emerald Rapids core: a 56 ms part that did not depend on the token count).
// The first block of a call comes in through the first group's tiles, the same way, kAhead tiles ahead.
MF_AVX512 void weight_rows16(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* out, int64_t n0,
                             int64_t n1) {
  const int64_t block = std::max<int64_t>(kWideWeights, (int64_t{1} << 18) / (4 * K) / kWideWeights * kWideWeights);
  const int64_t groups = (M + kTileRows - 1) / kTileRows;
  for (int64_t b = n0; b < n1; b += block) {
    const int64_t b_end = std::min(n1, b + block);
    Upcoming upcoming(w, K, b_end, std::min(n1, b_end + block), groups * ((b_end - b + kWideWeights - 1) / kWideWeights));
    for (int64_t m = 0; m < M; m += kTileRows) {
      const int64_t rows = std::min(kTileRows, M - m);
      if (m + kTileRows < M) {  // the next group's rows into L2 while this one goes over the block
        const char* ahead = reinterpret_cast<const char*>(x + (m + kTileRows) * K);
        const int64_t bytes = std::min(kTileRows, M - m - kTileRows) * K * 4;
        for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(ahead + at, _MM_HINT_T1);
      }
      int64_t n = b;
      for (; n + kWideWeights <= b_end; n += kWideWeights) {
        if (b == n0 && m == 0 && n + (kAhead + 1) * kWideWeights <= b_end)  // the first block's tiles come
          prefetch_lines(reinterpret_cast<const char*>(w + (n + kAhead * kWideWeights) * K), kWideWeights * K / 16);
        const auto [ahead, lines] = upcoming.take();
        rows_tile16<kWideWeights>(rows, w + n * K, x + m * K, K, out + m * N + n, N, ahead, lines);
      }
      for (; n < b_end; ++n) {
        const auto [ahead, lines] = upcoming.take();
        rows_tile16<1>(rows, w + n * K, x + m * K, K, out + m * N + n, N, ahead, lines);
      }
    }
  }
}
#endif

// From how many rows products take the 16-lane tiles (0: never). use_wide_products sets it where the CPU has
// AVX-512 and torch uses it, to the SDK's WIDE_FROM_ROWS, the row count from which they are the faster.
std::atomic<int64_t> wide_from_rows{0};

bool wide_for(int64_t rows) {
  const int64_t from = wide_from_rows.load();
  return from > 0 && rows >= from;
}

// Every weight of ``ws`` times the M rows of x in one parallel region split over the weights' rows together,
// with the 16-lane tiles (``wide``) or the 8-lane ones; then the biases.
void products(const float* xp, int64_t M, int64_t K, const mfsdk::FewRowsWeight* ws, int64_t count, bool wide) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += ws[i].N;
  // each task gets about 2^18 multiply-adds: small layers run on the calling thread
  const int64_t grain = std::max<int64_t>(16, (int64_t{1} << 18) / std::max<int64_t>(1, K * M));
  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t first = 0, i = 0;  // weight i holds the group's rows [first, first + N_i)
    for (; first + ws[i].N <= begin; ++i) first += ws[i].N;
    for (int64_t row = begin; row < end; first += ws[i++].N) {
      const int64_t n0 = row - first, N = ws[i].N, n1 = std::min(N, end - first);
      float* op = ws[i].out;
#ifdef MF_AVX2
      if (wide)
        weight_rows16(xp, M, K, ws[i].w, N, op, n0, n1);
      else
#endif
        weight_rows(xp, M, K, ws[i].w, N, op, n0, n1);
      if (ws[i].bias != nullptr)
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t r = 0; r < M; ++r) op[r * N + n] += ws[i].bias[n];
      row = first + n1;
    }
  });
}

at::Tensor checked_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const char* op,
                           bool wide) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), op, ": x [M, K], weight [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.is_contiguous() &&
                  weight.is_contiguous(),
              op, ": contiguous float32 inputs");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  TORCH_CHECK(bias.numel() == 0 || (bias.numel() == N && bias.scalar_type() == at::kFloat && bias.is_contiguous()),
              op, ": bias must be empty or float32 [N]");
  at::Tensor out = at::empty({M, N}, x.options());
  const mfsdk::FewRowsWeight w{weight.data_ptr<float>(), bias.numel() ? bias.data_ptr<float>() : nullptr, N,
                               out.data_ptr<float>()};
  products(x.data_ptr<float>(), M, K, &w, 1, wide);
  return out;
}

bool has_avx512() {
#ifdef MF_AVX2
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// out = x @ weight.T (+ bias) for many rows (a prompt) on a CPU with AVX-512: each output in the 16-lane order of
// weight_rows16, the same whatever M is and however the rows are split.
at::Tensor many_rows_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(has_avx512(), "many_rows_linear: this CPU has no AVX-512 (or the op was built without AVX2)");
  return checked_product(x, weight, bias, "many_rows_linear", true);
}

at::Tensor few_rows_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return checked_product(x, weight, bias, "few_rows_linear", x.dim() == 2 && wide_for(x.size(0)));
}

void use_wide_products(int64_t from_rows) {
  TORCH_CHECK(from_rows >= 0, "use_wide_products: from_rows must be >= 0 (0: never), got ", from_rows);
  TORCH_CHECK(from_rows == 0 || has_avx512(),
              "use_wide_products: this CPU has no AVX-512 (or the op was built without AVX2)");
  wide_from_rows.store(from_rows);
}

}  // namespace

void mfsdk::few_rows_products(const float* xp, int64_t M, int64_t K, const FewRowsWeight* ws, int64_t count) {
  products(xp, M, K, ws, count, wide_for(M));
}

TORCH_LIBRARY_FRAGMENT(mfsdk, m) {
  m.def("few_rows_linear(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("many_rows_linear(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("use_wide_products(int from_rows) -> ()", &use_wide_products);
}

TORCH_LIBRARY_IMPL(mfsdk, CPU, m) {
  m.impl("few_rows_linear", &few_rows_linear);
  m.impl("many_rows_linear", &many_rows_linear);
}
