// Float32 layer ops for eager forwards on the CPU (prompts): mfsdk::rms_norm, mfsdk::rotate_half_split,
// mfsdk::causal_attention.
//
// ATen runs RMSNorm as six ops (square, mean, add, rsqrt, two products), each a pass over the activations: 3% of
// SmolLM2's 512-token prefill on one Zen 4 core. This is the decoder step's own one-pass norm (decoder_layers.h),
// so a prompt and a decoding step normalise alike.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "decoder_layers.h"

namespace {

// x [..., H] / sqrt(mean(x^2 over H) + eps) * weight [H], each row's mean over its H values in the step's order
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.is_contiguous() &&
                  weight.is_contiguous() && x.dim() >= 1,
              "rms_norm: contiguous float32 x [..., H] and weight [H]");
  const int64_t H = x.size(-1);
  TORCH_CHECK(H > 0 && weight.numel() == H, "rms_norm: weight must have ", H, " values (x's last axis), not ",
              weight.numel());
  const int64_t M = x.numel() / H;
  at::Tensor out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, M, std::max<int64_t>(1, (int64_t{1} << 15) / H), [&](int64_t m0, int64_t m1) {
    mfsdk::step::rms_norm_rows(xp + m0 * H, m1 - m0, H, wp, static_cast<float>(eps), op + m0 * H);
  });
  return out;
}

// Rotary embedding of queries or keys in the half-split layout, x * cos + rotate_half(x) * sin, in one pass: for
// x [B, H, T, D] (any layout with contiguous rows of D; a model's [B, T, H, D] projections viewed as heads first)
// and cos, sin [B or 1, T, D] (contiguous), out_i = x_i cos_i - x_{i+D/2} sin_i for i < D/2 and
// x_i cos_i + x_{i-D/2} sin_i after; each product rounded, then one rounding per sum (this file is built without
// contracting products into FMAs), so the values are the formula's to the bit. ATen takes five passes (a
// product, two half products and two in-place sums): 2% of SmolLM2's 2,048-token prefill on one core.
at::Tensor rotate_half_split(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(x.dim() == 4 && x.scalar_type() == at::kFloat && x.stride(3) == 1 && x.size(3) % 2 == 0,
              "rotate_half_split: float32 x [batch, heads, tokens, head_dim] with contiguous rows of an even head_dim");
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), half = D / 2;
  TORCH_CHECK(cos.dim() == 3 && cos.sizes() == sin.sizes() && (cos.size(0) == B || cos.size(0) == 1) &&
                  cos.size(1) == T && cos.size(2) == D && cos.scalar_type() == at::kFloat &&
                  sin.scalar_type() == at::kFloat && cos.is_contiguous() && sin.is_contiguous(),
              "rotate_half_split: cos and sin must be contiguous float32 [", B, " or 1, ", T, ", ", D, "]");
  at::Tensor out = at::empty_like(x);  // x's layout
  const float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t cos_batch = cos.size(0) == 1 ? 0 : T * D;
  at::parallel_for(0, B * T, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, H * D)),
                   [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / T, t = r % T;
      const float* __restrict c = cp + b * cos_batch + t * D;
      const float* __restrict s = sp + b * cos_batch + t * D;
      for (int64_t h = 0; h < H; ++h) {
        const float* __restrict in = xp + b * x.stride(0) + h * x.stride(1) + t * x.stride(2);
        float* __restrict o = op + b * out.stride(0) + h * out.stride(1) + t * out.stride(2);
        for (int64_t i = 0; i < half; ++i) o[i] = in[i] * c[i] - in[i + half] * s[i];
        for (int64_t i = half; i < D; ++i) o[i] = in[i] * c[i] + in[i - half] * s[i];
      }
    }
  });
  return out;
}

