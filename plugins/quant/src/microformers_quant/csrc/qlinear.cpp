// Quantized linear kernels for microformers-quant (CPU; AVX2+FMA+F16C when compiled for it).
//
// Weight formats (row-major, one output feature per row, K = in_features), one traits struct each
// (Q4, Q8 below); every kernel is written once against those traits:
//   q4: uint8 [N, K/2]; each 32-value block is 16 bytes, byte j holding value j (low nibble) and
//       value j+16 (high nibble) -- ggml's layout. Value = scale[n, g] * q + min[n, g], q in 0..15,
//       scale/min float16 [N, K/group], group a multiple of 32.
//   q8: int8 [N, K]; value = scale[n, g] * q, scale float32 [N, K/group], group a multiple of 32
//       (group = K: one scale per output channel).
//
// Float activations, by the number of input rows M:
//   * M < gemm_rows: register-blocked row kernels. Each 32-value weight block is converted to float
//     once per chunk of up to 8 input rows and multiplied into all of them (M = 1: four independent
//     FMA chains on one row).
//   * M >= gemm_rows (prefill): a tile of weight rows is de-quantised to float once into a small
//     per-thread buffer (exactly the values dequantize() gives: q * scale, then + min, no FMA), and
//     one float matrix product (ATen's BLAS) multiplies it with all M rows.
// Integer activations (the *_i8 ops, llama.cpp's approach, and the *_i16 ops): x is quantized per 32
// values to int8 or int16 with one float scale; each weight block's dot product runs in integers
// (maddubs / madd), then one FMA per block. int16 keeps 15 bits of each block's range: the logits
// stay close to float activations' at about 1.4x their speed per layer.
// Output features are split over ATen's intra-op threads in every kernel. The *_many ops multiply one
// input by several weights of its size (q/k/v, gate/up), their output features split as one range.
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "decoder_layers.h"  // microformers-sdk's (microformers_sdk.native.INCLUDE_DIR): the decoder step's layer loop

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define MFQ_AVX2 1
#endif

namespace {

#ifdef MFQ_AVX2
using mfsdk::step::hsum;
#endif

// ---- the two weight formats -------------------------------------------------------------------

struct Q4 {
  using q_t = uint8_t;
  using s_t = at::Half;
  static constexpr bool kHasMin = true;
  static constexpr int64_t kBlockBytes = 16;  // bytes holding 32 values
  static constexpr at::ScalarType kQType = at::kByte;
  static constexpr at::ScalarType kSType = at::kHalf;
  static constexpr int64_t kValuesPerByte = 2;
  static float scale(s_t s) { return static_cast<float>(s); }
  static int value(const q_t* block, int j) { return j < 16 ? block[j] & 0x0F : block[j - 16] >> 4; }
#ifdef MFQ_AVX2
  // The block's 32 integers as floats: values 0-7, 8-15, 16-23, 24-31.
  static inline void load(const q_t* block, __m256 f[4]) {
    const __m128i m0f = _mm_set1_epi8(0x0F);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
    const __m128i lo = _mm_and_si128(raw, m0f);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m0f);
    f[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    f[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    f[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    f[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  }
  // Integer dot product of the block with 32 int8 inputs, as 8 float partial sums.
  static inline __m256 dot_i8(const q_t* block, const int8_t* x) {
    const __m128i m0f = _mm_set1_epi8(0x0F);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
    const __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m0f), _mm_and_si128(raw, m0f));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), _mm256_set1_epi16(1)));
  }
  // Integer dot product of the block with 32 int16 inputs in the order of permute_i16, as 8 float
  // partial sums, the upper four 256 times too large (undone once per row by finish_i16). The 16 bytes
  // are read into both halves as eight 16-bit words b[2k] | b[2k+1] << 8; masking each word to its
  // low nibble (lower half) or to bits 8-11 (upper half), before and after a 4-bit shift, yields all
  // 32 values in 16-bit lanes without widening shuffles. Products stay below 2^31 and every partial
  // sum below 2^24 before the factor 256, so the float conversion is exact.
  static inline __m256 dot_i16(const q_t* block, const int16_t* x) {
    const __m256i mask = _mm256_set_epi16(0x0F00, 0x0F00, 0x0F00, 0x0F00, 0x0F00, 0x0F00, 0x0F00, 0x0F00,
                                          0x000F, 0x000F, 0x000F, 0x000F, 0x000F, 0x000F, 0x000F, 0x000F);
    const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
    const __m256i low = _mm256_and_si256(raw, mask), high = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
    const __m256i a = _mm256_madd_epi16(low, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
    const __m256i b = _mm256_madd_epi16(high, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16)));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(a, b));
  }
  static inline __m256 finish_i16(__m256 acc) {
    return _mm256_mul_ps(acc, _mm256_set_ps(1.f / 256, 1.f / 256, 1.f / 256, 1.f / 256, 1.f, 1.f, 1.f, 1.f));
  }
  // 32 inputs in dot_i16's order: the even values 0-14, the odd 1-15, the even 16-30, the odd 17-31.
  static inline void permute_i16(int16_t* x) {
    int16_t natural[32];
    std::copy(x, x + 32, natural);
    for (int k = 0; k < 8; ++k) {
      x[k] = natural[2 * k];
      x[8 + k] = natural[2 * k + 1];
      x[16 + k] = natural[16 + 2 * k];
      x[24 + k] = natural[17 + 2 * k];
    }
  }
#endif
};

struct Q8 {
  using q_t = int8_t;
  using s_t = float;
  static constexpr bool kHasMin = false;
  static constexpr int64_t kBlockBytes = 32;
  static constexpr at::ScalarType kQType = at::kChar;
  static constexpr at::ScalarType kSType = at::kFloat;
  static constexpr int64_t kValuesPerByte = 1;
  static float scale(s_t s) { return s; }
  static int value(const q_t* block, int j) { return block[j]; }
#ifdef MFQ_AVX2
  static inline void load(const q_t* block, __m256 f[4]) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16));
    f[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a));
    f[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)));
    f[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    f[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
  }
  static inline __m256 dot_i8(const q_t* block, const int8_t* x) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static inline __m256 dot_i16(const q_t* block, const int16_t* x) {
    const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
    const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16)));
    const __m256i a = _mm256_madd_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
    const __m256i b = _mm256_madd_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16)));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(a, b));
  }
  static inline __m256 finish_i16(__m256 acc) { return acc; }
  static inline void permute_i16(int16_t*) {}
#endif
};

