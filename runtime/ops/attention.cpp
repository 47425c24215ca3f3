#include "runtime/ops/attention.h"

#include <cmath>
#include <cstdint>

#include "runtime/cpu/attention.h"
#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/ops/attention_problem.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"

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

// ---- gradients ----

namespace {

const char* const backward_op = "scaled_dot_product_attention_backward";

void validate(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& logsumexp, const Tensor& mask) {
  validate_attention(backward_op, q, k, v, mask);
  const Shape out_shape = {q.size(0), q.size(1), q.size(2), v.size(3)};
  const Shape lse_shape = {q.size(0), q.size(1), q.size(2)};
  for (const Tensor* t : {&grad_out, &out, &logsumexp}) {
    WICK_CHECK(t->defined() && is_floating(t->dtype()), backward_op,
               ": grad_out, out and logsumexp must be floating, got ",
               t->defined() ? t->describe() : std::string("an undefined tensor"));
    WICK_CHECK(t->device() == q.device(), backward_op, ": ", t->describe(), " is on another device than q ",
               q.describe());
  }
  WICK_CHECK(grad_out.shape() == out_shape && out.shape() == out_shape, backward_op, ": grad_out ",
             grad_out.describe(), " and out ", out.describe(), " must be ", out_shape, " for q ", q.describe(), ", v ",
             v.describe());
  WICK_CHECK(logsumexp.shape() == lse_shape, backward_op, ": logsumexp ", logsumexp.describe(), " must be ",
             lse_shape, " for q ", q.describe());
}

}  // namespace