// Causal attention of a prompt over itself (every query i sees keys 0..i), flash-style: for each block of 32
// queries, blocks of 64 keys up to the diagonal; the scores of a block, a running softmax per query (its max,
// its sum, the output rescaled when the max grows), then the block's values weighted in. torch's CPU kernel takes
// keys in blocks of 512 and computes the scores above the diagonal before masking them (SmolLM2 at 2,048 tokens:
// 61 GFLOP/s of useful work on a Zen 4 core, 96 on an Emerald Rapids core against this kernel's 130). Products
// without horizontal sums: each block of keys is transposed once ([D, 64], contiguous), so 16 keys' scores come
// from one vector per query value; the values are weighted row by row. The running max is reduced across lanes
// only when a score passes it, the softmax works in powers of two, and the running sums stay in 16 lanes until
// the end.
#ifdef MF_STEP_AVX2
#define MF_AVX512 __attribute__((target("avx512f")))
#define MF_UNROLL _Pragma("GCC unroll 8")

constexpr int64_t kBlock = 64;  // keys per block
constexpr int64_t kQueries = 32;  // queries per block

// 2^t of sixteen floats t <= 0 (a score's distance below its row's max, in bits), 0 in the lanes not in ``keep``
// and where t < -126 (past float32's normal range); a NaN stays NaN. 2^t = 2^n 2^f, n = t rounded, f in [-1/2, 1/2]: 2^f by a
// degree-6 polynomial (a Chebyshev fit: 1e-7 from 2^f at worst in float32), 2^n applied by scalef.
constexpr float kPow2[7] = {1.0f, 0.69314718246f, 0.24022650719f, 0.05550327152f, 0.00961802527f, 0.00134004327f,
                            0.00015469732f};
MF_AVX512 inline __m512 exp2_kept(__m512 t, __mmask16 keep) {
  keep &= _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.f), _CMP_NLT_UQ);
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(kPow2[6]);
  for (int i = 5; i >= 0; --i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kPow2[i]));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

struct Rows {  // one head's rows: row t at data + t * stride, D values each
  const float* data;
  int64_t stride;
};

// out[g][c] = q[g] . key c (c < 16 C, keys [D, kBlock] transposed; out rows kBlock apart), four queries at a time
template <int C>
MF_AVX512 inline void score_keys(const float* const q[4], const float* keys, int64_t D, float* out) {
  __m512 sums[4][C];
  MF_UNROLL for (int g = 0; g < 4; ++g) MF_UNROLL for (int c = 0; c < C; ++c) sums[g][c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    __m512 kv[C];
    MF_UNROLL for (int c = 0; c < C; ++c) kv[c] = _mm512_loadu_ps(keys + d * kBlock + 16 * c);
    MF_UNROLL for (int g = 0; g < 4; ++g) {
      const __m512 qv = _mm512_set1_ps(q[g][d]);
      MF_UNROLL for (int c = 0; c < C; ++c) sums[g][c] = _mm512_fmadd_ps(qv, kv[c], sums[g][c]);
    }
  }
  MF_UNROLL for (int g = 0; g < 4; ++g) MF_UNROLL for (int c = 0; c < C; ++c)
    _mm512_storeu_ps(out + g * kBlock + 16 * c, sums[g][c]);
}

// o[g] (rows g < g_rows of o, D apart) += sum over c < keys of p[g * kBlock + c] * v row c (16 * V values, rows
// v_stride apart), for four queries at a time
template <int V>
MF_AVX512 inline void weigh_values(const float* p, const float* v, int64_t v_stride, int64_t keys, float* o,
                                   int64_t D, int g_rows) {
  __m512 sums[4][V];
  MF_UNROLL for (int g = 0; g < 4; ++g) MF_UNROLL for (int k = 0; k < V; ++k)
    sums[g][k] = g < g_rows ? _mm512_loadu_ps(o + g * D + 16 * k) : _mm512_setzero_ps();
  for (int64_t c = 0; c < keys; ++c) {
    __m512 vv[V];
    MF_UNROLL for (int k = 0; k < V; ++k) vv[k] = _mm512_loadu_ps(v + c * v_stride + 16 * k);
    MF_UNROLL for (int g = 0; g < 4; ++g) {
      const __m512 weight = _mm512_set1_ps(p[g * kBlock + c]);
      MF_UNROLL for (int k = 0; k < V; ++k) sums[g][k] = _mm512_fmadd_ps(weight, vv[k], sums[g][k]);
    }
  }
  MF_UNROLL for (int g = 0; g < 4; ++g) MF_UNROLL for (int k = 0; k < V; ++k)
    if (g < g_rows) _mm512_storeu_ps(o + g * D + 16 * k, sums[g][k]);
}