// A weight of format F viewed as raw pointers; mins is null for Q8.
template <class F>
struct Weight {
  const typename F::q_t* q;
  const typename F::s_t* scales;
  const typename F::s_t* mins;
  int64_t N, K, group;
  bool interleaved = false;  // the 8-row layout of the *_x8 kernels (see "8-row interleaved weights")
  int64_t groups() const { return K / group; }
  const typename F::q_t* row(int64_t n) const { return q + n * (K / F::kValuesPerByte); }
  // Where row n's scale (and min) of group g is, in either layout.
  int64_t scale_index(int64_t n, int64_t g) const {
    return interleaved ? ((n / 8) * groups() + g) * 8 + n % 8 : n * groups() + g;
  }
  // Block b of row n in ggml order: in place for the plain layout, gathered into tmp for the interleaved.
  const typename F::q_t* block(int64_t n, int64_t b, typename F::q_t* tmp) const {
    if (!interleaved) return row(n) + b * F::kBlockBytes;
    const int64_t chunks = K / F::kValuesPerByte / 4, per_block = F::kBlockBytes / 4;
    for (int64_t j = 0; j < per_block; ++j)
      std::memcpy(tmp + 4 * j, q + (((n / 8) * chunks + b * per_block + j) * 8 + n % 8) * 4, 4);
    return tmp;
  }
};

// Output rows per parallel task: a layer is split over threads only where each thread gets about
// 2^18 multiply-adds, so tiny layers run inline instead of paying for waking (or, on a busy
// machine, waiting for) another thread.
inline int64_t row_grain(int64_t K, int64_t M) {
  return std::max<int64_t>(16, (int64_t{1} << 18) / std::max<int64_t>(1, K * M));
}

// sum over groups of min[g] * xsum[g]: the 4-bit minimum's contribution to one output.
template <class F>
inline float min_term(const Weight<F>& w, int64_t n, const float* xsum) {
  float total = 0.f;
  if constexpr (F::kHasMin) {
    const int64_t G = w.groups();
    const typename F::s_t* mins = w.mins + n * G;
    int64_t g = 0;
#ifdef MFQ_AVX2
    // eight float16 minimums at a time: a serial scalar chain here cost a third of a 576-wide row
    __m256 acc = _mm256_setzero_ps();
    for (; g + 8 <= G; g += 8) {
      const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + g)));
      acc = _mm256_fmadd_ps(m, _mm256_loadu_ps(xsum + g), acc);
    }
    total = hsum(acc);
#endif
    for (; g < G; ++g) total += F::scale(mins[g]) * xsum[g];
  }
  return total;
}

// The scale of each successive 32-value block of a row (a group spans `per` blocks), without a
// division per block.
template <class F>
struct GroupScales {
  const typename F::s_t* scale_ptr;
  int64_t per;
  int64_t left = per;
  float next() {
    const float s = F::scale(*scale_ptr);
    if (--left == 0) ++scale_ptr, left = per;
    return s;
  }
};

// ---- float activations: R input rows against weight row n, converting each block once -----------

template <class F, int R>
inline void rows_dot(const Weight<F>& w, int64_t n, const float* x, const float* xsum, float* out, int64_t N) {
  const int64_t K = w.K, G = w.groups();
  const typename F::q_t* q = w.row(n);
  const typename F::s_t* sc = w.scales + n * G;
#ifdef MFQ_AVX2
  const int64_t per = w.group / 32;
  if constexpr (R == 1) {
    // One row: each block's dot product is summed unscaled in two halves, then scaled by one FMA
    // each; two blocks per iteration keep four accumulation chains in flight.
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const int64_t blocks = K / 32;
    GroupScales<F> scales{sc, per};
    auto block = [&](int64_t bk, __m256& lo, __m256& hi) {
      const int64_t k = bk * 32;
      __m256 f[4];
      F::load(q + bk * F::kBlockBytes, f);
      const __m256 s = _mm256_set1_ps(scales.next());
      const __m256 ta = _mm256_fmadd_ps(f[2], _mm256_loadu_ps(x + k + 16), _mm256_mul_ps(f[0], _mm256_loadu_ps(x + k)));
      const __m256 tb = _mm256_fmadd_ps(f[3], _mm256_loadu_ps(x + k + 24), _mm256_mul_ps(f[1], _mm256_loadu_ps(x + k + 8)));
      lo = _mm256_fmadd_ps(ta, s, lo);
      hi = _mm256_fmadd_ps(tb, s, hi);
    };
    int64_t bk = 0;
    for (; bk + 2 <= blocks; bk += 2) {
      block(bk, acc[0], acc[1]);
      block(bk + 1, acc[2], acc[3]);
    }
    if (bk < blocks) block(bk, acc[0], acc[1]);
    const __m256 total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    out[n] = hsum(total) + min_term(w, n, xsum);
    return;
  }
  // Independent FMA chains per row, so 8 are in flight (FMA latency x throughput on this class of CPU).
  constexpr int A = R == 2 ? 4 : (R == 4 ? 2 : 1);
  __m256 acc[R][A];
  for (int r = 0; r < R; ++r)
    for (int a = 0; a < A; ++a) acc[r][a] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const __m256 s = _mm256_set1_ps(F::scale(sc[g]));
    for (int64_t b = 0; b < per; ++b) {
      const int64_t k = (g * per + b) * 32;
      __m256 f[4];
      F::load(q + (k / 32) * F::kBlockBytes, f);
      for (int i = 0; i < 4; ++i) f[i] = _mm256_mul_ps(f[i], s);
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[r][i % A] = _mm256_fmadd_ps(f[i], _mm256_loadu_ps(x + r * K + k + 8 * i), acc[r][i % A]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 total = acc[r][0];
    for (int a = 1; a < A; ++a) total = _mm256_add_ps(total, acc[r][a]);
    out[r * N + n] = hsum(total) + min_term(w, n, xsum + r * G);
  }
#else
  for (int r = 0; r < R; ++r) {
    float total = 0.f;
    for (int64_t g = 0; g < G; ++g) {
      float dot = 0.f;
      for (int64_t k = g * w.group; k < (g + 1) * w.group; k += 32)
        for (int j = 0; j < 32; ++j)
          dot += static_cast<float>(F::value(q + (k / 32) * F::kBlockBytes, j)) * x[r * K + k + j];
      total += F::scale(sc[g]) * dot;
    }
    out[r * N + n] = total + min_term(w, n, xsum + r * G);
  }
#endif
}

// Per-group sums of each input row (only the 4-bit minimum needs them).
template <class F>
std::vector<float> group_sums(const float* x, int64_t M, const Weight<F>& w) {
  std::vector<float> xsum;
  if constexpr (F::kHasMin) {
    const int64_t G = w.groups();
    xsum.assign(M * G, 0.f);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t g = 0; g < G; ++g) {
        float s = 0.f;
        for (int64_t k = g * w.group; k < (g + 1) * w.group; ++k) s += x[m * w.K + k];
        xsum[m * G + g] = s;
      }
  }
  return xsum;
}

// Calls fn(i, n) for every output row n of every weight ws[i], the rows of all weights split over
// threads as one range: several products of the same input (q/k/v, gate/up) share one parallel
// region instead of paying for one each.
template <class F, class Fn>
void for_each_output_row(const std::vector<Weight<F>>& ws, int64_t grain, const Fn& fn) {
  std::vector<int64_t> start(ws.size() + 1, 0);
  for (size_t i = 0; i < ws.size(); ++i) start[i + 1] = start[i] + ws[i].N;
  at::parallel_for(0, start.back(), grain, [&](int64_t begin, int64_t end) {
    size_t i = std::upper_bound(start.begin(), start.end(), begin) - start.begin() - 1;
    for (int64_t row = begin; row < end; ++row) {
      while (row >= start[i + 1]) ++i;
      fn(i, row - start[i]);
    }
  });
}

