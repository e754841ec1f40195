// Float32 layer ops for eager forwards on the CPU (prompts): mfsdk::rms_norm.
//
// ATen runs RMSNorm as six ops (square, mean, add, rsqrt, two products), each a pass over the activations: 3% of
// SmolLM2's 512-token prefill on one Zen 4 core. This is the decoder step's own one-pass norm (decoder_layers.h),
// so a prompt and a decoding step normalise alike.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

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

}  // namespace

TORCH_LIBRARY_FRAGMENT(mfsdk, m) { m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor"); }

TORCH_LIBRARY_IMPL(mfsdk, CPU, m) { m.impl("rms_norm", &rms_norm); }