// One block of ``rows`` queries from ``i0`` of one head against its keys (kt: each block of kBlock keys transposed,
// [padded / kBlock, D, kBlock], zero past T)
// and values; out rows at out + i * out_stride.
MF_AVX512 void attend_block(Rows q, const float* kt, Rows v, float* out, int64_t out_stride, int64_t i0,
                            int64_t rows, int64_t D, float scale, float* scores, float* acc) {
  float best[kQueries];
  __m512 total[kQueries];  // each query's running sum of exponentials, in 16 lanes (added up at the end)
  for (int64_t r = 0; r < kQueries; ++r) best[r] = -INFINITY, total[r] = _mm512_setzero_ps();
  std::fill(acc, acc + kQueries * D, 0.f);
  const int64_t last = i0 + rows - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kBlock) {
    // scores[r][c] = q_{i0 + r} . k_{j0 + c}, four queries x up to 64 keys at a time (the keys up to the group's
    // last query: the softmax hides the others)
    const float* keys = kt + j0 * D;  // the block's keys, [D, kBlock] (16 KB for D = 64: stays in L1)
    for (int64_t r = 0; r < rows; r += 4) {
      const float* qr[4];
      for (int g = 0; g < 4; ++g) qr[g] = q.data + std::min(i0 + r + g, last) * q.stride;  // past the end: unused
      float* out_rows = scores + r * kBlock;
      switch (std::min<int64_t>(4, (std::min(i0 + r + 3, last) - j0) / 16 + 1)) {
        case 4: score_keys<4>(qr, keys, D, out_rows); break;
        case 3: score_keys<3>(qr, keys, D, out_rows); break;
        case 2: score_keys<2>(qr, keys, D, out_rows); break;
        default: score_keys<1>(qr, keys, D, out_rows);
      }
    }
    // the running softmax, in bits: t = (score - the row's max) * scale * log2(e), one rounding (an FMA against
    // the max times the same factor), 2^t for the keys up to each query and 0 after it
    const float bits = scale * mfsdk::step::exp_poly::kLog2e;
    const __m512 bits_v = _mm512_set1_ps(bits), lowest = _mm512_set1_ps(-INFINITY);
    int64_t widest = 0;  // keys the block's last query sees
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t seen = std::min(kBlock, i0 + r - j0 + 1);  // keys j0 .. i0 + r
      float* row = scores + r * kBlock;
      if (seen <= 0) {
        std::fill(row, row + kBlock, 0.f);
        continue;
      }
      widest = std::max(widest, seen);
      __m512 x[4], top = lowest;
      __mmask16 lanes[4];
      MF_UNROLL for (int c = 0; c < 4; ++c) {
        const int64_t inside = std::clamp<int64_t>(seen - 16 * c, 0, 16);
        lanes[c] = static_cast<__mmask16>((1u << inside) - 1);
        x[c] = _mm512_loadu_ps(row + 16 * c);
        top = _mm512_mask_max_ps(top, lanes[c], top, x[c]);
      }
      // the max (of the raw scores: the scale is positive) and the rescaling only where a score passes the running
      // max (mostly in the first blocks); else the max stays and the factor would be 2^0 = 1
      float shrink = 1.f;
      if (_mm512_cmp_ps_mask(top, _mm512_set1_ps(best[r]), _CMP_GT_OQ)) {
        const float new_best = _mm512_reduce_max_ps(top);
        shrink = std::exp2((best[r] - new_best) * bits);  // 0 for the first block (best was -inf)
        best[r] = new_best;
      }
      const __m512 base = _mm512_set1_ps(best[r] * bits);
      __m512 sum = _mm512_setzero_ps();
      MF_UNROLL for (int c = 0; c < 4; ++c) {
        const __m512 p = exp2_kept(_mm512_fmsub_ps(x[c], bits_v, base), lanes[c]);
        _mm512_storeu_ps(row + 16 * c, p);
        sum = _mm512_add_ps(sum, p);
      }
      if (shrink != 1.f) {
        total[r] = _mm512_mul_ps(total[r], _mm512_set1_ps(shrink));
        float* o = acc + r * D;
        for (int64_t e = 0; e < D; e += 16) _mm512_storeu_ps(o + e, _mm512_mul_ps(_mm512_loadu_ps(o + e), _mm512_set1_ps(shrink)));
      }
      total[r] = _mm512_add_ps(total[r], sum);
    }
    // acc[r] += sum_c p[r][c] * v_{j0 + c}, four queries x 64 values at a time
    for (int64_t r = 0; r < rows; r += 4) {
      const int g_rows = static_cast<int>(std::min<int64_t>(4, rows - r));
      const float* p = scores + r * kBlock;  // rows past the block's last are never stored
      const float* vr = v.data + j0 * v.stride;
      const int64_t seen = std::min(widest, i0 + r + g_rows - j0);  // keys the group's last query sees
      for (int64_t e = 0; e < D; e += 64) {
        float* o = acc + r * D + e;
        switch (std::min<int64_t>(4, (D - e) / 16)) {
          case 4: weigh_values<4>(p, vr + e, v.stride, seen, o, D, g_rows); break;
          case 3: weigh_values<3>(p, vr + e, v.stride, seen, o, D, g_rows); break;
          case 2: weigh_values<2>(p, vr + e, v.stride, seen, o, D, g_rows); break;
          default: weigh_values<1>(p, vr + e, v.stride, seen, o, D, g_rows);
        }
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(total[r]));
    for (int64_t e = 0; e < D; e += 16)
      _mm512_storeu_ps(out + (i0 + r) * out_stride + e, _mm512_mul_ps(_mm512_loadu_ps(acc + r * D + e), inv));
  }
}
#undef MF_UNROLL
#endif

