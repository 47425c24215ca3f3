#include "engine/optim/flat_optimizers.h"

#include <cmath>

#include "engine/optim/flat_optimizer_kernels.h"
#include "engine/optim/quantization_maps.h"
#include "runtime/ops/copy.h"
#if WICK_HAS_CUDA
#include "runtime/cuda/cuda_api.h"
#endif

namespace wick {

namespace om = optim_math;

bool use_8bit_state(int64_t n_elements_of_whole_parameter) {
  return n_elements_of_whole_parameter >= min_8bit_state_elements;
}

int64_t n_quantization_blocks(int64_t n) { return (n + quantization_block_size - 1) / quantization_block_size; }

namespace {

void check_buffer(const char* op, const char* name, const Tensor& t, DType dtype, int64_t numel, Device device) {
  WICK_CHECK(t.defined(), op, ": ", name, " is undefined");
  WICK_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ", t.describe());
  WICK_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.describe());
  WICK_CHECK(t.numel() == numel, op, ": ", name, " must have ", numel, " elements, got ", t.describe());
  WICK_CHECK(t.device() == device, op, ": ", name, " is on ", t.device().str(), ", the parameter on ",
             device.str());
}

void check_param_and_grad(const char* op, const Tensor& p, const Tensor& g) {
  WICK_CHECK(p.defined() && g.defined(), op, ": parameter or gradient is undefined");
  check_buffer(op, "p", p, DType::F32, p.numel(), p.device());
  check_buffer(op, "g", g, DType::F32, p.numel(), p.device());
}

void check_count(const char* op, const Tensor& count, Device device) {
  if (!count.defined()) return;
  WICK_CHECK(count.dtype() == DType::I64 && count.numel() == 1 && count.device() == device, op,
             ": nonfinite_count must be an i64 scalar on ", device.str(), ", got ", count.describe());
}

void check_hyper(const char* op, const AdamWHyper& h) {
  WICK_CHECK(h.step >= 1, op, ": step is 1-based, got ", h.step);
  WICK_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f && h.beta2 >= 0.0f && h.beta2 < 1.0f, op,
             ": betas must lie in [0, 1), got (", h.beta1, ", ", h.beta2, ")");
  WICK_CHECK(h.lr >= 0.0f && h.eps >= 0.0f && h.weight_decay >= 0.0f, op,
             ": lr, eps and weight_decay must be >= 0, got lr ", h.lr, ", eps ", h.eps, ", weight_decay ",
             h.weight_decay);
}

om::AdamScalars adam_scalars(const AdamWHyper& h) {
  om::AdamScalars s;
  double t = static_cast<double>(h.step);
  double bias1 = 1.0 - std::pow(static_cast<double>(h.beta1), t);
  double bias2_sqrt = std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t));
  s.beta1 = h.beta1;
  s.beta2 = h.beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  s.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  s.step_size = static_cast<float>(-static_cast<double>(h.lr) * bias2_sqrt / bias1);
  s.eps_term = static_cast<float>(static_cast<double>(h.eps) * bias2_sqrt);
  s.neg_step = static_cast<float>(-static_cast<double>(h.lr) / bias1);
  s.bc2_sqrt = static_cast<float>(bias2_sqrt);
  s.eps = h.eps;
  s.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weight_decay));
  s.apply_decay = h.weight_decay > 0.0f;
  return s;
}

// Runs `cpu_kernel()` (returning the count) or `cuda_kernel(count_ptr, stream)`, then reports
// the count as the header describes.
template <typename CpuKernel, typename CudaKernel>
int64_t run_step(Device device, const Tensor& nonfinite_count, const CpuKernel& cpu_kernel,
                 const CudaKernel& cuda_kernel) {
  if (device.is_cpu()) {
    int64_t n_nonfinite = cpu_kernel();
    if (!nonfinite_count.defined()) return n_nonfinite;
    nonfinite_count.data_as<int64_t>()[0] += n_nonfinite;
    return -1;
  }
#if WICK_HAS_CUDA
  cuda::set_device(device.index);
  Tensor count = nonfinite_count.defined() ? nonfinite_count : Tensor::scalar(0.0, DType::I64, device);
  cuda_kernel(count.data_as<int64_t>(), current_stream(device).handle);
  if (nonfinite_count.defined()) return -1;
  return static_cast<int64_t>(count.item());  // synchronous device -> host copy
#else
  (void)cuda_kernel;
  WICK_CHECK(false, "optimizer step on ", device.str(), ": wick was built without CUDA");
  return 0;
#endif
}

}  // namespace