// outs[i] [M, ws[i].N] = x [M, K] @ ws[i].T, every weight of the same K and group.
template <class F>
void linear_rows(const float* x, int64_t M, const std::vector<Weight<F>>& ws, const std::vector<float*>& outs) {
  const std::vector<float> xsum = group_sums(x, M, ws[0]);
  const int64_t G = ws[0].groups(), K = ws[0].K;
  for_each_output_row(ws, row_grain(K, M), [&](size_t i, int64_t n) {
    const Weight<F>& w = ws[i];
    float* out = outs[i];
    int64_t m = 0;
    const float* xs = xsum.data();
    for (; m + 8 <= M; m += 8) rows_dot<F, 8>(w, n, x + m * K, xs + m * G, out + m * w.N, w.N);
    if (m + 4 <= M) rows_dot<F, 4>(w, n, x + m * K, xs + m * G, out + m * w.N, w.N), m += 4;
    if (m + 2 <= M) rows_dot<F, 2>(w, n, x + m * K, xs + m * G, out + m * w.N, w.N), m += 2;
    if (m < M) rows_dot<F, 1>(w, n, x + m * K, xs + m * G, out + m * w.N, w.N);
  });
}

// ---- float activations, many rows: de-quantise a tile of weight rows, then one float GEMM ---------

// Rows [n0, n0 + rows) of the weight as float32 into dst [rows, K]: q * scale (+ min), rounded after
// each operation exactly as the torch definition (dequantize_q4/q8 in kernels.py) rounds.
template <class F>
void dequantize_rows(const Weight<F>& w, int64_t n0, int64_t rows, float* dst) {
  const int64_t K = w.K, G = w.groups(), per = w.group / 32;
  typename F::q_t gathered[F::kBlockBytes];
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = n0 + i;
    float* d = dst + i * K;
    for (int64_t g = 0; g < G; ++g) {
      const float s = F::scale(w.scales[w.scale_index(n, g)]);
      const float mn = F::kHasMin ? F::scale(w.mins[w.scale_index(n, g)]) : 0.f;
      for (int64_t b = 0; b < per; ++b) {
        const int64_t k = (g * per + b) * 32;
        const typename F::q_t* block = w.block(n, k / 32, gathered);
#ifdef MFQ_AVX2
        __m256 f[4];
        F::load(block, f);
        for (int j = 0; j < 4; ++j) {
          __m256 v = _mm256_mul_ps(f[j], _mm256_set1_ps(s));
          if constexpr (F::kHasMin) v = _mm256_add_ps(v, _mm256_set1_ps(mn));
          _mm256_storeu_ps(d + k + 8 * j, v);
        }
#else
        for (int j = 0; j < 32; ++j) {
          const float v = static_cast<float>(F::value(block, j)) * s;  // -ffp-contract=off: no FMA here
          d[k + j] = F::kHasMin ? v + mn : v;
        }
#endif
      }
    }
  }
}

template <class F>
void linear_gemm(const at::Tensor& x2d, const Weight<F>& w, at::Tensor& out2d) {
  // Few rows: a tile of ~256 KB of float weights stays in a core's L2 while the GEMM streams the
  // inputs past it. Many rows: each GEMM call re-packs all of x, so tiles grow to 512 weight rows
  // (measured with bench/quant.py --layers: 112-row tiles cost 1.3x float32 F.linear at 512 rows,
  // 512-row tiles 1.0x). Every thread still gets at least one tile.
  const int64_t M = x2d.size(0), threads = at::get_num_threads();
  int64_t tile = std::max<int64_t>(std::max<int64_t>(16, (65536 / w.K) / 16 * 16), std::min<int64_t>(512, 4 * M));
  tile = std::max<int64_t>(16, std::min<int64_t>(tile, ((w.N + threads - 1) / threads + 15) / 16 * 16));
  const int64_t tiles = (w.N + tile - 1) / tile;
  const at::Tensor xt = x2d.t();
  // The tiles run ATen ops (empty, mm_out) on OpenMP worker threads: give them the caller's
  // thread-local state (inference mode, grad mode), or writing into an inference tensor fails there.
  const at::ThreadLocalState caller_state;
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    const at::ThreadLocalStateGuard state_guard(caller_state);
    at::Tensor buffer = at::empty({tile, w.K}, x2d.options());
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * tile, rows = std::min(tile, w.N - n0);
      dequantize_rows(w, n0, rows, buffer.data_ptr<float>());
      at::Tensor dst = out2d.narrow(0, n0, rows);  // out2d is [N, M]: a tile's rows are contiguous
      at::mm_out(dst, buffer.narrow(0, 0, rows), xt);
    }
  });
}

// ---- int8 activations ----------------------------------------------------------------------------

// x quantized per 32 values to A (int8: +-127, int16: +-32767) with one float scale per block.
template <class A>
void quantize_row(const float* x, int64_t K, A* q, float* d) {
  constexpr float kMax = sizeof(A) == 1 ? 127.f : 32767.f;
  for (int64_t b = 0; b < K / 32; ++b) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[b * 32 + j]));
    const float scale = amax / kMax;
    const float inv = scale > 0.f ? 1.f / scale : 0.f;
    d[b] = scale;
    for (int j = 0; j < 32; ++j) q[b * 32 + j] = static_cast<A>(std::nearbyint(x[b * 32 + j] * inv));
  }
}

template <class F, class A>
inline float row_dot_int(const Weight<F>& w, int64_t n, const A* xq, const float* xd, const float* xsum) {
  const int64_t G = w.groups(), per = w.group / 32;
  const typename F::q_t* q = w.row(n);
  const typename F::s_t* sc = w.scales + n * G;
#ifdef MFQ_AVX2
  // two blocks per iteration: two independent accumulation chains
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t blocks = G * per;
  auto dot = [&](int64_t b) {
    if constexpr (sizeof(A) == 1) return F::dot_i8(q + b * F::kBlockBytes, xq + b * 32);
    else return F::dot_i16(q + b * F::kBlockBytes, xq + b * 32);
  };
  GroupScales<F> scales{sc, per};
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    acc0 = _mm256_fmadd_ps(dot(b), _mm256_set1_ps(scales.next() * xd[b]), acc0);
    acc1 = _mm256_fmadd_ps(dot(b + 1), _mm256_set1_ps(scales.next() * xd[b + 1]), acc1);
  }
  if (b < blocks) acc0 = _mm256_fmadd_ps(dot(b), _mm256_set1_ps(scales.next() * xd[b]), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  if constexpr (sizeof(A) == 2) acc = F::finish_i16(acc);
  return hsum(acc) + min_term(w, n, xsum);
#else
  float total = 0.f;
  int64_t b = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = 0; i < per; ++i, ++b) {
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += F::value(q + b * F::kBlockBytes, j) * xq[b * 32 + j];
      total += F::scale(sc[g]) * xd[b] * static_cast<float>(dot);
    }
  return total + min_term(w, n, xsum);