// gate = silu(gate) * up in place, each row of the last axis in one pass with the decoder step's SiLU: 16 lanes at
// a time where the CPU has AVX-512, the same operations as its 8-lane exp8 and silu_mul (so the same values; the
// last values of a row that fill no vector go through the step's own loop). ATen takes two passes (SiLU in
// place, then the product) and its own exp: 2.5% of SmolLM2's 2,048-token prefill on one core.
#ifdef MF_STEP_AVX2
// exp of sixteen floats: exp8's operations (decoder_layers.h, exp_poly) in 16 lanes, so the same values
MF_AVX512 inline __m512 exp16(__m512 x) {
  using namespace mfsdk::step::exp_poly;
  const __m512 lowest = _mm512_set1_ps(kLowest);
  const __mmask16 kept = _mm512_cmp_ps_mask(x, lowest, _CMP_NLT_UQ);  // exp8's underflow lanes are the others
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lowest), _mm512_set1_ps(kHighest));
  const __m512 nf =
      _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(nf, _mm512_set1_ps(kLn2Hi)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(nf, _mm512_set1_ps(kLn2Lo)));
  __m512 p = _mm512_set1_ps(kC[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(nf), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(kept, p, _mm512_castsi512_ps(bits));
}

// silu_mul of decoder_layers.h over one row of n values, 16 at a time (the rest through it)
MF_AVX512 void silu_mul_row16(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  mfsdk::step::silu_mul(gate + i, up + i, n - i);
}
#endif

at::Tensor silu_mul_(at::Tensor gate, const at::Tensor& up) {
  TORCH_CHECK(gate.scalar_type() == at::kFloat && up.scalar_type() == at::kFloat && gate.is_contiguous() &&
                  up.is_contiguous() && gate.sizes() == up.sizes() && gate.dim() >= 1,
              "silu_mul_: contiguous float32 gate and up of one shape");
  if (gate.numel() == 0) return gate;
  const int64_t I = gate.size(-1), M = gate.numel() / I;
  float* gp = gate.data_ptr<float>();
  const float* up_p = up.data_ptr<float>();
#ifdef MF_STEP_AVX2
  const bool wide = __builtin_cpu_supports("avx512f");
#else
  const bool wide = false;
#endif
  at::parallel_for(0, M, std::max<int64_t>(1, (int64_t{1} << 14) / I), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
#ifdef MF_STEP_AVX2
      if (wide) {
        silu_mul_row16(gp + m * I, up_p + m * I, I);
        continue;
      }
#endif
      mfsdk::step::silu_mul(gp + m * I, up_p + m * I, I);
    }
  });
  return gate;
}

