#include "runtime/ops/attention.h"

#include <cmath>
#include <cstdint>

#include "runtime/cpu/attention.h"
#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/ops/attention_problem.h"
#include "runtime/ops/copy.h"

namespace wick {
namespace {

const char* const op = "scaled_dot_product_attention";

}  // namespace

std::string attention_backend_name(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  validate_attention(op, q, k, v, mask);
  if (q.device().is_cpu()) return "cpu";
  if (attention_cudnn_eligible(q, k, v, mask)) return "cudnn";
  return "cuda_kernel";
}

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                             std::optional<double> scale, bool is_causal) {
  validate_attention(op, q, k, v, mask);
  const int64_t batch = q.size(0), heads = q.size(1), n_q = q.size(2), n_k = k.size(2), d = q.size(3),
                dv = v.size(3);
  const double softmax_scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  const Shape scores = {batch, heads, n_q, n_k};
  const Device device = q.device();
  const DType math_dtype = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor logsumexp = Tensor::empty({batch, heads, n_q}, math_dtype, device);
  Tensor m = prepare_attention_mask(mask, math_dtype, scores);
  int64_t mask_strides[4] = {0, 0, 0, 0};
  if (m.defined())
    for (int i = 0; i < 4; ++i) mask_strides[i] = m.strides()[static_cast<size_t>(i)];

  if (device.is_cpu()) {
    // q, k, v read in place when their rows are BLAS matrices (head splits of projections are);
    // out takes q's memory order, so merging the heads afterwards is a view.
    Tensor qc = cpu_attention_operand(q, math_dtype), kc = cpu_attention_operand(k, math_dtype),
           vc = cpu_attention_operand(v, math_dtype);
    Tensor out = empty_in_layout_of(qc, {batch, heads, n_q, dv}, math_dtype);
    cpu::AttentionDims dims{batch, heads, n_q, n_k, d, dv};
    cpu::AttentionLayouts layouts{.q = *cpu_row_layout(qc), .k = *cpu_row_layout(kc), .v = *cpu_row_layout(vc),
                                  .out = *cpu_row_layout(out)};
    if (out.numel() > 0 || logsumexp.numel() > 0)
      cpu::attention_forward(math_dtype, qc.data(), kc.data(), vc.data(), layouts, m.defined() ? m.data() : nullptr,
                             m.defined() ? m.dtype() : DType::U8, mask_strides, dims, is_causal, softmax_scale,
                             out.data(), logsumexp.data());
    return {out.dtype() == q.dtype() ? out : cast(out, q.dtype()), logsumexp};
  }
  cuda::set_device(device.index);
  void* stream = current_stream(device).handle;
  cuda::AttentionDims dims;
  dims.batch = batch, dims.heads = heads, dims.n_queries = n_q, dims.n_keys = n_k, dims.head_dim = d,
  dims.value_dim = dv;
  fill_attention_strides(dims.mask_strides, m.defined() ? m.strides() : Strides{0, 0, 0, 0});
  if (attention_cudnn_eligible(q, k, v, mask)) {
    Tensor qa = aligned_for_cudnn(q), ka = aligned_for_cudnn(k), va = aligned_for_cudnn(v);
    fill_attention_strides(dims.q_strides, qa.strides());
    fill_attention_strides(dims.k_strides, ka.strides());
    fill_attention_strides(dims.v_strides, va.strides());
    // out in q's memory order: q from a fused [B, L, 3, H, D] projection gives out as [B, L, H, D] memory.
    Tensor out = empty_in_layout_of(q, {batch, heads, n_q, dv}, q.dtype());
    fill_attention_strides(dims.out_strides, out.strides());
    if (cuda::attention_forward_cudnn(device.index, q.dtype(), qa.data(), ka.data(), va.data(), dims, is_causal,
                                      static_cast<float>(softmax_scale), out.data(), logsumexp.data_as<float>(),
                                      stream))
      return {out, logsumexp};
  }
  Tensor out = Tensor::empty({batch, heads, n_q, dv}, q.dtype(), device);
  WICK_CHECK(d <= cuda::attention_kernel_max_head_dim && dv <= cuda::attention_kernel_max_head_dim, op,
             ": the CUDA attention kernel takes head dims up to ", cuda::attention_kernel_max_head_dim, ", got q ",
             q.describe(), ", v ", v.describe());
  fill_attention_strides(dims.q_strides, q.strides());
  fill_attention_strides(dims.k_strides, k.strides());
  fill_attention_strides(dims.v_strides, v.strides());
  cuda::attention_forward(q.dtype(), q.data(), k.data(), v.data(), m.defined() ? m.data() : nullptr,
                          m.defined() ? m.dtype() : DType::U8, dims, is_causal, softmax_scale, out.data(),
                          logsumexp.data(), stream);
  return {out, logsumexp};
}

}  // namespace wick
