#include "runtime/ops/attention.h"

#include <cmath>
#include <cstdint>

#include "runtime/cpu/attention.h"
#include "runtime/ops/copy.h"
#if WICK_HAS_CUDA
#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_api.h"
#endif

namespace wick {
namespace {

const char* const op = "scaled_dot_product_attention";

void validate(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  WICK_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k, v must be [B, H, L, D], got q ",
             q.describe(), ", k ", k.describe(), ", v ", v.describe());
  WICK_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             ": q, k, v must share one floating dtype, got q ", q.describe(), ", k ", k.describe(), ", v ",
             v.describe());
  WICK_CHECK(k.device() == q.device() && v.device() == q.device(), op, ": q ", q.describe(), ", k ", k.describe(),
             " and v ", v.describe(), " must be on one device");
  WICK_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == q.size(1) && v.size(1) == q.size(1),
             op, ": batch and head counts differ: q ", q.describe(), ", k ", k.describe(), ", v ", v.describe());
  WICK_CHECK(k.size(3) == q.size(3), op, ": head dim of q ", q.describe(), " and k ", k.describe(), " differ");
  WICK_CHECK(v.size(2) == k.size(2), op, ": k ", k.describe(), " and v ", v.describe(),
             " differ in the number of keys");
  WICK_CHECK(q.size(3) >= 1, op, ": head dim must be at least 1, got ", q.describe());
  if (!mask.defined()) return;
  WICK_CHECK(mask.dtype() == DType::U8 || is_floating(mask.dtype()), op,
             ": mask must be u8 (nonzero = keep) or floating (additive), got ", mask.describe());
  WICK_CHECK(mask.device() == q.device(), op, ": mask ", mask.describe(), " is on another device than q ",
             q.describe());
  WICK_CHECK(mask.dim() <= 4, op, ": mask ", mask.describe(), " has more than 4 axes");
  Shape scores = {q.size(0), q.size(1), q.size(2), k.size(2)};
  WICK_CHECK(broadcast_shapes(mask.shape(), scores, op) == scores, op, ": mask ", mask.describe(),
             " does not broadcast to the scores ", scores);
}

// The mask ready for a kernel: U8 as is, floating cast to `additive_dtype`, broadcast to the scores.
Tensor prepare_mask(const Tensor& mask, DType additive_dtype, const Shape& scores) {
  if (!mask.defined()) return mask;
  Tensor m = (mask.dtype() == DType::U8 || mask.dtype() == additive_dtype) ? mask : cast(mask, additive_dtype);
  return m.expand(scores);
}

#if WICK_HAS_CUDA
bool cudnn_eligible(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  int64_t d = q.size(3), dv = v.size(3);
  return cuda::cudnn_attention_compiled() && (q.dtype() == DType::BF16 || q.dtype() == DType::F16) &&
         !mask.defined() && d % 8 == 0 && dv % 8 == 0 && d >= 8 && dv >= 8 && d <= 128 && dv <= 128 && q.size(2) >= 1 &&
         k.size(2) >= 1 && q.numel() > 0;
}

// cuDNN wants unit stride on the head dim, 16-byte aligned rows and base pointer.
Tensor aligned_for_cudnn(const Tensor& t) {
  const Strides& s = t.strides();
  bool ok = s[3] == 1 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0 &&
            reinterpret_cast<uintptr_t>(t.data()) % 16 == 0;
  return ok ? t : t.clone();
}

void fill_strides(int64_t (&to)[4], const Strides& from) {
  for (int i = 0; i < 4; ++i) to[i] = from[static_cast<size_t>(i)];
}
#endif

}  // namespace

std::string attention_backend_name(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  validate(q, k, v, mask);
  if (q.device().is_cpu()) return "cpu";
#if WICK_HAS_CUDA
  if (cudnn_eligible(q, k, v, mask)) return "cudnn";
#endif
  return "cuda_kernel";
}

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                             std::optional<double> scale, bool is_causal) {
  validate(q, k, v, mask);
  const int64_t batch = q.size(0), heads = q.size(1), n_q = q.size(2), n_k = k.size(2), d = q.size(3),
                dv = v.size(3);
  const double softmax_scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  const Shape scores = {batch, heads, n_q, n_k};
  const Device device = q.device();
  const DType math_dtype = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor logsumexp = Tensor::empty({batch, heads, n_q}, math_dtype, device);
  Tensor m = prepare_mask(mask, math_dtype, scores);
  int64_t mask_strides[4] = {0, 0, 0, 0};
  if (m.defined())
    for (int i = 0; i < 4; ++i) mask_strides[i] = m.strides()[static_cast<size_t>(i)];

  if (device.is_cpu()) {
    auto prepare = [&](const Tensor& t) { return t.dtype() == math_dtype ? t.contiguous() : cast(t, math_dtype); };
    Tensor qc = prepare(q), kc = prepare(k), vc = prepare(v);
    Tensor out = Tensor::empty({batch, heads, n_q, dv}, math_dtype, device);
    cpu::AttentionDims dims{batch, heads, n_q, n_k, d, dv};
    if (out.numel() > 0 || logsumexp.numel() > 0)
      cpu::attention_forward(math_dtype, qc.data(), kc.data(), vc.data(), m.defined() ? m.data() : nullptr,
                             m.defined() ? m.dtype() : DType::U8, mask_strides, dims, is_causal, softmax_scale,
                             out.data(), logsumexp.data());
    return {out.dtype() == q.dtype() ? out : cast(out, q.dtype()), logsumexp};
  }
#if WICK_HAS_CUDA
  cuda::set_device(device.index);
  void* stream = current_stream(device).handle;
  Tensor out = Tensor::empty({batch, heads, n_q, dv}, q.dtype(), device);
  cuda::AttentionDims dims;
  dims.batch = batch, dims.heads = heads, dims.n_queries = n_q, dims.n_keys = n_k, dims.head_dim = d,
  dims.value_dim = dv;
  fill_strides(dims.mask_strides, m.defined() ? m.strides() : Strides{0, 0, 0, 0});
  if (cudnn_eligible(q, k, v, mask)) {
    Tensor qa = aligned_for_cudnn(q), ka = aligned_for_cudnn(k), va = aligned_for_cudnn(v);
    fill_strides(dims.q_strides, qa.strides());
    fill_strides(dims.k_strides, ka.strides());
    fill_strides(dims.v_strides, va.strides());
    if (cuda::attention_forward_cudnn(device.index, q.dtype(), qa.data(), ka.data(), va.data(), dims, is_causal,
                                      static_cast<float>(softmax_scale), out.data(), logsumexp.data_as<float>(),
                                      stream))
      return {out, logsumexp};
  }
  WICK_CHECK(d <= cuda::attention_kernel_max_head_dim && dv <= cuda::attention_kernel_max_head_dim, op,
             ": the CUDA attention kernel takes head dims up to ", cuda::attention_kernel_max_head_dim, ", got q ",
             q.describe(), ", v ", v.describe());
  fill_strides(dims.q_strides, q.strides());
  fill_strides(dims.k_strides, k.strides());
  fill_strides(dims.v_strides, v.strides());
  cuda::attention_forward(q.dtype(), q.data(), k.data(), v.data(), m.defined() ? m.data() : nullptr,
                          m.defined() ? m.dtype() : DType::U8, dims, is_causal, softmax_scale, out.data(),
                          logsumexp.data(), stream);
  return {out, logsumexp};
#else
  WICK_FAIL(Usage, op, ": ", q.describe(), " is on a CUDA device but wick was built without CUDA");
#endif
}

}  // namespace wick