#endif
}

template <class F, class A>
void linear_int(const float* x, int64_t M, const std::vector<Weight<F>>& ws, const std::vector<float*>& outs) {
  const int64_t K = ws[0].K, G = ws[0].groups();
  std::vector<A> xq(M * K);
  std::vector<float> xd(M * K / 32);
  for (int64_t m = 0; m < M; ++m) quantize_row<A>(x + m * K, K, xq.data() + m * K, xd.data() + m * K / 32);
#ifdef MFQ_AVX2
  if constexpr (sizeof(A) == 2)
    for (int64_t b = 0; b < M * K / 32; ++b) F::permute_i16(reinterpret_cast<int16_t*>(xq.data()) + b * 32);
#endif
  const std::vector<float> xsum = group_sums(x, M, ws[0]);
  for_each_output_row(ws, row_grain(K, M), [&](size_t i, int64_t n) {
    const Weight<F>& w = ws[i];
    for (int64_t m = 0; m < M; ++m)
      outs[i][m * w.N + n] = row_dot_int<F, A>(w, n, xq.data() + m * K, xd.data() + m * K / 32,
                                               F::kHasMin ? xsum.data() + m * G : nullptr);
  });
}

// ---- 8-row interleaved weights, int8 activations (the *_x8 ops) --------------------------------
//
// Rows in groups of 8; within a group each row's bytes are cut into 4-byte chunks and chunk c of rows
// 0-7 lies side by side: row 8i + r, chunk c at byte ((i * C + c) * 8 + r) * 4 (C = chunks per row);
// scales and mins [N/8, G, 8]. One 32-byte load then holds four values of each of 8 rows, so
// maddubs against four inputs broadcast to every lane leaves row r's partial dot product in lane r:
// one conversion and one FMA per block serve 8 output rows, where the plain layout spends one per
// row. The same bytes as the plain layout, permuted (kernels.interleave_rows does it in torch).
#ifdef MFQ_AVX2
// 8 rows' scales (or mins) of group g as floats.
inline __m256 load8(const at::Half* s) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))); }
inline __m256 load8(const float* s) { return _mm256_loadu_ps(s); }
inline __m256i broadcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

// Block b of 8 rows against R quantized input rows: each row's integer dot product in its lane. With two
// planes (P = 2) the input is q + r / 254 (see quantize_planes) and the lane holds 254 * (w . q) + w . r.
template <class F, int R, int P>
inline void block_dots8(const typename F::q_t* chunk, const int8_t* const* xq, int64_t k, int64_t plane,
                        __m256i dots[R]) {
  // int16 pairs summed into int32 lanes; with two planes the first plane's pairs weighted by 254 in the same madd
  const __m256i ones = _mm256_set1_epi16(1), weight254 = _mm256_set1_epi16(254);
  __m256i planes[P][R];
  if constexpr (F::kHasMin) {  // q4: bytes hold values j (low nibble) and j + 16 (high), all 0-15
    const __m256i m0f = _mm256_set1_epi8(0x0F);
    __m256i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * j));
      lo[j] = _mm256_and_si256(v, m0f);
      hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
    }
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < R; ++r) {
        const int8_t* x = xq[r] + p * plane + k;
        // eight products of at most 2 * 15 * 127 each: the int16 sums cannot saturate; summed as a tree
        __m256i t[8];
        for (int j = 0; j < 4; ++j) {
          t[j] = _mm256_maddubs_epi16(lo[j], broadcast4(x + 4 * j));
          t[4 + j] = _mm256_maddubs_epi16(hi[j], broadcast4(x + 16 + 4 * j));
        }
        for (int j = 0; j < 4; ++j) t[j] = _mm256_add_epi16(t[j], t[4 + j]);
        const __m256i sum = _mm256_add_epi16(_mm256_add_epi16(t[0], t[1]), _mm256_add_epi16(t[2], t[3]));
        planes[p][r] = _mm256_madd_epi16(sum, p + 1 < P ? weight254 : ones);
      }
  } else {  // q8: signed bytes; |w| * sign(x, w) keeps maddubs' unsigned operand, pairs below 2^15
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < R; ++r) planes[p][r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * j));
      const __m256i magnitude = _mm256_abs_epi8(v);
      for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) {
          const __m256i x = broadcast4(xq[r] + p * plane + k + 4 * j);
          const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x, v));
          planes[p][r] = _mm256_add_epi32(planes[p][r], _mm256_madd_epi16(pairs, p + 1 < P ? weight254 : ones));
        }
    }
  }
  for (int r = 0; r < R; ++r) {
    if constexpr (P == 1) {
      dots[r] = planes[0][r];
    } else {  // the first plane was weighted by 254 in its madd: 254 * a + b in int32 (below 2^28 for q8's largest)
      dots[r] = _mm256_add_epi32(planes[0][r], planes[1][r]);
    }
  }
}

