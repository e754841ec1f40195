// A whole float32 decoder step: every layer of a pre-norm Llama-style decoder for one new token per row.
//
// Per layer: h += o(attention(rope(q, k, v of rmsnorm(h)))), then h += down(silu(gate) * up of
// rmsnorm(h)); the new key/value go into the static cache storage at ``position`` and each query
// attends over the visible stored positions. One call per token instead of ~15 ATen and Python calls
// per layer. The products are the SDK's few-row products (few_rows.cpp), so each of them gives the
// same values as the layer's own ``row_linear`` call; q/k/v and gate/up run in one parallel region each.
// The layer loop, attention, norms and rotary are decoder_layers.h's, shared with microformers-quant's
// ``mfquant::decoder_step`` (the same Python protocol, static_steps.native_decoder_step).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "decoder_layers.h"
#include "few_rows.h"

namespace {

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

// One layer as mfsdk::step::run_layers calls it: its norms and its products through few_rows_products.
struct FloatLayer {
  const float *in_norm, *post_norm;
  Linear q, k, v, o_proj, gate, up_proj, down_proj;
  int64_t M, H, q_width, intermediate;
  void qkv(const float* x, float* q_out, float* k_out, float* v_out) const {
    products(x, M, H, {{q, q_out}, {k, k_out}, {v, v_out}});
  }
  void o(const float* x, float* out) const { products(x, M, q_width, {{o_proj, out}}); }
  void gate_up(const float* x, float* gate_out, float* up_out) const {
    products(x, M, H, {{gate, gate_out}, {up_proj, up_out}});
  }
  void down(const float* x, float* out) const { products(x, M, intermediate, {{down_proj, out}}); }
};

struct FloatStep;
using FloatStepWeights = mfsdk::step::StepWeights<FloatStep>;  // params, head; no integers

at::Tensor float_decoder_step(const at::Tensor& hidden, const at::Tensor& cos, const at::Tensor& sin,
                              const at::Tensor& visible, at::TensorList caches, int64_t position,
                              const c10::intrusive_ptr<FloatStepWeights>& weights, double eps, double scaling,
                              int64_t heads, int64_t kv_heads, int64_t head_dim, double head_eps) {
  const std::vector<at::Tensor>&params = weights->params, &head = weights->head;
  constexpr int64_t kPerLayer = 16;  // in norm, (weight, bias) x (q, k, v, o), post norm, (weight, bias) x (gate, up, down)
  const int64_t layers = static_cast<int64_t>(params.size()) / kPerLayer;
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(params.size()) == layers * kPerLayer &&
                  static_cast<int64_t>(caches.size()) == 2 * layers && weights->meta.empty() &&
                  weights->head_meta.empty(),
              "float_decoder_step: ", layers, " layers need ", kPerLayer, " tensors and 2 cache tensors each");
  const mfsdk::step::StepShape shape = mfsdk::step::check_step_inputs(
      "float_decoder_step", hidden, cos, sin, visible, caches, position, scaling, heads, kv_heads, head_dim);
  const int64_t M = shape.rows, H = shape.hidden;
  const int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim, intermediate = params[10].size(0);
  at::Tensor h = hidden.clone();
  mfsdk::step::run_layers(shape, h.data_ptr<float>(), caches, intermediate, static_cast<float>(eps), [&](int64_t layer) {
    const at::Tensor* p = params.data() + layer * kPerLayer;
    const FloatLayer l{norm_of(p[0], H),
                       norm_of(p[9], H),
                       linear_of(p[1], p[2], H, "q_proj"),
                       linear_of(p[3], p[4], H, "k_proj"),
                       linear_of(p[5], p[6], H, "v_proj"),
                       linear_of(p[7], p[8], q_width, "o_proj"),
                       linear_of(p[10], p[11], H, "gate_proj"),
                       linear_of(p[12], p[13], H, "up_proj"),
                       linear_of(p[14], p[15], intermediate, "down_proj"),
                       M,
                       H,
                       q_width,
                       intermediate};
    TORCH_CHECK(l.q.N == q_width && l.k.N == kv_width && l.v.N == kv_width && l.o_proj.N == H &&
                    l.gate.N == intermediate && l.up_proj.N == intermediate && l.down_proj.N == H,
                "float_decoder_step: layer ", layer, ": projection sizes do not match the head counts and the first layer");
    return l;
  });
  const int64_t rows = shape.result_rows();  // a prompt: its last row
  const at::Tensor result = h.narrow(0, M - rows, rows);
  if (head.empty()) return result;
  TORCH_CHECK(head.size() == 3, "float_decoder_step: the head needs the final norm weight, the head weight and bias");
  const Linear lm = linear_of(head[1], head[2], H, "the head");
  std::vector<float> normed(rows * H);
  mfsdk::step::rms_norm_rows(result.data_ptr<float>(), rows, H, norm_of(head[0], H), static_cast<float>(head_eps),
                             normed.data());
  at::Tensor logits = at::empty({rows, lm.N}, hidden.options());
  products(normed.data(), rows, H, {{lm, logits.data_ptr<float>()}});
  return logits;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mfsdk, m) {
  // StepWeights(params, meta, head, head_meta): the float step's meta and head_meta are empty
  m.class_<FloatStepWeights>("StepWeights")
      .def(torch::init<std::vector<at::Tensor>, std::vector<int64_t>, std::vector<at::Tensor>, std::vector<int64_t>>());
  m.def("float_decoder_step(Tensor hidden, Tensor cos, Tensor sin, Tensor visible, Tensor(a!)[] caches, int position, "
        "__torch__.torch.classes.mfsdk.StepWeights weights, float eps, float scaling, int heads, int kv_heads, "
        "int head_dim, float head_eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(mfsdk, CPU, m) { m.impl("float_decoder_step", &float_decoder_step); }
