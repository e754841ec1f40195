// One static decoding step through every layer of a pre-norm Llama-style decoder, whatever computes its
// products: the SDK's float step (decoder_step.cpp) and microformers-quant's (qlinear.cpp) both run it.
//
// Per layer: h += o(attention(rope(q, k, v of rmsnorm(h)))), then h += down(silu(gate) * up of rmsnorm(h));
// the new key/value go into the static cache storage at ``position`` and each query attends over the
// visible stored positions. A step's own code (C++ extensions) includes this header: its directory is
// ``microformers_sdk.native.INCLUDE_DIR`` (build_ops(..., include_dirs=[INCLUDE_DIR])).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MF_STEP_AVX2 1
#endif

namespace mfsdk::step {

#ifdef MF_STEP_AVX2
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  lo = _mm_add_ps(lo, _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// exp(x) = 2^n exp(r) with x = n ln2 + r (ln2 in two parts, so n ln2 is exact), exp(r) a degree-6 polynomial:
// within a few ulp of std::exp on [kLowest, kHighest], 0 below kLowest (-inf included). exp8 here and the 16-lane
// exp of layers.cpp compute it with these numbers.
namespace exp_poly {
constexpr float kLowest = -87.0f, kHighest = 88.0f, kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// exp(r) = 1 + r + r^2 (c[5] + r (c[4] + r (c[3] + r (c[2] + r (c[1] + r c[0])))))
constexpr float kC[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_poly

// exp of eight floats (exp_poly)
inline __m256 exp8(__m256 x) {
  using namespace exp_poly;
  const __m256 lowest = _mm256_set1_ps(kLowest);
  const __m256 underflow = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lowest), _mm256_set1_ps(kHighest));
  const __m256 nf =
      _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(nf, _mm256_set1_ps(kLn2Hi)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(nf, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_set1_ps(kC[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}
#endif

// sum of a[i] * b[i] over n values
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#ifdef MF_STEP_AVX2
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
#ifdef MF_STEP_AVX2
  const __m256 wv = _mm256_set1_ps(w);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(out + i)));
#endif
  for (; i < n; ++i) out[i] += w * x[i];
}

// out[m] = x[m] / sqrt(mean(x[m]^2) + eps) * weight, rows of H values.
inline void rms_norm_rows(const float* x, int64_t M, int64_t H, const float* weight, float eps, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * H;
    const float scale = 1.f / std::sqrt(dot(row, row, H) / static_cast<float>(H) + eps);
    float* o = out + m * H;
    int64_t i = 0;
#ifdef MF_STEP_AVX2
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
#ifdef MF_STEP_AVX2
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
inline void rotate_heads(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
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

// The attention geometry of a step, its inputs checked (check_step_inputs).
// What a step holds for its whole life (its layers' tensors and integers, its head's), handed to the step's op
// as one object built once: converting a Python list of ~1,000 tensors to an op's arguments costs about 0.3 ms
// a call (3% of a quantized SmolLM2-135M token). ``Owner`` gives each extension a type of its own (each
// registers it in its own namespace with ``m.class_``).
template <class Owner>
struct StepWeights : torch::CustomClassHolder {
  std::vector<at::Tensor> params, head;
  std::vector<int64_t> meta, head_meta;
  StepWeights(std::vector<at::Tensor> params_, std::vector<int64_t> meta_, std::vector<at::Tensor> head_,
              std::vector<int64_t> head_meta_)
      : params(std::move(params_)), head(std::move(head_)), meta(std::move(meta_)), head_meta(std::move(head_meta_)) {}

  // What the op derives from params (checked views of each layer: ~7 us a layer to redo every call), made by
  // build() on the first call and again whenever a tensor's data or shape changed since (``param.data = ...``
  // changes them in place of the same tensor).
  template <class Prepared, class Build>
  std::shared_ptr<const Prepared> prepared(const Build& build) {
    std::lock_guard<std::mutex> lock(mutex_);
    bool current = prepared_ != nullptr;
    for (size_t i = 0; current && i < params.size(); ++i)
      current = params[i].data_ptr() == seen_data_[i] && params[i].sizes() == seen_sizes_[i];
    if (!current) {
      prepared_ = std::make_shared<const Prepared>(build());
      seen_data_.clear();
      seen_sizes_.clear();
      for (const at::Tensor& t : params) {
        seen_data_.push_back(t.data_ptr());
        seen_sizes_.push_back(t.sizes().vec());
      }
    }
    return std::static_pointer_cast<const Prepared>(prepared_);
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<const void> prepared_;
  std::vector<const void*> seen_data_;
  std::vector<std::vector<int64_t>> seen_sizes_;
};

// A step's rows are either one new token of each cache row (``position`` the same for all), or, where the
// cache holds one sequence and more rows come (a *prompt*), consecutive tokens of that sequence at
// ``position``, ``position + 1``, ...: each row then attends causally (up to its own position) and the
// step's result is its last row's (what a prompt's next-token logits need).
struct StepShape {
  int64_t rows, hidden, heads, kv_heads, head_dim, capacity, position;
  float scaling;
  const float* cos;   // [rows, head_dim]
  const float* sin;   // [rows, head_dim]
  const bool* seen;   // [rows or 1, capacity]: the stored positions each row may attend to
  int64_t seen_stride;  // 0 when one row of ``seen`` serves every row
  bool prompt;          // rows are consecutive tokens of cache row 0

  int64_t cache_row(int64_t m) const { return prompt ? 0 : m; }
  int64_t position_of(int64_t m) const { return prompt ? position + m : position; }
  int64_t result_rows() const { return prompt ? 1 : rows; }  // the rows of h the step returns (the last ones)
};

inline StepShape check_step_inputs(const char* name, const at::Tensor& hidden, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& visible, at::TensorList caches,
                                   int64_t position, double scaling, int64_t heads, int64_t kv_heads,
                                   int64_t head_dim) {
  TORCH_CHECK(hidden.dim() == 2 && hidden.scalar_type() == at::kFloat && hidden.is_contiguous(), name,
              ": hidden must be contiguous float32 [rows, hidden]");
  TORCH_CHECK(!caches.empty() && caches.size() % 2 == 0, name, ": caches come in (key, value) pairs");
  const int64_t M = hidden.size(0), capacity = caches[0].size(2);
  const bool prompt = M > 1 && caches[0].size(0) == 1;
  TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim % 2 == 0, name, ": bad head counts");
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.dim() == 2 && cos.size(0) == M && cos.size(1) == head_dim &&
                  cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == at::kFloat &&
                  sin.scalar_type() == at::kFloat,
              name, ": cos/sin must be contiguous float32 [rows, head_dim]");
  TORCH_CHECK(visible.dim() == 2 && (visible.size(0) == M || visible.size(0) == 1) && visible.size(1) == capacity &&
                  visible.scalar_type() == at::kBool && visible.is_contiguous(),
              name, ": visible must be contiguous bool [rows or 1, capacity]");
  const int64_t last = prompt ? position + M - 1 : position;
  TORCH_CHECK(position >= 0 && last < capacity, name, ": position ", last, " outside the cache");
  for (const at::Tensor& c : caches)
    TORCH_CHECK(c.dim() == 4 && c.size(0) == (prompt ? 1 : M) && c.size(1) == kv_heads && c.size(2) == capacity &&
                    c.size(3) == head_dim && c.is_contiguous() && c.scalar_type() == at::kFloat,
                name, ": every cache storage must be contiguous float32 [rows (or 1 for a prompt), kv_heads, capacity, "
                "head_dim]");
  return {M,
          hidden.size(1),
          heads,
          kv_heads,
          head_dim,
          capacity,
          position,
          static_cast<float>(scaling),
          cos.data_ptr<float>(),
          sin.data_ptr<float>(),
          visible.data_ptr<bool>(),
          visible.size(0) == 1 ? 0 : capacity,
          prompt};
}

// out [D] = softmax(query . keys[j] * scaling over the seen j < count) weighted sum of values[j]; zeros where
// no position is seen. ``scores`` has room for count floats.
inline void attend_one(const float* query, const float* keys, const float* values, const bool* seen, int64_t count,
                       int64_t D, float scaling, float* scores, float* out) {
  int64_t j = 0;
#ifdef MF_STEP_AVX2
  if (D % 8 == 0) {
    // eight keys at a time: eight independent FMA chains, their sums gathered into one vector
    const __m256 scale = _mm256_set1_ps(scaling);
    for (; j + 8 <= count; j += 8) {
      const float* k = keys + j * D;
      __m256 acc[8];
      const __m256 q0 = _mm256_loadu_ps(query);
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_mul_ps(q0, _mm256_loadu_ps(k + t * D));
      for (int64_t c = 8; c < D; c += 8) {
        const __m256 q = _mm256_loadu_ps(query + c);
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(q, _mm256_loadu_ps(k + t * D + c), acc[t]);
      }
      const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
      const __m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
      const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
      // lanes: s0123 = [0 1 2 3 | 0 1 2 3] halves, s4567 likewise: add the 128-bit halves
      const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                                        _mm256_permute2f128_ps(s0123, s4567, 0x31));
      _mm256_storeu_ps(scores + j, _mm256_mul_ps(sums, scale));
    }
  }
#endif
  for (; j < count; ++j) scores[j] = dot(query, keys + j * D, D) * scaling;
  float top = -INFINITY;
  for (j = 0; j < count; ++j) {
    if (!seen[j]) scores[j] = -INFINITY;
    top = std::max(top, scores[j]);
  }
  std::fill(out, out + D, 0.f);
  if (top == -INFINITY) return;  // nothing visible: zeros, not NaN
  // softmax: exp of each score against the maximum, then the values weighted by exp / total
  j = 0;
#ifdef MF_STEP_AVX2
  const __m256 shift = _mm256_set1_ps(top);
  for (; j + 8 <= count; j += 8)
    _mm256_storeu_ps(scores + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + j), shift)));
#endif
  for (; j < count; ++j) scores[j] = scores[j] == -INFINITY ? 0.f : std::exp(scores[j] - top);
  float total = 0.f;
  for (j = 0; j < count; ++j) total += scores[j];
  const float inverse = 1.f / total;
  int64_t c = 0;
#ifdef MF_STEP_AVX2
  // 64 output values at a time held in registers over every position (unseen ones, weight 0, skipped: their
  // storage may hold anything)
  for (; c + 64 <= D; c += 64) {
    __m256 acc[8];
    for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
    for (j = 0; j < count; ++j) {
      if (scores[j] == 0.f) continue;
      const __m256 w = _mm256_set1_ps(scores[j] * inverse);
      const float* v = values + j * D + c;
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * t), acc[t]);
    }
    for (int t = 0; t < 8; ++t) _mm256_storeu_ps(out + c + 8 * t, acc[t]);
  }