// Blocks ahead whose weight bytes are prefetched: one input row leaves the loads' latency exposed (the hardware
// prefetcher alone kept one core at ~10 GB/s); with 4 to 32 blocks a SmolLM2 step took 8-10% less time, measured.
constexpr int64_t kPrefetchBlocks = 16;
// out[r][0..7] = rows 8i..8i+7 of w against input rows r < R (quantized xq/xd, float group sums xsum).
template <class F, int R, int P>
inline void rows8_int8(const Weight<F>& w, int64_t i, const int8_t* const* xq, int64_t plane, const float* const* xd,
                       const float* const* xsum, float* const* out) {
  const int64_t G = w.groups(), per = w.group / 32;
  const typename F::q_t* q = w.q + i * (w.K / F::kValuesPerByte) * 8;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t g = 0, b = 0; g < G; ++g) {
    const __m256 s = load8(w.scales + (i * G + g) * 8);
    for (int64_t end = b + per; b < end; ++b) {
      const char* ahead = reinterpret_cast<const char*>(q + (b + kPrefetchBlocks) * F::kBlockBytes * 8);
      for (int line = 0; line < F::kBlockBytes * 8 * static_cast<int>(sizeof(typename F::q_t)); line += 64)
        _mm_prefetch(ahead + line, _MM_HINT_T0);
      __m256i dots[R];
      block_dots8<F, R, P>(q + b * F::kBlockBytes * 8, xq, b * 32, plane, dots);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[r]), _mm256_mul_ps(s, _mm256_set1_ps(xd[r][b])), acc[r]);
    }
    if constexpr (F::kHasMin) {
      const __m256 mn = load8(w.mins + (i * G + g) * 8);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(mn, _mm256_set1_ps(xsum[r][g]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out[r], acc[r]);
}
#endif

// x quantized per 32 values to P int8 planes: q1 = round(x / d), d = max|x| / 127, and for P = 2 the
// rest in steps of d / 254, q2 = round((x - d q1) / (d / 254)), |q2| <= 127: x = d (q1 + q2 / 254) within
// d / 508, the precision of int16 activations (max|x| / 32767 per step) at two int8 dot products' cost.
// Planes of row m at q + (m * P + p) * K; d (divided by 254 for P = 2) at scale[m * K / 32 + b].
template <int P>
void quantize_planes(const float* x, int64_t K, int8_t* q, float* scale) {
  quantize_row<int8_t>(x, K, q, scale);
  if constexpr (P == 2) {
    int8_t* rest = q + K;
    for (int64_t b = 0; b < K / 32; ++b) {
      const float d = scale[b], step = d / 254.f, inv = d > 0.f ? 254.f / d : 0.f;
      for (int j = 0; j < 32; ++j) {
        const int64_t k = b * 32 + j;
        const float r = (x[k] - d * static_cast<float>(q[k])) * inv;
        rest[k] = static_cast<int8_t>(std::max(-127.f, std::min(127.f, std::nearbyint(r))));
      }
      scale[b] = step;
    }
  }
}

// outs[i] [M, ws[i].N] = x [M, K] @ ws[i].T for interleaved weights, x quantized to P int8 planes per 32 values.
template <class F, int P>
void linear_x8(const float* x, int64_t M, const std::vector<Weight<F>>& ws, const std::vector<float*>& outs) {
  const int64_t K = ws[0].K, G = ws[0].groups(), plane = K;
  std::vector<int8_t> xq(M * P * K);
  std::vector<float> xd(M * K / 32);
  for (int64_t m = 0; m < M; ++m) quantize_planes<P>(x + m * K, K, xq.data() + m * P * K, xd.data() + m * K / 32);
  const std::vector<float> xsum = group_sums(x, M, ws[0]);
  std::vector<int64_t> start(ws.size() + 1, 0);  // groups of 8 rows of all weights as one range
  for (size_t i = 0; i < ws.size(); ++i) start[i + 1] = start[i] + ws[i].N / 8;
  const int64_t grain = std::max<int64_t>(2, row_grain(K, M) / 8);
  at::parallel_for(0, start.back(), grain, [&](int64_t begin, int64_t end) {
    size_t i = std::upper_bound(start.begin(), start.end(), begin) - start.begin() - 1;
    float tile[16][8];
    for (int64_t group = begin; group < end; ++group) {
      while (group >= start[i + 1]) ++i;
      const Weight<F>& w = ws[i];
      const int64_t gi = group - start[i];
#ifdef MFQ_AVX2
      for (int64_t m0 = 0; m0 < M; m0 += 16) {
        const int64_t rows = std::min<int64_t>(16, M - m0);
        const int8_t* xqs[16];
        const float *xds[16], *xss[16];
        float* tiles[16];
        for (int64_t r = 0; r < rows; ++r) {
          xqs[r] = xq.data() + (m0 + r) * P * K;
          xds[r] = xd.data() + (m0 + r) * K / 32;
          xss[r] = F::kHasMin ? xsum.data() + (m0 + r) * G : nullptr;
          tiles[r] = tile[r];
        }
        int64_t r = 0;
        // up to 8 input rows per pass over the unpacked block (measured: 8 beat 4 by 7-10%, 4 beat 2 by 18%)
        for (; r + 8 <= rows; r += 8) rows8_int8<F, 8, P>(w, gi, xqs + r, plane, xds + r, xss + r, tiles + r);
        for (; r + 4 <= rows; r += 4) rows8_int8<F, 4, P>(w, gi, xqs + r, plane, xds + r, xss + r, tiles + r);
        for (; r + 2 <= rows; r += 2) rows8_int8<F, 2, P>(w, gi, xqs + r, plane, xds + r, xss + r, tiles + r);
        if (r < rows) rows8_int8<F, 1, P>(w, gi, xqs + r, plane, xds + r, xss + r, tiles + r);
        for (int64_t rr = 0; rr < rows; ++rr) std::copy_n(tile[rr], 8, outs[i] + (m0 + rr) * w.N + gi * 8);
      }
#else
      typename F::q_t gathered[F::kBlockBytes];
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < 8; ++r) {
          const int64_t n = gi * 8 + r;
          float total = 0.f;
          for (int64_t b = 0; b < K / 32; ++b) {
            const typename F::q_t* block = w.block(n, b, gathered);
            int32_t dot = 0;
            for (int j = 0; j < 32; ++j) {
              const int64_t k = m * P * K + b * 32 + j;
              dot += F::value(block, j) * (P == 1 ? xq[k] : 254 * xq[k] + xq[k + K]);
            }
            total += F::scale(w.scales[w.scale_index(n, b * 32 / w.group)]) * xd[m * K / 32 + b] * static_cast<float>(dot);
          }
          if constexpr (F::kHasMin)
            for (int64_t g = 0; g < G; ++g) total += F::scale(w.mins[w.scale_index(n, g)]) * xsum[m * G + g];
          outs[i][m * w.N + n] = total;
        }
#endif
    }
  });
}

// ---- the ops ---------------------------------------------------------------------------------------

// outs[i] [M, ws[i].N] = x [M, K] @ ws[i].T through the row kernels of the given activation bits.
template <class F>
void row_products(const float* x, int64_t M, const std::vector<Weight<F>>& ws, const std::vector<float*>& outs,
                  int64_t act_bits) {
  if (ws[0].interleaved && act_bits == 16) linear_x8<F, 2>(x, M, ws, outs);
  else if (ws[0].interleaved) linear_x8<F, 1>(x, M, ws, outs);
  else if (act_bits == 8) linear_int<F, int8_t>(x, M, ws, outs);
  else if (act_bits == 16) linear_int<F, int16_t>(x, M, ws, outs);
  else linear_rows(x, M, ws, outs);
}


template <class F>
Weight<F> checked_weight(const char* name, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor* mins,
                         int64_t group, bool interleaved = false) {
  TORCH_CHECK(qweight.dim() == 2 && qweight.is_contiguous() && qweight.scalar_type() == F::kQType, name,
              ": qweight must be a contiguous 2-D ", F::kQType, " tensor");
  const int64_t N = qweight.size(0), K = qweight.size(1) * F::kValuesPerByte;
  TORCH_CHECK(group > 0 && group % 32 == 0 && K % group == 0, name,
              ": group size must be a multiple of 32 dividing in_features");
  TORCH_CHECK(scales.dim() == 2 && scales.size(0) == N && scales.size(1) == K / group && scales.is_contiguous() &&
                  scales.scalar_type() == F::kSType,
              name, ": scales must be contiguous ", F::kSType, " [out_features, in_features / group]");
  if (mins != nullptr)
    TORCH_CHECK(mins->sizes() == scales.sizes() && mins->is_contiguous() && mins->scalar_type() == F::kSType, name,
                ": mins must be contiguous and of the scales' dtype and shape");
  TORCH_CHECK(!interleaved || N % 8 == 0, name, ": an interleaved weight needs a multiple of 8 output features");
  return {qweight.data_ptr<typename F::q_t>(), scales.data_ptr<typename F::s_t>(),
          mins != nullptr ? mins->data_ptr<typename F::s_t>() : nullptr, N, K, group, interleaved};
}

