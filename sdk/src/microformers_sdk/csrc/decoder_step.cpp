// A whole float32 decoder step: every layer of a pre-norm Llama-style decoder for one new token per row.
//
// Per layer: h += o(attention(rope(q, k, v of rmsnorm(h)))), then h += down(silu(gate) * up of
// rmsnorm(h)); the new key/value go into the static cache storage at ``position`` and each query
// attends over the visible stored positions. One call per token instead of ~15 ATen and Python calls
// per layer. The products are the SDK's few-row products (few_rows.cpp), so each of them gives the
// same values as the layer's own ``row_linear`` call; q/k/v and gate/up run in one parallel region each.
// The layout follows microformers-quant's ``mfquant::decoder_step`` (the same Python protocol,
// static_steps.native_decoder_step) with float weights; the two share no code.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "few_rows.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MF_AVX2 1
#endif

namespace {

#ifdef MF_AVX2
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  lo = _mm_add_ps(lo, _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// exp of eight floats: x = n ln2 + r, a degree-6 polynomial for exp(r); within a few ulp of std::exp
// on [-87, 88], 0 below -87 (-inf included).
inline __m256 exp8(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.0f), log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 underflow = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lowest), _mm256_set1_ps(88.0f));
  const __m256 nf = _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(nf, ln2_hi));
  r = _mm256_sub_ps(r, _mm256_mul_ps(nf, ln2_lo));
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}
#endif

// sum of a[i] * b[i] over n values
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#ifdef MF_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  total = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// out[i] += w * x[i] over n values
inline void add_scaled(float* out, const float* x, float w, int64_t n) {
  int64_t i = 0;
#ifdef MF_AVX2
  const __m256 wv = _mm256_set1_ps(w);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(out + i)));
#endif
  for (; i < n; ++i) out[i] += w * x[i];
}

// out[m] = x[m] / sqrt(mean(x[m]^2) + eps) * weight, rows of H values.
void rms_norm_rows(const float* x, int64_t M, int64_t H, const float* weight, float eps, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * H;
    const float scale = 1.f / std::sqrt(dot(row, row, H) / static_cast<float>(H) + eps);
    float* o = out + m * H;
    int64_t i = 0;
#ifdef MF_AVX2
    const __m256 sv = _mm256_set1_ps(scale);
    for (; i + 8 <= H; i += 8)
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i), sv), _mm256_loadu_ps(weight + i)));
#endif
    for (; i < H; ++i) o[i] = row[i] * scale * weight[i];
  }
}

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i] over n values.
inline void silu_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
#ifdef MF_AVX2
  const __m256 one = _mm256_set1_ps(1.f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) gate[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

// The half-split rotation of each head_dim-wide head of one row: x * cos + [-x2, x1] * sin.
void rotate_heads(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

// One linear layer of the step: weight [N, K] float32 contiguous, bias empty or [N].
struct Linear {
  const float* w;
  const float* bias;
  int64_t N;
};

Linear linear_of(const at::Tensor& weight, const at::Tensor& bias, int64_t K, const char* what) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(1) == K && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "float_decoder_step: ", what, " must be a contiguous float32 weight with ", K, " columns");
  const int64_t N = weight.size(0);
  TORCH_CHECK(bias.numel() == 0 || (bias.numel() == N && bias.scalar_type() == at::kFloat && bias.is_contiguous()),
              "float_decoder_step: ", what, "'s bias must be empty or contiguous float32 [", N, "]");
  return {weight.data_ptr<float>(), bias.numel() ? bias.data_ptr<float>() : nullptr, N};
}

const float* norm_of(const at::Tensor& weight, int64_t H) {
  TORCH_CHECK(weight.numel() == H && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "float_decoder_step: norm weights must be contiguous float32 [hidden]");
  return weight.data_ptr<float>();
}

// outs[i] [M, N_i] = x [M, K] @ W_i.T (+ bias_i), all in one parallel region
void products(const float* x, int64_t M, int64_t K, std::initializer_list<std::pair<Linear, float*>> layers) {
  std::vector<mfsdk::FewRowsWeight> ws;
  for (const auto& [l, out] : layers) ws.push_back({l.w, l.bias, l.N, out});
  mfsdk::few_rows_products(x, M, K, ws.data(), static_cast<int64_t>(ws.size()));
}