#endif
  if (c < D)
    for (j = 0; j < count; ++j)
      if (scores[j] != 0.f) add_scaled(out + c, values + j * D + c, scores[j] * inverse, D - c);
}

// Rotate q/k of every row, write each row's new key/value at its position, and attend:
// attended [rows, heads * head_dim] = softmax(q k^T * scaling over the visible positions up to the row's own) v.
inline void attend(const StepShape& s, float* q_all, float* k_all, const float* v_all, float* keys, float* values,
                   float* attended) {
  const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim, group = s.heads / s.kv_heads;
  const int64_t D = s.head_dim;
  for (int64_t m = 0; m < s.rows; ++m) {
    rotate_heads(q_all + m * q_width, s.heads, D, s.cos + m * D, s.sin + m * D);
    rotate_heads(k_all + m * kv_width, s.kv_heads, D, s.cos + m * D, s.sin + m * D);
    for (int64_t kv = 0; kv < s.kv_heads; ++kv) {
      const int64_t at_pos = ((s.cache_row(m) * s.kv_heads + kv) * s.capacity + s.position_of(m)) * D;
      std::copy_n(k_all + m * kv_width + kv * D, D, keys + at_pos);
      std::copy_n(v_all + m * kv_width + kv * D, D, values + at_pos);
    }
  }
  const int64_t work = s.rows * s.heads * (s.position_of(s.rows - 1) + 1) * D;
  at::parallel_for(0, s.rows * s.heads, work >= (int64_t{1} << 16) ? 1 : s.rows * s.heads, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(s.position_of(s.rows - 1) + 1);
    for (int64_t mh = begin; mh < end; ++mh) {
      const int64_t m = mh / s.heads, kv = (mh % s.heads) / group;
      const int64_t at_kv = (s.cache_row(m) * s.kv_heads + kv) * s.capacity * D;
      attend_one(q_all + mh * D, keys + at_kv, values + at_kv, s.seen + m * s.seen_stride, s.position_of(m) + 1, D,
                 s.scaling, scores.data(), attended + mh * D);
    }
  });
}