// x @ w.T for every weight of ws (all of x's input size and one group size), one output each.
template <class F>
std::vector<at::Tensor> linear(const char* name, const at::Tensor& x, const std::vector<Weight<F>>& ws, int64_t act_bits,
                               int64_t gemm_rows) {
  TORCH_CHECK(!ws.empty(), name, ": no weights");
  TORCH_CHECK(act_bits == 32 || act_bits == 16 || act_bits == 8, name, ": act_bits must be 32, 16 or 8");
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), name, ": input must be contiguous float32");
  const int64_t K = ws[0].K;
  for (const Weight<F>& w : ws)
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == w.K && w.group == ws[0].group, name, ": input has ", x.size(-1),
                " features, a weight expects ", w.K, " (group ", w.group, "; all weights must share both)");
  const int64_t M = x.numel() / K;
  std::vector<at::Tensor> outs;
  for (const Weight<F>& w : ws)
    TORCH_CHECK(w.interleaved == ws[0].interleaved, name, ": weights computed together must share their layout");
  TORCH_CHECK(!ws[0].interleaved || act_bits != 32, name, ": interleaved weights take integer activations");
  if (act_bits == 32 && M >= gemm_rows && M > 0) {
    for (const Weight<F>& w : ws) {  // each GEMM is split over threads by tiles already
      at::Tensor out_t = at::empty({w.N, M}, x.options());
      linear_gemm(x.view({M, K}), w, out_t);
      auto sizes = x.sizes().vec();
      sizes.back() = w.N;
      outs.push_back(out_t.t().contiguous().view(sizes));
    }
    return outs;
  }
  std::vector<float*> out_ptrs;
  for (const Weight<F>& w : ws) {
    auto sizes = x.sizes().vec();
    sizes.back() = w.N;
    outs.push_back(at::empty(sizes, x.options()));
    out_ptrs.push_back(outs.back().data_ptr<float>());
  }
  row_products(x.data_ptr<float>(), M, ws, out_ptrs, act_bits);
  return outs;
}

template <class F>
at::Tensor linear_one(const char* name, const at::Tensor& x, const Weight<F>& w, int64_t act_bits, int64_t gemm_rows) {
  return linear(name, x, std::vector<Weight<F>>{w}, act_bits, gemm_rows)[0];
}

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins,
                     int64_t group, int64_t gemm_rows) {
  return linear_one("q4_linear", x, checked_weight<Q4>("q4_linear", qweight, scales, &mins, group), 32, gemm_rows);
}

at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group,
                     int64_t gemm_rows) {
  return linear_one("q8_linear", x, checked_weight<Q8>("q8_linear", qweight, scales, nullptr, group), 32, gemm_rows);
}

at::Tensor q4_linear_i8(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                        const at::Tensor& mins, int64_t group) {
  return linear_one("q4_linear_i8", x, checked_weight<Q4>("q4_linear_i8", qweight, scales, &mins, group), 8, 0);
}

at::Tensor q4_linear_i16(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                         const at::Tensor& mins, int64_t group) {
  return linear_one("q4_linear_i16", x, checked_weight<Q4>("q4_linear_i16", qweight, scales, &mins, group), 16, 0);
}

at::Tensor q8_linear_i8(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group) {
  return linear_one("q8_linear_i8", x, checked_weight<Q8>("q8_linear_i8", qweight, scales, nullptr, group), 8, 0);
}

at::Tensor q8_linear_i16(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group) {
  return linear_one("q8_linear_i16", x, checked_weight<Q8>("q8_linear_i16", qweight, scales, nullptr, group), 16, 0);
}

// Several weights against the same x in one call (q/k/v, gate/up): one parallel region, x quantized once.
std::vector<at::Tensor> q4_linear_many(const at::Tensor& x, at::TensorList qweights, at::TensorList scales,
                                       at::TensorList mins, int64_t group, int64_t act_bits, int64_t gemm_rows) {
  TORCH_CHECK(qweights.size() == scales.size() && qweights.size() == mins.size(),
              "q4_linear_many: qweights, scales and mins must have one entry per weight");
  std::vector<Weight<Q4>> ws;
  for (size_t i = 0; i < qweights.size(); ++i)
    ws.push_back(checked_weight<Q4>("q4_linear_many", qweights[i], scales[i], &mins[i], group));
  return linear("q4_linear_many", x, ws, act_bits, gemm_rows);
}

std::vector<at::Tensor> q8_linear_many(const at::Tensor& x, at::TensorList qweights, at::TensorList scales,
                                       int64_t group, int64_t act_bits, int64_t gemm_rows) {
  TORCH_CHECK(qweights.size() == scales.size(), "q8_linear_many: qweights and scales must have one entry per weight");
  std::vector<Weight<Q8>> ws;
  for (size_t i = 0; i < qweights.size(); ++i)
    ws.push_back(checked_weight<Q8>("q8_linear_many", qweights[i], scales[i], nullptr, group));
  return linear("q8_linear_many", x, ws, act_bits, gemm_rows);
}

// The interleaved layout's ops: every input row quantized (act_bits 8: one int8 plane, 16: two).
std::vector<at::Tensor> q4_linear_x8(const at::Tensor& x, at::TensorList qweights, at::TensorList scales,
                                     at::TensorList mins, int64_t group, int64_t act_bits) {
  TORCH_CHECK(qweights.size() == scales.size() && qweights.size() == mins.size(),
              "q4_linear_x8: qweights, scales and mins must have one entry per weight");
  TORCH_CHECK(act_bits == 8 || act_bits == 16, "q4_linear_x8: act_bits must be 8 or 16");
  std::vector<Weight<Q4>> ws;
  for (size_t i = 0; i < qweights.size(); ++i)
    ws.push_back(checked_weight<Q4>("q4_linear_x8", qweights[i], scales[i], &mins[i], group, true));
  return linear("q4_linear_x8", x, ws, act_bits, 0);
}

std::vector<at::Tensor> q8_linear_x8(const at::Tensor& x, at::TensorList qweights, at::TensorList scales, int64_t group,
                                     int64_t act_bits) {
  TORCH_CHECK(qweights.size() == scales.size(), "q8_linear_x8: qweights and scales must have one entry per weight");
  TORCH_CHECK(act_bits == 8 || act_bits == 16, "q8_linear_x8: act_bits must be 8 or 16");
  std::vector<Weight<Q8>> ws;
  for (size_t i = 0; i < qweights.size(); ++i)
    ws.push_back(checked_weight<Q8>("q8_linear_x8", qweights[i], scales[i], nullptr, group, true));
  return linear("q8_linear_x8", x, ws, act_bits, 0);
}