std::string attention_backward_backend_name(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  validate_attention(backward_op, q, k, v, mask);
  if (q.device().is_cpu()) return "cpu";
  if (attention_cudnn_eligible(q, k, v, mask)) return "cudnn";
  return "cuda_kernel";
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                                                     const Tensor& mask, std::optional<double> scale,
                                                     bool is_causal) {
  validate(grad_out, q, k, v, out, logsumexp, mask);
  const int64_t batch = q.size(0), heads = q.size(1), n_q = q.size(2), n_k = k.size(2), d = q.size(3),
                dv = v.size(3);
  const double softmax_scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  const Device device = q.device();
  const DType math_dtype = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor m = prepare_attention_mask(mask, math_dtype, {batch, heads, n_q, n_k});
  // Contiguous in `dtype` (a no-op when it already is).
  auto prepare = [](const Tensor& t, DType dtype) { return t.dtype() == dtype ? t.contiguous() : cast(t, dtype); };
  Tensor lse = prepare(logsumexp, math_dtype);

  if (device.is_cpu()) {
    int64_t mask_strides[4] = {0, 0, 0, 0};
    if (m.defined())
      for (int i = 0; i < 4; ++i) mask_strides[i] = m.strides()[static_cast<size_t>(i)];
    // Operands read in place where their rows are BLAS matrices; the gradients take the layouts of
    // q, k and v, so the head permutes around attention stay views in backward too.
    Tensor go = cpu_attention_operand(without_broadcast(grad_out), math_dtype),
           qc = cpu_attention_operand(q, math_dtype), kc = cpu_attention_operand(k, math_dtype),
           vc = cpu_attention_operand(v, math_dtype), oc = cpu_attention_operand(without_broadcast(out), math_dtype);
    Tensor grad_q = empty_in_layout_of(qc, q.shape(), math_dtype), grad_k = empty_in_layout_of(kc, k.shape(), math_dtype),
           grad_v = empty_in_layout_of(vc, v.shape(), math_dtype);
    cpu::AttentionDims dims{batch, heads, n_q, n_k, d, dv};
    cpu::AttentionBackwardLayouts layouts{.grad_out = *cpu_row_layout(go), .q = *cpu_row_layout(qc),
                                          .k = *cpu_row_layout(kc), .v = *cpu_row_layout(vc),
                                          .out = *cpu_row_layout(oc), .grad_q = *cpu_row_layout(grad_q),
                                          .grad_k = *cpu_row_layout(grad_k), .grad_v = *cpu_row_layout(grad_v)};
    cpu::attention_backward(math_dtype, go.data(), qc.data(), kc.data(), vc.data(), oc.data(), lse.data(), layouts,
                            m.defined() ? m.data() : nullptr, m.defined() ? m.dtype() : DType::U8, mask_strides, dims,
                            is_causal, softmax_scale, grad_q.data(), grad_k.data(), grad_v.data());
    auto back = [&](const Tensor& g) { return g.dtype() == q.dtype() ? g : cast(g, q.dtype()); };
    return {back(grad_q), back(grad_k), back(grad_v)};
  }
  cuda::set_device(device.index);
  void* stream = current_stream(device).handle;
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0 || grad_out.numel() == 0) {
    // Some extent is 0: every gradient is empty or (no keys, empty values) identically 0.
    return {zeros(q.shape(), q.dtype(), device), zeros(k.shape(), q.dtype(), device),
            zeros(v.shape(), q.dtype(), device)};
  }
  Tensor go = grad_out.dtype() == q.dtype() ? grad_out : cast(grad_out, q.dtype());
  Tensor o = out.dtype() == q.dtype() ? out : cast(out, q.dtype());
  cuda::AttentionBackwardDims dims;
  cuda::AttentionDims& f = dims.forward;
  f.batch = batch, f.heads = heads, f.n_queries = n_q, f.n_keys = n_k, f.head_dim = d, f.value_dim = dv;
  fill_attention_strides(f.mask_strides, m.defined() ? m.strides() : Strides{0, 0, 0, 0});
  if (attention_cudnn_eligible(q, k, v, mask)) {
    // out and grad_out read in place (any layout with a unit last stride), except broadcast views
    // (a gradient may arrive with zero strides). The gradients take the layouts of q, k and v.
    Tensor qa = aligned_for_cudnn(q), ka = aligned_for_cudnn(k), va = aligned_for_cudnn(v),
           oa = aligned_for_cudnn(without_broadcast(o)), ga = aligned_for_cudnn(without_broadcast(go));
    Tensor gq = empty_in_layout_of(q, q.shape(), q.dtype()), gk = empty_in_layout_of(k, k.shape(), q.dtype()),
           gv = empty_in_layout_of(v, v.shape(), q.dtype());
    fill_attention_strides(dims.grad_q_strides, gq.strides());
    fill_attention_strides(dims.grad_k_strides, gk.strides());
    fill_attention_strides(dims.grad_v_strides, gv.strides());
    fill_attention_strides(f.q_strides, qa.strides());
    fill_attention_strides(f.k_strides, ka.strides());
    fill_attention_strides(f.v_strides, va.strides());
    fill_attention_strides(dims.out_strides, oa.strides());
    fill_attention_strides(dims.grad_out_strides, ga.strides());
    if (cuda::attention_backward_cudnn(device.index, q.dtype(), ga.data(), qa.data(), ka.data(), va.data(), oa.data(),
                                       lse.data_as<float>(), dims, is_causal, static_cast<float>(softmax_scale),
                                       gq.data(), gk.data(), gv.data(), stream))
      return {gq, gk, gv};
  }
  Tensor grad_q = Tensor::empty(q.shape(), q.dtype(), device), grad_k = Tensor::empty(k.shape(), q.dtype(), device),
         grad_v = Tensor::empty(v.shape(), q.dtype(), device);
  WICK_CHECK(d <= cuda::attention_kernel_max_head_dim && dv <= cuda::attention_kernel_max_head_dim, backward_op,
             ": the CUDA attention backward kernels take head dims up to ", cuda::attention_kernel_max_head_dim,
             ", got q ", q.describe(), ", v ", v.describe());
  fill_attention_strides(f.q_strides, q.strides());
  fill_attention_strides(f.k_strides, k.strides());
  fill_attention_strides(f.v_strides, v.strides());
  fill_attention_strides(dims.out_strides, o.strides());
  fill_attention_strides(dims.grad_out_strides, go.strides());
  Tensor row_dot = Tensor::empty({batch, heads, n_q}, math_dtype, device);
  cuda::attention_backward(q.dtype(), go.data(), q.data(), k.data(), v.data(), o.data(), lse.data(),
                           m.defined() ? m.data() : nullptr, m.defined() ? m.dtype() : DType::U8, dims, is_causal,
                           softmax_scale, row_dot.data(), grad_q.data(), grad_k.data(), grad_v.data(), stream);
  return {grad_q, grad_k, grad_v};
}
}  // namespace wick