int64_t sgd_step(const Tensor& p, const Tensor& g, const Tensor& momentum_buffer, const SgdHyper& hyper,
                 const Tensor& nonfinite_count) {
  const char* op = "sgd_step";
  check_param_and_grad(op, p, g);
  check_count(op, nonfinite_count, p.device());
  WICK_CHECK(hyper.step >= 1, op, ": step is 1-based, got ", hyper.step);
  WICK_CHECK(hyper.lr >= 0.0f && hyper.momentum >= 0.0f && hyper.weight_decay >= 0.0f, op,
             ": lr, momentum and weight_decay must be >= 0");
  WICK_CHECK(!hyper.nesterov || (hyper.momentum > 0.0f && hyper.dampening == 0.0f), op,
             ": nesterov momentum requires momentum > 0 and dampening 0");
  om::SgdScalars s;
  s.lr = hyper.lr;
  s.momentum = hyper.momentum;
  s.one_minus_dampening = static_cast<float>(1.0 - static_cast<double>(hyper.dampening));
  s.weight_decay = hyper.weight_decay;
  s.nesterov = hyper.nesterov;
  s.first_step = hyper.step == 1;
  s.has_momentum = hyper.momentum != 0.0f;
  float* buf = nullptr;
  if (s.has_momentum) {
    check_buffer(op, "momentum_buffer", momentum_buffer, DType::F32, p.numel(), p.device());
    buf = momentum_buffer.data_as<float>();
  }
  int64_t n = p.numel();
  float* pp = p.data_as<float>();
  const float* gp = g.data_as<float>();
  return run_step(
      p.device(), nonfinite_count, [&] { return cpu::sgd_step(pp, gp, buf, n, s); },
      [&](int64_t* count, void* stream) {
#if WICK_HAS_CUDA
        cuda::sgd_step(pp, gp, buf, n, s, count, stream);
#endif
      });
}

int64_t adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWHyper& hyper,
                   const Tensor& nonfinite_count) {
  const char* op = "adamw_step";
  check_param_and_grad(op, p, g);
  check_count(op, nonfinite_count, p.device());
  check_hyper(op, hyper);
  check_buffer(op, "m", m, DType::F32, p.numel(), p.device());
  check_buffer(op, "v", v, DType::F32, p.numel(), p.device());
  om::AdamScalars s = adam_scalars(hyper);
  int64_t n = p.numel();
  float* pp = p.data_as<float>();
  const float* gp = g.data_as<float>();
  float* mp = m.data_as<float>();
  float* vp = v.data_as<float>();
  return run_step(
      p.device(), nonfinite_count, [&] { return cpu::adamw32_step(pp, gp, mp, vp, n, s); },
      [&](int64_t* count, void* stream) {
#if WICK_HAS_CUDA
        cuda::adamw32_step(pp, gp, mp, vp, n, s, count, stream);
#endif
      });
}

int64_t adamw8bit_step(const Tensor& p, const Tensor& g, const Tensor& m_codes, const Tensor& v_codes,
                       const Tensor& absmax_m, const Tensor& absmax_v, const AdamWHyper& hyper,
                       const Tensor& nonfinite_count) {
  const char* op = "adamw8bit_step";
  check_param_and_grad(op, p, g);
  check_count(op, nonfinite_count, p.device());
  check_hyper(op, hyper);
  int64_t n = p.numel(), n_blocks = n_quantization_blocks(n);
  check_buffer(op, "m_codes", m_codes, DType::U8, n, p.device());
  check_buffer(op, "v_codes", v_codes, DType::U8, n, p.device());
  check_buffer(op, "absmax_m", absmax_m, DType::F32, n_blocks, p.device());
  check_buffer(op, "absmax_v", absmax_v, DType::F32, n_blocks, p.device());
  om::AdamScalars s = adam_scalars(hyper);
  Tensor maps = quantization_maps_tensor(p.device());
  float* pp = p.data_as<float>();
  const float* gp = g.data_as<float>();
  uint8_t* mc = m_codes.data_as<uint8_t>();
  uint8_t* vc = v_codes.data_as<uint8_t>();
  float* am = absmax_m.data_as<float>();
  float* av = absmax_v.data_as<float>();
  const float* mp = maps.data_as<float>();
  return run_step(
      p.device(), nonfinite_count, [&] { return cpu::adamw8bit_step(pp, gp, mc, vc, am, av, mp, n, s); },
      [&](int64_t* count, void* stream) {
#if WICK_HAS_CUDA
        cuda::adamw8bit_step(pp, gp, mc, vc, am, av, mp, n, s, count, stream);
#endif
      });
}

}  // namespace wick