template <class F>
at::Tensor dequantize(const Weight<F>& w) {
  at::Tensor out = at::empty({w.N, w.K}, at::TensorOptions().dtype(at::kFloat));
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, w.N, row_grain(w.K, 1), [&](int64_t begin, int64_t end) {
    dequantize_rows(w, begin, end - begin, dst + begin * w.K);
  });
  return out;
}

at::Tensor q4_dequantize(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& mins, int64_t group) {
  return dequantize(checked_weight<Q4>("q4_dequantize", qweight, scales, &mins, group));
}

at::Tensor q8_dequantize(const at::Tensor& qweight, const at::Tensor& scales, int64_t group) {
  return dequantize(checked_weight<Q8>("q8_dequantize", qweight, scales, nullptr, group));
}


// ---- a whole decoder step: every layer of a pre-norm Llama-style decoder for one new token per row ---
//
// Per layer: h += o(attention(rope(q, k, v of rmsnorm(h)))), then h += down(silu(gate) * up of
// rmsnorm(h)); the new key/value go into the static cache storage at the row's position and the query
// attends over the visible stored positions. One call per token instead of ~15 ATen/Python calls per
// layer; the products are the same kernels as q4_linear/q8_linear, the rest (layer loop, norms, rotary,
// attention) the SDK's decoder_layers.h, which its float step runs too.

// One quantized linear layer of the step: q4 when qweight is uint8 (mins used), q8 when int8.
struct StepLinear {
  bool q4;
  bool interleaved;
  Weight<Q4> w4;
  Weight<Q8> w8;
  const float* bias;  // null: none
  int64_t act_bits;
  int64_t N() const { return q4 ? w4.N : w8.N; }
};

// meta: (group, activation bits, interleaved)
StepLinear step_linear(const at::Tensor* t, const int64_t* meta) {
  const int64_t group = meta[0], act_bits = meta[1];
  StepLinear l{};
  l.q4 = t[0].scalar_type() == at::kByte;
  l.interleaved = meta[2] != 0;
  TORCH_CHECK(!l.interleaved || act_bits == 8 || act_bits == 16,
              "decoder_step: interleaved weights take int8 or int16 activations");
  if (l.q4) l.w4 = checked_weight<Q4>("decoder_step", t[0], t[1], &t[2], group, l.interleaved);
  else l.w8 = checked_weight<Q8>("decoder_step", t[0], t[1], nullptr, group, l.interleaved);
  if (t[3].numel() > 0) {
    TORCH_CHECK(t[3].numel() == l.N() && t[3].scalar_type() == at::kFloat && t[3].is_contiguous(),
                "decoder_step: a bias must be contiguous float32 [out_features]");
    l.bias = t[3].data_ptr<float>();
  }
  l.act_bits = act_bits;
  return l;
}

// outs[i] [M, N_i] = x [M, K] @ W_i.T (+ bias) for each layer of the group (all of one format, group size
// and activation bits), written into the step's own buffers. Many rows (M >= gemm_rows, float
// activations) go through linear()'s de-quantised tiles, as the layers' own calls do.
template <class F>
void step_products_of(const float* x, int64_t M, const std::vector<Weight<F>>& ws, const std::vector<float*>& outs,
                      int64_t act_bits, int64_t gemm_rows) {
  if (M < gemm_rows || act_bits != 32) {
    row_products(x, M, ws, outs, act_bits);
    return;
  }
  const at::Tensor rows = at::from_blob(const_cast<float*>(x), {M, ws[0].K}, at::TensorOptions().dtype(at::kFloat));
  const std::vector<at::Tensor> results = linear("decoder_step", rows, ws, act_bits, gemm_rows);
  for (size_t i = 0; i < ws.size(); ++i) std::copy_n(results[i].data_ptr<float>(), M * ws[i].N, outs[i]);
}

void step_products(const float* x, int64_t M, const std::vector<StepLinear>& ls, const std::vector<float*>& outs,
                   int64_t max_int_rows, int64_t gemm_rows) {
  for (const StepLinear& l : ls)
    TORCH_CHECK(l.q4 == ls[0].q4 && l.act_bits == ls[0].act_bits && l.interleaved == ls[0].interleaved,
                "decoder_step: layers computed together must share weight format, layout and activation bits");
  // interleaved weights quantize every input; the plain layout only up to max_int_rows rows
  const int64_t act_bits = M <= max_int_rows || ls[0].interleaved ? ls[0].act_bits : 32;
  if (ls[0].q4) {
    std::vector<Weight<Q4>> ws;
    for (const StepLinear& l : ls) ws.push_back(l.w4);
    step_products_of(x, M, ws, outs, act_bits, gemm_rows);
  } else {
    std::vector<Weight<Q8>> ws;
    for (const StepLinear& l : ls) ws.push_back(l.w8);
    step_products_of(x, M, ws, outs, act_bits, gemm_rows);
  }
  for (size_t i = 0; i < ls.size(); ++i)
    if (ls[i].bias != nullptr)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < ls[i].N(); ++n) outs[i][m * ls[i].N() + n] += ls[i].bias[n];
}

// One layer's norms and quantized products, checked once (QuantStepWeights::prepared).
struct PreparedLayer {
  const float *in_norm, *post_norm;
  std::vector<StepLinear> qkv, o, gate_up, down;
};

// One layer as mfsdk::step::run_layers calls it: its prepared parts and this call's row counts.
struct QuantLayer {
  const PreparedLayer& p;
  int64_t M, max_int_rows, gemm_rows;
  const float* in_norm = p.in_norm;
  const float* post_norm = p.post_norm;
  void qkv(const float* x, float* q, float* k, float* v) const {
    step_products(x, M, p.qkv, {q, k, v}, max_int_rows, gemm_rows);
  }
  void o(const float* x, float* out) const { step_products(x, M, p.o, {out}, max_int_rows, gemm_rows); }
  void gate_up(const float* x, float* gate, float* up) const {
    step_products(x, M, p.gate_up, {gate, up}, max_int_rows, gemm_rows);
  }
  void down(const float* x, float* out) const { step_products(x, M, p.down, {out}, max_int_rows, gemm_rows); }
};

// The final norm and the language-model head after the last layer, when the step is given them:
// head = [final norm weight, qweight, scales, mins, bias], head_meta = [group, activation bits, interleaved].
at::Tensor final_logits(const at::Tensor& h, const std::vector<at::Tensor>& head, const std::vector<int64_t>& head_meta, double eps,
                        int64_t max_int_rows, int64_t gemm_rows) {
  TORCH_CHECK(head.size() == 5 && head_meta.size() == 3, "decoder_step: head needs 5 tensors and 3 ints");
  const int64_t M = h.size(0), H = h.size(1);
  TORCH_CHECK(head[0].numel() == H && head[0].scalar_type() == at::kFloat && head[0].is_contiguous(),
              "decoder_step: the final norm weight must be contiguous float32 [hidden]");
  const StepLinear lm = step_linear(head.data() + 1, head_meta.data());
  TORCH_CHECK((lm.q4 ? lm.w4.K : lm.w8.K) == H, "decoder_step: the head's in_features must be the hidden size");
  std::vector<float> normed(M * H);
  mfsdk::step::rms_norm_rows(h.data_ptr<float>(), M, H, head[0].data_ptr<float>(), static_cast<float>(eps),
                             normed.data());
  at::Tensor logits = at::empty({M, lm.N()}, h.options());
  step_products(normed.data(), M, {lm}, {logits.data_ptr<float>()}, max_int_rows, gemm_rows);
  return logits;
}

