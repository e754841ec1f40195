// Quantized linear kernels for microformers-quant (CPU; AVX2+FMA+F16C when compiled for it).
//
// Weight formats (row-major, one output feature per row, K = in_features):
//   q4: uint8 [N, K/2]; each 32-value block is 16 bytes, byte j holding value j (low nibble) and
//       value j+16 (high nibble) -- ggml's layout. Value = scale[n, g] * q + min[n, g], q in 0..15,
//       scale/min float16 [N, K/group], group a multiple of 32.
//   q8: int8 [N, K]; value = scale[n, g] * q, scale float32 [N, K/group], group a multiple of 32
//       (group = K: one scale per output channel).
// Activations stay float32. Rows of the output are split over ATen's intra-op threads.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define MFQ_AVX2 1
#endif

namespace {

inline float half_to_float(const at::Half h) { return static_cast<float>(h); }

#ifdef MFQ_AVX2
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
#endif

// One output value of a q4 row: sum over groups of scale * dot(q, x) + min * sum(x).
// Four independent accumulators (the scale folded into the converted weights) keep the FMA units
// busy instead of waiting on one dependency chain per group.
inline void q4_row_dot(const uint8_t* q, const float* x, const at::Half* sc, const at::Half* mn,
                       const float* xsum, int64_t K, int64_t group, float* out) {
  const int64_t G = K / group;
  float mins = 0.f;
  for (int64_t g = 0; g < G; ++g) mins += half_to_float(mn[g]) * xsum[g];
#ifdef MFQ_AVX2
  const __m128i m0f = _mm_set1_epi8(0x0F);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  const int64_t blocks_per_group = group / 32;
  for (int64_t g = 0; g < G; ++g) {
    const __m256 s = _mm256_set1_ps(half_to_float(sc[g]));
    for (int64_t b = 0; b < blocks_per_group; ++b) {
      const int64_t k = (g * blocks_per_group + b) * 32;
      __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k / 2));
      __m128i lo = _mm_and_si128(raw, m0f);
      __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m0f);
      __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), s);
      __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), s);
      __m256 f2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), s);
      __m256 f3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), s);
      acc0 = _mm256_fmadd_ps(f0, _mm256_loadu_ps(x + k), acc0);
      acc1 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(x + k + 8), acc1);
      acc2 = _mm256_fmadd_ps(f2, _mm256_loadu_ps(x + k + 16), acc2);
      acc3 = _mm256_fmadd_ps(f3, _mm256_loadu_ps(x + k + 24), acc3);
    }
  }
  *out = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3))) + mins;
#else
  float total = 0.f;
  for (int64_t g = 0; g < G; ++g) {
    float dot = 0.f;
    for (int64_t k = g * group; k < (g + 1) * group; k += 32) {
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = q[k / 2 + j];
        dot += static_cast<float>(byte & 0x0F) * x[k + j] + static_cast<float>(byte >> 4) * x[k + j + 16];
      }
    }
    total += half_to_float(sc[g]) * dot;
  }
  *out = total + mins;
#endif
}

inline void q8_row_dot(const int8_t* q, const float* x, const float* sc, int64_t K, int64_t group, float* out) {
#ifdef MFQ_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  const int64_t G = K / group;
  for (int64_t g = 0; g < G; ++g) {
    const __m256 s = _mm256_set1_ps(sc[g]);
    for (int64_t k = g * group; k < (g + 1) * group; k += 32) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k + 16));
      __m256 f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)), s);
      __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))), s);
      __m256 f2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s);
      __m256 f3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))), s);
      acc0 = _mm256_fmadd_ps(f0, _mm256_loadu_ps(x + k), acc0);
      acc1 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(x + k + 8), acc1);
      acc2 = _mm256_fmadd_ps(f2, _mm256_loadu_ps(x + k + 16), acc2);
      acc3 = _mm256_fmadd_ps(f3, _mm256_loadu_ps(x + k + 24), acc3);
    }
  }
  *out = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
#else
  float total = 0.f;
  const int64_t G = K / group;
  for (int64_t g = 0; g < G; ++g) {
    float dot = 0.f;
    for (int64_t k = g * group; k < (g + 1) * group; ++k) dot += static_cast<float>(q[k]) * x[k];
    total += sc[g] * dot;
  }
  *out = total;
#endif
}