at::Tensor float_decoder_step(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                              const at::Tensor& visible, at::TensorList caches, int64_t position, at::TensorList params,
                              double eps, double scaling, int64_t heads, int64_t kv_heads, int64_t head_dim,
                              at::TensorList head, double head_eps) {
  constexpr int64_t kPerLayer = 16;  // in norm, (weight, bias) x (q, k, v, o), post norm, (weight, bias) x (gate, up, down)
  const int64_t layers = static_cast<int64_t>(params.size()) / kPerLayer;
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(params.size()) == layers * kPerLayer &&
                  static_cast<int64_t>(caches.size()) == 2 * layers,
              "float_decoder_step: ", layers, " layers need ", kPerLayer, " tensors and 2 cache tensors each");
  TORCH_CHECK(hidden.dim() == 2 && hidden.scalar_type() == at::kFloat && hidden.is_contiguous(),
              "float_decoder_step: hidden must be contiguous float32 [rows, hidden]");
  const int64_t M = hidden.size(0), H = hidden.size(1), capacity = caches[0].size(2);
  TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim % 2 == 0,
              "float_decoder_step: bad head counts");
  const int64_t group_heads = heads / kv_heads;
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.dim() == 2 && cos.size(0) == M && cos.size(1) == head_dim &&
                  cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == at::kFloat &&
                  sin.scalar_type() == at::kFloat,
              "float_decoder_step: cos/sin must be contiguous float32 [rows, head_dim]");
  TORCH_CHECK(visible.dim() == 2 && (visible.size(0) == M || visible.size(0) == 1) && visible.size(1) == capacity &&
                  visible.scalar_type() == at::kBool && visible.is_contiguous(),
              "float_decoder_step: visible must be contiguous bool [rows or 1, capacity]");
  TORCH_CHECK(position >= 0 && position < capacity, "float_decoder_step: position ", position, " outside the cache");
  for (const at::Tensor& c : caches)
    TORCH_CHECK(c.dim() == 4 && c.size(0) == M && c.size(1) == kv_heads && c.size(2) == capacity &&
                    c.size(3) == head_dim && c.is_contiguous() && c.scalar_type() == at::kFloat,
                "float_decoder_step: every cache storage must be contiguous float32 [rows, kv_heads, capacity, "
                "head_dim]");
  const int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const int64_t intermediate = params[10].size(0);
  at::Tensor h = hidden.clone();
  std::vector<float> normed(M * H), qkv(M * (q_width + 2 * kv_width)), attended(M * q_width), projected(M * H),
      gate_up(2 * M * intermediate);
  float *q_all = qkv.data(), *k_all = q_all + M * q_width, *v_all = k_all + M * kv_width;
  float *gate = gate_up.data(), *up = gate + M * intermediate;
  const bool* seen = visible.data_ptr<bool>();
  const int64_t seen_stride = visible.size(0) == 1 ? 0 : capacity;
  float* hp = h.data_ptr<float>();
  const float *cos_p = cos.data_ptr<float>(), *sin_p = sin.data_ptr<float>();
  const float eps_f = static_cast<float>(eps), scale = static_cast<float>(scaling);
  auto add_projected = [&]() {
    for (int64_t i = 0; i < M * H; ++i) hp[i] += projected[i];
  };
  for (int64_t layer = 0; layer < layers; ++layer) {
    const at::Tensor* p = params.data() + layer * kPerLayer;
    const float* in_norm = norm_of(p[0], H);
    const Linear q = linear_of(p[1], p[2], H, "q_proj"), k = linear_of(p[3], p[4], H, "k_proj"),
                 v = linear_of(p[5], p[6], H, "v_proj"), o = linear_of(p[7], p[8], q_width, "o_proj");
    const float* post_norm = norm_of(p[9], H);
    const Linear g = linear_of(p[10], p[11], H, "gate_proj"), u = linear_of(p[12], p[13], H, "up_proj"),
                 d = linear_of(p[14], p[15], intermediate, "down_proj");
    TORCH_CHECK(q.N == q_width && k.N == kv_width && v.N == kv_width && o.N == H && g.N == intermediate &&
                    u.N == intermediate && d.N == H,
                "float_decoder_step: layer ", layer, ": projection sizes do not match the head counts and the first layer");
    // attention
    rms_norm_rows(hp, M, H, in_norm, eps_f, normed.data());
    products(normed.data(), M, H, {{q, q_all}, {k, k_all}, {v, v_all}});
    float* keys = caches[2 * layer].data_ptr<float>();
    float* values = caches[2 * layer + 1].data_ptr<float>();
    for (int64_t m = 0; m < M; ++m) {
      rotate_heads(q_all + m * q_width, heads, head_dim, cos_p + m * head_dim, sin_p + m * head_dim);
      rotate_heads(k_all + m * kv_width, kv_heads, head_dim, cos_p + m * head_dim, sin_p + m * head_dim);
      for (int64_t kv = 0; kv < kv_heads; ++kv) {
        const int64_t at_pos = ((m * kv_heads + kv) * capacity + position) * head_dim;
        std::copy_n(k_all + m * kv_width + kv * head_dim, head_dim, keys + at_pos);
        std::copy_n(v_all + m * kv_width + kv * head_dim, head_dim, values + at_pos);
      }
    }
    const int64_t work = M * heads * (position + 1) * head_dim;
    at::parallel_for(0, M * heads, work >= (int64_t{1} << 16) ? 1 : M * heads, [&](int64_t begin, int64_t end) {
      std::vector<float> scores(position + 1);
      for (int64_t mh = begin; mh < end; ++mh) {
        const int64_t m = mh / heads, kv = (mh % heads) / group_heads;
        const float* query = q_all + mh * head_dim;
        const float* kbase = keys + (m * kv_heads + kv) * capacity * head_dim;
        const float* vbase = values + (m * kv_heads + kv) * capacity * head_dim;
        const bool* row_seen = seen + m * seen_stride;
        float top = -INFINITY;
        for (int64_t j = 0; j <= position; ++j) {
          scores[j] = row_seen[j] ? dot(query, kbase + j * head_dim, head_dim) * scale : -INFINITY;
          top = std::max(top, scores[j]);
        }
        float* out = attended.data() + mh * head_dim;
        std::fill(out, out + head_dim, 0.f);
        if (top == -INFINITY) continue;  // nothing visible (never on a static step: visible_storage sees to it)
        // softmax: exp of each score against the maximum, then the values weighted by exp / total
        float total = 0.f;
        int64_t j = 0;
#ifdef MF_AVX2
        const __m256 shift = _mm256_set1_ps(top);
        for (; j + 8 <= position + 1; j += 8)
          _mm256_storeu_ps(scores.data() + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(scores.data() + j), shift)));
#endif
        for (; j <= position; ++j) scores[j] = scores[j] == -INFINITY ? 0.f : std::exp(scores[j] - top);
        for (j = 0; j <= position; ++j) total += scores[j];
        const float inverse = 1.f / total;
        for (j = 0; j <= position; ++j)
          if (scores[j] != 0.f) add_scaled(out, vbase + j * head_dim, scores[j] * inverse, head_dim);
      }
    });
    products(attended.data(), M, q_width, {{o, projected.data()}});
    add_projected();
    // MLP
    rms_norm_rows(hp, M, H, post_norm, eps_f, normed.data());
    products(normed.data(), M, H, {{g, gate}, {u, up}});
    silu_mul(gate, up, M * intermediate);
    products(gate, M, intermediate, {{d, projected.data()}});
    add_projected();
  }
  if (head.empty()) return h;
  TORCH_CHECK(head.size() == 3, "float_decoder_step: the head needs the final norm weight, the head weight and bias");
  const Linear lm = linear_of(head[1], head[2], H, "the head");
  rms_norm_rows(hp, M, H, norm_of(head[0], H), static_cast<float>(head_eps), normed.data());
  at::Tensor logits = at::empty({M, lm.N}, hidden.options());
  products(normed.data(), M, H, {{lm, logits.data_ptr<float>()}});
  return logits;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mfsdk, m) {
  m.def("float_decoder_step(Tensor hidden, Tensor cos, Tensor sin, Tensor visible, Tensor(a!)[] caches, int position, "
        "Tensor[] params, float eps, float scaling, int heads, int kv_heads, int head_dim, Tensor[] head, "
        "float head_eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(mfsdk, CPU, m) { m.impl("float_decoder_step", &float_decoder_step); }