struct QuantStep;
// params: per layer [in norm, (qweight, scales, mins, bias) x 7, post norm]; meta: per layer (group, activation
// bits, interleaved) x 7; head: [final norm, qweight, scales, mins, bias] or empty; head_meta: its 3 ints
using QuantStepWeights = mfsdk::step::StepWeights<QuantStep>;

at::Tensor decoder_step(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                        const at::Tensor& visible, at::TensorList caches, int64_t position,
                        const c10::intrusive_ptr<QuantStepWeights>& weights, double eps, double scaling, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, double head_eps, int64_t max_int_rows, int64_t gemm_rows) {
  const std::vector<at::Tensor>&params = weights->params, &head = weights->head;
  const std::vector<int64_t>&meta = weights->meta, &head_meta = weights->head_meta;
  constexpr int64_t kPerLayer = 30;  // in norm, (qweight, scales, mins, bias) x 7, post norm
  const int64_t layers = static_cast<int64_t>(params.size()) / kPerLayer;
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(params.size()) == layers * kPerLayer &&
                  static_cast<int64_t>(meta.size()) == layers * 21 && static_cast<int64_t>(caches.size()) == 2 * layers,
              "decoder_step: ", layers, " layers need ", kPerLayer, " tensors, 21 ints and 2 cache tensors each");
  const mfsdk::step::StepShape shape = mfsdk::step::check_step_inputs(
      "decoder_step", hidden, cos, sin, visible, caches, position, scaling, heads, kv_heads, head_dim);
  const int64_t M = shape.rows, H = shape.hidden, q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  // the per-layer buffers are sized by the first layer; a layer of other sizes is refused
  const int64_t intermediate = step_linear(params.data() + 1 + 4 * 4, meta.data() + 3 * 4).N();
  const auto prepared = weights->prepared<std::vector<PreparedLayer>>([&] {
    std::vector<PreparedLayer> built;
    for (int64_t layer = 0; layer < layers; ++layer) {
      const at::Tensor* p = params.data() + layer * kPerLayer;
      const int64_t* mt = meta.data() + layer * 21;
      TORCH_CHECK(p[0].numel() == H && p[29].numel() == H && p[0].scalar_type() == at::kFloat &&
                      p[29].scalar_type() == at::kFloat && p[0].is_contiguous() && p[29].is_contiguous(),
                  "decoder_step: layer ", layer, ": norm weights must be contiguous float32 [hidden]");
      std::vector<StepLinear> ls;
      for (int i = 0; i < 7; ++i) ls.push_back(step_linear(p + 1 + 4 * i, mt + 3 * i));
      TORCH_CHECK(ls[0].N() == q_width && ls[1].N() == kv_width && ls[2].N() == kv_width && ls[3].N() == H &&
                      ls[4].N() == intermediate && ls[5].N() == intermediate && ls[6].N() == H,
                  "decoder_step: layer ", layer, ": projection sizes do not match the head counts and the first layer");
      built.push_back({p[0].data_ptr<float>(), p[29].data_ptr<float>(), {ls[0], ls[1], ls[2]}, {ls[3]}, {ls[4], ls[5]},
                       {ls[6]}});
    }
    return built;
  });
  at::Tensor h = hidden.clone();
  mfsdk::step::run_layers(shape, h.data_ptr<float>(), caches, intermediate, static_cast<float>(eps), [&](int64_t layer) {
    return QuantLayer{(*prepared)[layer], M, max_int_rows, gemm_rows};
  });
  const at::Tensor result = h.narrow(0, M - shape.result_rows(), shape.result_rows());  // a prompt: its last row
  return head.empty() ? result : final_logits(result, head, head_meta, head_eps, max_int_rows, gemm_rows);
}

}  // namespace

TORCH_LIBRARY(mfquant, m) {
  m.def("q4_linear(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group, int gemm_rows) -> Tensor");
  m.def("q8_linear(Tensor x, Tensor qweight, Tensor scales, int group, int gemm_rows) -> Tensor");
  m.def("q4_linear_i8(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group) -> Tensor");
  m.def("q8_linear_i8(Tensor x, Tensor qweight, Tensor scales, int group) -> Tensor");
  m.def("q4_linear_i16(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group) -> Tensor");
  m.def("q8_linear_i16(Tensor x, Tensor qweight, Tensor scales, int group) -> Tensor");
  m.def("q4_linear_many(Tensor x, Tensor[] qweights, Tensor[] scales, Tensor[] mins, int group, int act_bits, "
        "int gemm_rows) -> Tensor[]");
  m.def("q8_linear_many(Tensor x, Tensor[] qweights, Tensor[] scales, int group, int act_bits, int gemm_rows) -> "
        "Tensor[]");
  m.def("q4_linear_x8(Tensor x, Tensor[] qweights, Tensor[] scales, Tensor[] mins, int group, int act_bits) -> "
        "Tensor[]");
  m.def("q8_linear_x8(Tensor x, Tensor[] qweights, Tensor[] scales, int group, int act_bits) -> Tensor[]");
  m.def("q4_dequantize(Tensor qweight, Tensor scales, Tensor mins, int group) -> Tensor");
  m.def("q8_dequantize(Tensor qweight, Tensor scales, int group) -> Tensor");
  m.class_<QuantStepWeights>("StepWeights")
      .def(torch::init<std::vector<at::Tensor>, std::vector<int64_t>, std::vector<at::Tensor>, std::vector<int64_t>>());
  m.def("decoder_step(Tensor hidden, Tensor cos, Tensor sin, Tensor visible, Tensor(a!)[] caches, int position, "
        "__torch__.torch.classes.mfquant.StepWeights weights, float eps, float scaling, int heads, int kv_heads, "
        "int head_dim, float head_eps, int max_int_rows, int gemm_rows) -> Tensor");
}

TORCH_LIBRARY_IMPL(mfquant, CPU, m) {
  m.impl("q4_linear", &q4_linear);
  m.impl("q8_linear", &q8_linear);
  m.impl("q4_linear_i8", &q4_linear_i8);
  m.impl("q8_linear_i8", &q8_linear_i8);
  m.impl("q4_linear_i16", &q4_linear_i16);
  m.impl("q8_linear_i16", &q8_linear_i16);
  m.impl("q4_linear_many", &q4_linear_many);
  m.impl("q8_linear_many", &q8_linear_many);
  m.impl("q4_linear_x8", &q4_linear_x8);
  m.impl("q8_linear_x8", &q8_linear_x8);
  m.impl("q4_dequantize", &q4_dequantize);
  m.impl("q8_dequantize", &q8_dequantize);
  m.impl("decoder_step", &decoder_step);
}