void check_common(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale, int64_t group, int64_t K,
                  const char* name) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), name, ": input must be contiguous float32");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), name, ": weight must be a contiguous 2-D tensor");
  TORCH_CHECK(group % 32 == 0 && K % group == 0, name, ": group size must be a multiple of 32 dividing in_features");
  TORCH_CHECK(scale.dim() == 2 && scale.size(0) == w.size(0) && scale.size(1) == K / group && scale.is_contiguous(),
              name, ": scales must be contiguous [out_features, in_features / group]");
  TORCH_CHECK(x.size(-1) == K, name, ": input has ", x.size(-1), " features, the weight expects ", K);
}

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                     const at::Tensor& mins, int64_t group) {
  const int64_t N = qweight.size(0);
  const int64_t K = qweight.size(1) * 2;
  check_common(x, qweight, scales, group, K, "q4_linear");
  TORCH_CHECK(qweight.scalar_type() == at::kByte, "q4_linear: qweight must be uint8");
  TORCH_CHECK(scales.scalar_type() == at::kHalf && mins.scalar_type() == at::kHalf && mins.sizes() == scales.sizes(),
              "q4_linear: scales and mins must be float16 of the same shape");
  const int64_t M = x.numel() / K;
  const int64_t G = K / group;
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  at::Tensor out = at::empty(out_sizes, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const uint8_t* wp = qweight.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* mp = mins.data_ptr<at::Half>();
  std::vector<float> xsum(M * G, 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.f;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) s += xp[m * K + k];
      xsum[m * G + g] = s;
    }
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t m = 0; m < M; ++m)
        q4_row_dot(wp + n * (K / 2), xp + m * K, sp + n * G, mp + n * G, xsum.data() + m * G, K, group,
                   op + m * N + n);
  });
  return out;
}

at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group) {
  const int64_t N = qweight.size(0);
  const int64_t K = qweight.size(1);
  check_common(x, qweight, scales, group, K, "q8_linear");
  TORCH_CHECK(qweight.scalar_type() == at::kChar, "q8_linear: qweight must be int8");
  TORCH_CHECK(scales.scalar_type() == at::kFloat, "q8_linear: scales must be float32");
  const int64_t M = x.numel() / K;
  const int64_t G = K / group;
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  at::Tensor out = at::empty(out_sizes, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int8_t* wp = qweight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t m = 0; m < M; ++m) q8_row_dot(wp + n * K, xp + m * K, sp + n * G, K, group, op + m * N + n);
  });
  return out;
}


// ---- int8 activations (llama.cpp's approach): x is quantized per 32 values to int8 with one float
// scale, and each weight block's dot product runs in integers (maddubs/madd), 4x fewer instructions.
struct QuantizedRow {
  std::vector<int8_t> q;   // [K]
  std::vector<float> d;    // [K/32] scale per 32 inputs
};

void quantize_row(const float* x, int64_t K, int8_t* q, float* d) {
  for (int64_t b = 0; b < K / 32; ++b) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[b * 32 + j]));
    const float scale = amax / 127.f;
    const float inv = scale > 0.f ? 1.f / scale : 0.f;
    d[b] = scale;
    for (int j = 0; j < 32; ++j) q[b * 32 + j] = static_cast<int8_t>(std::nearbyint(x[b * 32 + j] * inv));
  }
}

#ifdef MFQ_AVX2
inline __m256 block_dot_u4(const uint8_t* w, const int8_t* x) {
  const __m128i m0f = _mm_set1_epi8(0x0F);
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m0f), _mm_and_si128(raw, m0f));
  __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(p);
}

inline __m256 block_dot_s8(const int8_t* w, const int8_t* x) {
  __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)),
                                _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(p);
}
#endif

inline float q4_row_dot_i8(const uint8_t* q, const int8_t* xq, const float* xd, const at::Half* sc, const at::Half* mn,
                           const float* xsum, int64_t K, int64_t group) {
  const int64_t G = K / group, per = group / 32;
  float mins = 0.f;
  for (int64_t g = 0; g < G; ++g) mins += half_to_float(mn[g]) * xsum[g];
#ifdef MFQ_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (int64_t g = 0; g < G; ++g) {
    const float s = half_to_float(sc[g]);
    for (int64_t i = 0; i < per; ++i, ++b) {
      const __m256 f = block_dot_u4(q + b * 16, xq + b * 32);
      if (b & 1) acc1 = _mm256_fmadd_ps(f, _mm256_set1_ps(s * xd[b]), acc1);
      else acc0 = _mm256_fmadd_ps(f, _mm256_set1_ps(s * xd[b]), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + mins;
#else
  float total = 0.f;
  int64_t b = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = 0; i < per; ++i, ++b) {
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = q[b * 16 + j];
        dot += (byte & 0x0F) * xq[b * 32 + j] + (byte >> 4) * xq[b * 32 + j + 16];
      }
      total += half_to_float(sc[g]) * xd[b] * static_cast<float>(dot);
    }
  return total + mins;
#endif
}

