#include "runtime/ops/copy.h"

#include "runtime/cpu/copy.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/memory.h"

namespace wick {

void copy_into(const Tensor& dst, const Tensor& src) {
  WICK_CHECK(dst.defined() && src.defined(), "copy_into: undefined tensor");
  if (dst.numel() == 0) return;
  if (src.device() != dst.device()) {
    // Stage: make src contiguous in dst's dtype on its own device, move the bytes, then copy
    // (broadcasting and striding) on the destination device.
    Tensor staged_src = src.to(dst.dtype()).contiguous();
    Tensor moved = Tensor::empty(staged_src.shape(), dst.dtype(), dst.device());
    Device transfer_device = dst.device().is_cuda() ? dst.device() : src.device();
    copy_bytes(moved.data(), moved.device(), staged_src.data(), staged_src.device(), moved.nbytes(),
               current_stream(transfer_device));
    copy_into(dst, moved);
    return;
  }
  Tensor expanded = src.expand(dst.shape());
  Shape shape = dst.shape();
  Strides dst_strides = dst.strides(), src_strides = expanded.strides();
  coalesce_axes(shape, {&dst_strides, &src_strides});
  StridedView dst_view = make_strided_view(shape, dst_strides, "copy");
  StridedView src_view = make_strided_view(shape, src_strides, "copy");
  if (dst.device().is_cpu()) {
    cpu::copy_strided(dst.data(), dst.dtype(), dst_view, expanded.data(), src.dtype(), src_view, dst.numel());
    return;
  }
  cuda::set_device(dst.device().index);
  cuda::copy_strided(dst.data(), dst.dtype(), dst_view, expanded.data(), src.dtype(), src_view, dst.numel(),
                     current_stream(dst.device()).handle);
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  copy_into(out, x);
  return out;
}

}  // namespace wick