bool attention_inputs_ok(const at::Tensor& t) {
  return t.dim() == 4 && t.scalar_type() == at::kFloat && t.stride(3) == 1;
}

// out [B, H, T, D] (laid out as [B, T, H, D]) = causal softmax(q k^T * scale) v for q [B, H, T, D] and k, v
// [B, H_kv, T, D] (H a multiple of H_kv; query head h reads key/value head h / (H / H_kv)), D a multiple of 16.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  TORCH_CHECK(attention_inputs_ok(q) && attention_inputs_ok(k) && attention_inputs_ok(v),
              "causal_attention: float32 q, k, v [batch, heads, tokens, head_dim] with contiguous head_dim");
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1);
  TORCH_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == Hkv && k.size(2) == T && v.size(2) == T &&
                  k.size(3) == D && v.size(3) == D && Hkv > 0 && H % Hkv == 0 && D % 16 == 0 && D > 0,
              "causal_attention: k and v must be [", B, ", a divisor of ", H, ", ", T, ", ", D,
              "] and head_dim a multiple of 16");
#ifdef MF_STEP_AVX2
  TORCH_CHECK(__builtin_cpu_supports("avx512f"), "causal_attention: this CPU has no AVX-512");
  at::Tensor out = at::empty({B, T, H, D}, q.options());
  const int64_t padded = (T + kBlock - 1) / kBlock * kBlock;
  // each key head's blocks of kBlock keys transposed, [padded / kBlock, D, kBlock]: a block's keys lie together (a
  // whole transposed head [D, T] put its rows T floats apart, on the same few L1 sets)
  std::vector<float> kt(static_cast<size_t>(B * Hkv * D * padded), 0.f);
  const float* kp = k.data_ptr<float>();
  at::parallel_for(0, B * Hkv, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t bh = h0; bh < h1; ++bh) {
      const float* src = kp + (bh / Hkv) * k.stride(0) + (bh % Hkv) * k.stride(1);
      float* dst = kt.data() + bh * D * padded;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) dst[(t / kBlock * D + d) * kBlock + t % kBlock] = src[t * k.stride(2) + d];
    }
  });
  const int64_t blocks = (T + kQueries - 1) / kQueries, group = H / Hkv;
  const float* qp = q.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, B * H * blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores(kQueries * kBlock), acc(kQueries * D);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t block = blocks - 1 - task % blocks;  // the longest blocks first
      const int64_t h = task / blocks % H, b = task / blocks / H, kvh = h / group;
      const Rows qh{qp + b * q.stride(0) + h * q.stride(1), q.stride(2)};
      const Rows vh{vp + b * v.stride(0) + kvh * v.stride(1), v.stride(2)};
      const int64_t i0 = block * kQueries;
      attend_block(qh, kt.data() + (b * Hkv + kvh) * D * padded, vh, op + b * T * H * D + h * D, H * D, i0,
                   std::min(kQueries, T - i0), D, static_cast<float>(scale), scores.data(), acc.data());
    }
  });
  return out.transpose(1, 2);
#else
  TORCH_CHECK(false, "causal_attention: built without AVX2");
#endif
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mfsdk, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("rotate_half_split(Tensor x, Tensor cos, Tensor sin) -> Tensor");
  m.def("causal_attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor");
  m.def("silu_mul_(Tensor(a!) gate, Tensor up) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(mfsdk, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rotate_half_split", &rotate_half_split);
  m.impl("causal_attention", &causal_attention);
  m.impl("silu_mul_", &silu_mul_);
}