inline float q8_row_dot_i8(const int8_t* q, const int8_t* xq, const float* xd, const float* sc, int64_t K,
                           int64_t group) {
  const int64_t G = K / group, per = group / 32;
#ifdef MFQ_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = 0; i < per; ++i, ++b) {
      const __m256 f = block_dot_s8(q + b * 32, xq + b * 32);
      if (b & 1) acc1 = _mm256_fmadd_ps(f, _mm256_set1_ps(sc[g] * xd[b]), acc1);
      else acc0 = _mm256_fmadd_ps(f, _mm256_set1_ps(sc[g] * xd[b]), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
#else
  float total = 0.f;
  int64_t b = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = 0; i < per; ++i, ++b) {
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += q[b * 32 + j] * xq[b * 32 + j];
      total += sc[g] * xd[b] * static_cast<float>(dot);
    }
  return total;
#endif
}

at::Tensor q4_linear_i8(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                        const at::Tensor& mins, int64_t group) {
  const int64_t N = qweight.size(0);
  const int64_t K = qweight.size(1) * 2;
  check_common(x, qweight, scales, group, K, "q4_linear_i8");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && scales.scalar_type() == at::kHalf &&
                  mins.scalar_type() == at::kHalf && mins.sizes() == scales.sizes(),
              "q4_linear_i8: uint8 qweight and float16 scales/mins of one shape expected");
  const int64_t M = x.numel() / K, G = K / group;
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  at::Tensor out = at::empty(out_sizes, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * K / 32), xsum(M * G, 0.f);
  for (int64_t m = 0; m < M; ++m) {
    quantize_row(xp + m * K, K, xq.data() + m * K, xd.data() + m * K / 32);
    for (int64_t k = 0; k < K; ++k) xsum[m * G + k / group] += xp[m * K + k];
  }
  const uint8_t* wp = qweight.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* mp = mins.data_ptr<at::Half>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t m = 0; m < M; ++m)
        op[m * N + n] = q4_row_dot_i8(wp + n * (K / 2), xq.data() + m * K, xd.data() + m * K / 32, sp + n * G,
                                      mp + n * G, xsum.data() + m * G, K, group);
  });
  return out;
}

at::Tensor q8_linear_i8(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, int64_t group) {
  const int64_t N = qweight.size(0);
  const int64_t K = qweight.size(1);
  check_common(x, qweight, scales, group, K, "q8_linear_i8");
  TORCH_CHECK(qweight.scalar_type() == at::kChar && scales.scalar_type() == at::kFloat,
              "q8_linear_i8: int8 qweight and float32 scales expected");
  const int64_t M = x.numel() / K, G = K / group;
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  at::Tensor out = at::empty(out_sizes, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * K / 32);
  for (int64_t m = 0; m < M; ++m) quantize_row(xp + m * K, K, xq.data() + m * K, xd.data() + m * K / 32);
  const int8_t* wp = qweight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t m = 0; m < M; ++m)
        op[m * N + n] = q8_row_dot_i8(wp + n * K, xq.data() + m * K, xd.data() + m * K / 32, sp + n * G, K, group);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(mfquant, m) {
  m.def("q4_linear(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group) -> Tensor");
  m.def("q8_linear(Tensor x, Tensor qweight, Tensor scales, int group) -> Tensor");
  m.def("q4_linear_i8(Tensor x, Tensor qweight, Tensor scales, Tensor mins, int group) -> Tensor");
  m.def("q8_linear_i8(Tensor x, Tensor qweight, Tensor scales, int group) -> Tensor");
}

TORCH_LIBRARY_IMPL(mfquant, CPU, m) {
  m.impl("q4_linear", &q4_linear);
  m.impl("q8_linear", &q8_linear);
  m.impl("q4_linear_i8", &q4_linear_i8);
  m.impl("q8_linear_i8", &q8_linear_i8);
}