// Every layer of the step on h [rows, hidden] in place (a prompt's last layer computes every row: each row's
// key and value go into the cache). ``layer_at(i)`` gives layer i as an object with
// ``in_norm`` and ``post_norm`` (float32 [hidden]) and the products qkv(x, q, k, v), o(x, out),
// gate_up(x, gate, up) and down(x, out), each ``out [rows, N] = x [rows, K] @ W.T (+ bias)``.
template <class LayerAt>
void run_layers(const StepShape& s, float* h, at::TensorList caches, int64_t intermediate, float eps,
                const LayerAt& layer_at) {
  const int64_t M = s.rows, H = s.hidden, q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  const int64_t layers = static_cast<int64_t>(caches.size()) / 2;
  std::vector<float> normed(M * H), qkv(M * (q_width + 2 * kv_width)), attended(M * q_width), projected(M * H),
      gate_up(2 * M * intermediate);
  float *q_all = qkv.data(), *k_all = q_all + M * q_width, *v_all = k_all + M * kv_width;
  float *gate = gate_up.data(), *up = gate + M * intermediate;
  auto add_projected = [&]() {
    for (int64_t i = 0; i < M * H; ++i) h[i] += projected[i];
  };
  for (int64_t i = 0; i < layers; ++i) {
    const auto& layer = layer_at(i);
    rms_norm_rows(h, M, H, layer.in_norm, eps, normed.data());
    layer.qkv(normed.data(), q_all, k_all, v_all);
    attend(s, q_all, k_all, v_all, caches[2 * i].data_ptr<float>(), caches[2 * i + 1].data_ptr<float>(),
           attended.data());
    layer.o(attended.data(), projected.data());
    add_projected();
    rms_norm_rows(h, M, H, layer.post_norm, eps, normed.data());
    layer.gate_up(normed.data(), gate, up);
    silu_mul(gate, up, M * intermediate);
    layer.down(gate, projected.data());
    add_projected();
  }
}

}  // namespace mfsdk::step
